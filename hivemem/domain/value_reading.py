"""Values read off a sentence (pure): times, dates, weekdays, amounts with their unit or the
words they measure, versions, image tags ("python:3.11-slim"), paths, codes (a seat "14C")
and names, each normalised ("7pm" -> 19:00, "$1,240.00" -> 1240), and a sentence's content
words (what says two turns are about one thing).

The value lineage (`hivemem.domain.lineage`) compares these across the turns of a session.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass

_TIME = re.compile(r"(?<![\w:.])(\d{1,2}:\d{2})(?:\s?([ap])\.?m\b)?(?![\w:])", re.IGNORECASE)
# "7pm", "6 a.m.": a time without minutes.
_HOUR = re.compile(r"(?<![\w:.$€£])(\d{1,2})\s?([ap])\.?m\b\.?", re.IGNORECASE)
_AMOUNT = re.compile(
    r"(?<![\w.,/:#-])([$€£]?)(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)\s?"
    r"(k|m|bn|%|gb|mb|tb|ms|s|sec|secs|seconds?|min|mins|minutes?|h|hrs?|hours?|days?"
    r"|weeks?|months?|years?|x|rows|users|people|nodes|replicas|gb/s|g|kg|lbs?|oz|ml|km|cm|mm"
    r"|miles?|kids|guests|students|seats|places|points|engineers|specs|lines)?(?![\w]|\.\d)",
    re.IGNORECASE)
_VERSION = re.compile(r"(?<![\w./-])(v\d+(?:\.\d+)*|\d+\.\d+(?:\.\d+)+)(?![\w.])", re.IGNORECASE)
_NAMED_NUMBER = re.compile(r"(?<![\w.-])([A-Z][A-Za-z]+)\s(\d+(?:\.\d+)*)"
                           r"(?!\w|[.%:/-]\w|%|\s?(?:k|m|gb|mb|ms)\b)")
# A seat, room, gate or bay: digits and one capital letter ("14C", "Room 2A", "gate 22B"),
# not a unit's ("5L", "100W", "2T", "8G"), nor a letter read as a digit (I, O).
_CODE = re.compile(r"(?<![\w.,/:#$€£-])(\d{1,4}[A-FHJKNPQRSUXYZ])(?![\w'-])")
_PATH = re.compile(r"(?<![\w/])(/[a-z0-9][\w./-]*[a-z0-9])", re.IGNORECASE)
# An image or package reference, `name:tag` with no space ("python:3.11-slim",
# "node:20-alpine", "ghcr.io/acme/api:1.4.2"): the tag is the version of that name, the value
# of its own slot. The tag starts with a digit (a word after the colon is a label's value,
# "latest" says no version). A host's port is written the same way ("localhost:8080",
# "db:5432"): a bare number of three digits or more is read as one, not a tag (a tag is a
# major version, 16, or dotted, 7.2).
_IMAGE = re.compile(r"(?<![\w./:@-])((?:[a-z0-9][a-z0-9.-]*/)*[a-z][a-z0-9_.-]*[a-z0-9])"
                    r":(\d+(?:\.\d+)*(?:-[a-z][a-z0-9]*(?:[.-][a-z0-9]+)*)?)(?![\w:/@]|[.-]\w)",
                    re.IGNORECASE)
_MONTH = ("jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
          "|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?")
# "the 14th" is a date; "the 5th floor" is not.
_ORDINAL = re.compile(r"\b(?:the\s+)(\d{1,2})(?:st|nd|rd|th)\b(?!\s+(?:floor|row|place|time"
                      r"|grade|year|round|level|storey|story|seat|gate|platform|pick|percentile"
                      r"|edition|version|birthday|anniversary|person|one|team|item|line|step"
                      r"|attempt|try|spot|position|century|week|month|day|hour|minute)\b)",
                      re.IGNORECASE)
_DATE = re.compile(rf"\b({_MONTH})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?\b"
                   rf"|\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MONTH})\b", re.IGNORECASE)
# The word a bare number is the value of ("max 20", "burst of 20", "max to 30").
_LINK = (r"(?:is|are|was|were|of|to|at|set|now|be|from|raised|lowered|moved|goes|went|stays"
         r"|becomes|than|over|under|above|below|about|around|roughly|only|just|exactly)")
_LABEL = re.compile(rf"(?:(?<![a-z])([a-z][a-z_]{{2,}})\s+)?(?<![a-z])(?!{_LINK}\b)"
                    rf"([a-z][a-z_]{{2,}})(?:[:=]\s*|\s+)"
                    rf"(?:(?:{_LINK}|=|:)\s+){{0,3}}$", re.IGNORECASE)
_DAY = re.compile(r"\b(mon|tues|wednes|thurs|fri|satur|sun)days?\b", re.IGNORECASE)
# Letters of the Latin alphabets, accented ones too ("Björn", "Lucía", "Tomás"): a name
# with an accent is a name like any other, not two pieces of one.
_UPPER = "A-ZÀ-ÖØ-ÞĀ-ž"
_LETTER = "A-Za-zÀ-ÖØ-öø-ÿĀ-ž"
_WORD = re.compile(rf"[{_LETTER}][{_LETTER}0-9+#-]*[{_LETTER}0-9+#]|[{_LETTER}]")
# Acronyms and inner capitals anywhere ("GA", "MySQL"); other capitalised words not at the
# start of a sentence or of a list item (there, any word is).
_CAPITAL = re.compile(r"(?<![\w'])([A-Z]{2,}[0-9]*|[A-Z][a-z0-9]+[A-Z][A-Za-z0-9]*)(?![\w'])"
                      rf"|(?<![\w'])(?<![.!?:\-*•)]\s)(?<!\n)(?<!^)([{_UPPER}][{_LETTER}0-9+#-]*"
                      rf"[{_LETTER}0-9+#])(?![\w'])")

# "from Opsgenie to incident.io": what a name moves to is a name, whatever its case.
_FROM_NAME_TO = re.compile(rf"\bfrom\s+[{_UPPER}][\w.-]*\s+(?:to|->|→)\s+"
                           r"([a-z][a-z0-9-]*(?:\.[a-z][a-z0-9-]*)*)(?![\w'])")

# Words that are never a value, even capitalised (sentence starts, greetings, fillers).
# Words that say how a number is meant, not what it is the version of ("Max 24 students").
_LABEL_WORDS = frozenset(("max", "maximum", "min", "minimum", "cap", "limit", "total", "about",
                          "around", "approx", "approximately", "up", "over", "under", "top",
                          "only", "just", "exactly", "roughly", "nearly", "almost", "and"))

_TITLE = re.compile(r"\b(?:Mr|Mrs|Ms|Mx|Dr|Prof|St)\.", re.IGNORECASE)
_COMMON = frozenset(re.findall(r"[\w']+", """
mr mrs ms mx dr prof
a an the i we you he she it they me us him her them my our your his its their this that these
those there here what which who whom whose when where why how yes no not ok okay sure thanks
thx thank please hi hey hello morning afternoon evening cool great good nice fine right
and or but so if then also just still now actually hmm meh wait sorry oh ah well yeah yep nope
done noted got understood agreed updated update set created changed moved kept added removed
is are was were be been being am do does did have has had will would can could should may
might must shall let lets let's all any some every each both either neither one two three
for to of in on at by with from about as into over after before since until per via
monday tuesday wednesday thursday friday saturday sunday today tomorrow yesterday tonight
mon tue tues wed thu thur thurs fri sat sun
january february march april may june july august september october november december
jan feb mar apr jun jul aug sep sept oct nov dec q1 q2 q3 q4 eu us uk utc am pm ok
fyi btw asap eta tbd pr prs api apis ui db id ids url http https json yaml csv sql
new old next last first second same other more less much many few
"""))

# Words too common to say that two turns are about one thing.
_STOP = _COMMON | frozenset(re.findall(r"[\w']+", """
use using used want need needs go going get gets make makes take takes put run runs keep
team thing things stuff way time times day week month year bit lot plan plans idea
think know like look see say said tell told ask asked call called let's it's that's
we're we'll i'll i'm you're they're don't doesn't can't won't isn't aren't
"""))

@dataclass(frozen=True, slots=True)
class Value:
    """One value a turn names: its kind ("time", "amount:<unit>", "version", "path",
    "tag:<image>", "name") and its normalised text."""

    kind: str
    text: str

    @property
    def key(self) -> str:
        return f"{self.kind}={self.text}"


def values_in(text: str) -> set[Value]:
    """The values `text` names (times, amounts with their units, versions, paths, names)."""
    found: set[Value] = set()
    spans: list[tuple[int, int]] = []

    def taken(start: int, end: int) -> bool:
        return any(s < end and start < e for s, e in spans)

    _paths(text, found, spans)
    for m in _TIME.finditer(text):
        if taken(*m.span()):
            continue
        hh, mm = m.group(1).split(":")
        hour = int(hh) % 12 + (12 if (m.group(2) or "").lower() == "p" else 0) \
            if m.group(2) else int(hh)
        found.add(Value("time", f"{hour}:{mm}"))
        spans.append(m.span())
    _hours(text, found, spans)
    for m in _DATE.finditer(text):
        month = (m.group(1) or m.group(4)).lower()[:3]
        found.add(Value("date", f"{month} {int(m.group(2) or m.group(3))}"))
        spans.append(m.span())
    for m in _ORDINAL.finditer(text):
        if not taken(*m.span()):
            found.add(Value("date", f"the {int(m.group(1))}"))
            spans.append(m.span())
    for m in _VERSION.finditer(text):
        if taken(*m.span()):
            continue
        found.add(Value("version", m.group(1).lower().lstrip("v")))
        spans.append(m.span())
    _named_numbers(text, found, spans)
    for m in _AMOUNT.finditer(text):
        if taken(*m.span()):
            continue
        # "$1,240.00" is $1,240 ("1,240" then ".00" read as another number once).
        number = re.sub(r"\.0+$", "", m.group(2).replace(",", ""))
        unit = (m.group(3) or "").lower()
        unit = "min" if unit == "m" and not m.group(1) else unit  # "pause 30m"; "$30m" is money
        scale = {"k": 1e3, "m": 1e6, "bn": 1e9}.get(unit)
        if scale is not None:
            number, unit = _plain(float(number) * scale), ""
        unit = unit.rstrip("s") if len(unit) > 2 else unit
        if unit in ("kid", "guest", "student", "seat", "place", "point", "engineer", "spec",
                    "line"):
            unit = "@" + unit  # what is counted names the slot ("18 kids")
        elif unit in ("", "row", "user", "people", "node", "replica", "x") and not m.group(1):
            label = _LABEL.search(text[max(0, m.start() - 40):m.start()])
            word = label.group(2).lower().replace("_", " ") if label else ""
            if word and word not in _STOP:
                # The thing it measures, up to two words ("export limit", "rate limit").
                before = (label.group(1) or "").lower() if label else ""
                unit = "@" + " ".join(_stem(w) for w in f"{before} {word}".split()
                                      if w not in _STOP)
            elif unit:
                unit = "@" + unit
        found.add(Value(f"amount:{'$' if m.group(1) else ''}{unit}", number))
        spans.append(m.span())
    _codes_and_days(text, found, spans)
    # "Mr. Haddad", "Dr. Lindqvist": the title's period ends no sentence (the name after it
    # is read as one), and the title is no value (spans keep their places).
    for m in _CAPITAL.finditer(_TITLE.sub(lambda t: t.group(0)[:-1] + " ", text)):
        word = m.group(1) or m.group(2)
        if word.lower() in _COMMON or taken(*m.span()):
            continue
        found.add(Value("name", word.lower()))
    _names_moved_to(text, found, spans)
    return found


@functools.lru_cache(maxsize=4096)
def written(value: Value) -> str:
    """A pattern for the ways `value` is written in lower-cased text: its normalised text
    is not always its words ("sep 9" is said "September 9" or "9th of Sept", "18:00" is
    said "6pm"), and what looks for it in a turn ("moved from X", "X was") must find it as
    said."""
    if value.kind == "date":
        first, number = value.text.split(" ")
        if first == "the":
            return rf"the\s+{number}(?:st|nd|rd|th)"
        month, nth = re.escape(first), rf"0?{number}(?:st|nd|rd|th)?(?!\d)"
        return (rf"(?:{month}[a-z]*\.?\s+{nth}"
                rf"|(?<!\d){nth}\s+(?:of\s+)?{month}[a-z]*)")
    if value.kind == "time":
        hh, mm = value.text.split(":")
        hour = int(hh)
        clock = rf"0?{hour}:{mm}(?!\d)"
        half = hour % 12 or 12
        meridiem = "p" if hour >= 12 else "a"
        spoken = rf"(?<!\d){half}(?::{mm})?\s?{meridiem}\.?m\b" if mm == "00" \
            else rf"(?<!\d){half}:{mm}\s?{meridiem}\.?m\b"
        return rf"(?:{clock}|{spoken})"
    if value.kind.startswith("amount:") and value.text.replace(".", "").isdigit():
        # "1,840" for 1840; "$45k" or "2.5m" for 45000 and 2500000.
        whole, _, cents = value.text.partition(".")
        said = [",?".join(whole) + (rf"\.{cents}" if cents else "") + r"(?![\d])"]
        for suffix, scale in (("k", 1_000), ("m", 1_000_000)):
            if not cents and int(whole) % scale == 0 and int(whole) >= scale:
                said.append(rf"{int(whole) // scale}\s?{suffix}\b")
        return rf"(?<![\d.,])(?:{'|'.join(said)})"
    if value.kind == "version":
        return rf"v?{re.escape(value.text)}"
    return re.escape(value.text)


@functools.lru_cache(maxsize=16_384)
def value_keys(text: str) -> frozenset[str]:
    """The keys of the values `text` names (memoized: recall reads the same candidates'
    texts again and again)."""
    return frozenset(v.key for v in values_in(text))


def _images(text: str, found: set[Value], spans: list[tuple[int, int]]) -> None:
    """ "python:3.11-slim": the tag, a value of the kind "tag:<name>" (two tags pair only
    when they are of one name: python:3.12 replaces python:3.11, not node:20)."""
    for m in _IMAGE.finditer(text):
        tag = m.group(2)
        if tag.isdigit() and len(tag) >= 3:
            continue  # a port
        found.add(Value(f"tag:{m.group(1).lower()}", tag.lower()))
        spans.append(m.span())


def _paths(text: str, found: set[Value], spans: list[tuple[int, int]]) -> None:
    """Image references ("python:3.11-slim", read first: their tags are no times or
    numbers), then paths."""
    _images(text, found, spans)
    for m in _PATH.finditer(text):
        found.add(Value("path", m.group(1).lower()))
        spans.append(m.span())


def _names_moved_to(text: str, found: set[Value], spans: list[tuple[int, int]]) -> None:
    """ "from Opsgenie to incident.io": the name moved to, said in lower case."""
    for m in _FROM_NAME_TO.finditer(text):
        start, end = m.span(1)
        if m.group(1) not in _STOP and not any(s < end and start < e for s, e in spans):
            found.add(Value("name", m.group(1)))


def _codes_and_days(text: str, found: set[Value], spans: list[tuple[int, int]]) -> None:
    """ "seat 14C", "Room 2A": a code, unless a value read before covers it; weekdays."""
    for m in _CODE.finditer(text):
        start, end = m.span()
        if not any(s < end and start < e for s, e in spans):
            found.add(Value("code", m.group(1).lower()))
            spans.append(m.span())
    for m in _DAY.finditer(text):
        found.add(Value("day", m.group(1).lower()))
        spans.append(m.span())


def _hours(text: str, found: set[Value], spans: list[tuple[int, int]]) -> None:
    """ "7pm", "6 a.m.": times without minutes, on a 24-hour clock."""
    for m in _HOUR.finditer(text):
        start, end = m.span()
        if any(s < end and start < e for s, e in spans) or int(m.group(1)) > 12:
            continue
        hour = int(m.group(1)) % 12 + (12 if m.group(2).lower() == "p" else 0)
        found.add(Value("time", f"{hour}:00"))
        spans.append(m.span())


def _named_numbers(text: str, found: set[Value], spans: list[tuple[int, int]]) -> None:
    """ "Node 20", "Postgres 16": a product and its version, one value."""
    for m in _NAMED_NUMBER.finditer(text):
        start, end = m.span()
        if any(s < end and start < e for s, e in spans) or m.group(1).lower() in _COMMON \
                or m.group(1).lower() in _LABEL_WORDS:
            continue
        found.add(Value("version", f"{m.group(1).lower()} {m.group(2)}"))
        spans.append(m.span())


def _plain(number: float) -> str:
    return str(int(number)) if number == int(number) else f"{number:g}"


def words_in(text: str) -> frozenset[str]:
    """`text`'s content words, crudely stemmed (what says two turns are about one thing)."""
    out = set()
    for word in _WORD.findall(text.lower()):
        if len(word) < 3 or word in _STOP:
            continue
        out.add(_stem(word))
    return frozenset(out)


def _stem(word: str) -> str:
    for suffix in ("ing", "ies", "es", "ed", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def _same_kind(a: Value, b: Value) -> bool:
    if a.kind != b.kind or a.text == b.text:
        return False
    if a.kind == "name":
        # One name inside another ("postgres", "postgresql") is one value.
        return not (a.text.startswith(b.text) or b.text.startswith(a.text))
    return True


def _keyed(keys: Iterable[str]) -> set[Value]:
    out = set()
    for key in keys:
        kind, _, text = key.partition("=")
        out.add(Value(kind, text))
    return out
