"""Value lineage: which values a conversation has moved on from, read off the values
themselves (pure).

The slot rules (`hivemem.domain.slots`, consolidation) name what a statement is about and
compare statements on one slot: they miss a change whenever a subject is not read off its
words ("heads up all - standup is at 10:15 from monday ... 9:30 was brutal for them" names
no slot the rules know). A change is also visible in the values alone: a turn that says
something changes and names a value the conversation has said before beside one it has not
(of the same kind: a time beside a time, an amount beside an amount, a name beside a name)
moves on from the old one; so does a turn that sets a new value of a kind an earlier turn
set, on the same thing (they share words besides their values). Every earlier turn that
carries the old value, on the same thing, and not the new one is history from then on; a
later turn that only names the old value again (a question about it, a complaint) is history
too, unless it goes back to it ("back to Redis"), which makes the newer value history.

The keeper (`hivemem.workers.currency`) runs this per turn beside the slot rules; its state
(`Lineage`) is part of the session's slot state.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pydantic import BaseModel, Field

from hivemem.domain.change import RETRACTION, has_update_language

# Turns whose values and words the lineage remembers (the newest kept).
MAX_SAID = 300
# How far back a bare count said to be wrong is looked for.
_RECENT = 20
# How many turns back a value raised is still new to the turn that takes it up.
_FRESH = 6

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
_PATH = re.compile(r"(?<![\w/])(/[a-z0-9][\w./-]*[a-z0-9])", re.IGNORECASE)
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
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9+#-]*[A-Za-z0-9+#]|[A-Za-z]")
# Acronyms and inner capitals anywhere ("GA", "MySQL"); other capitalised words not at the
# start of a sentence or of a list item (there, any word is).
_CAPITAL = re.compile(r"(?<![\w'])([A-Z]{2,}[0-9]*|[A-Z][a-z0-9]+[A-Z][A-Za-z0-9]*)(?![\w'])"
                      r"|(?<![\w'])(?<![.!?:\-*•)]\s)(?<!\n)(?<!^)([A-Z][A-Za-z0-9+#-]*[A-Za-z0-9+#])(?![\w'])")

# Words that are never a value, even capitalised (sentence starts, greetings, fillers).
# Words that say how a number is meant, not what it is the version of ("Max 24 students").
_LABEL_WORDS = frozenset(("max", "maximum", "min", "minimum", "cap", "limit", "total", "about",
                          "around", "approx", "approximately", "up", "over", "under", "top",
                          "only", "just", "exactly", "roughly", "nearly", "almost", "and"))

_COMMON = frozenset(re.findall(r"[\w']+", """
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

_CHANGE_CUE = re.compile(
    r"\b(?:now|anymore|any more|no longer|instead|rather than|switch\w*|mov(?:e|es|ed|ing)"
    r"|chang\w*|replac(?:e|es|ed|ing)\b|upgrad\w*|downgrad\w*|bump\w*|rais\w*|lower\w*|increas\w*"
    r"|decreas\w*|reduc\w*|push\w*|postpon\w*|delay\w*|pull\w* (?:in|forward)|resched\w*"
    r"|correct(?:ed|ion|ing|s)|typo|mistake|wrong|actually|scratch|scrap|forget"
    r"|from (?:here|now|today|tomorrow|monday|tuesday|wednesday|thursday|friday|next)"
    r"|starting|going forward|revert\w*|roll\w* back|back to"
    r"|in the end|turns out|updated?|make (?:it|that)|let'?s make|set (?:it )?to)\b",
    re.IGNORECASE)
# A turn that corrects what was just said.
# ("Correct, SSO is Enterprise only" agrees: not a correction.)
_CORRECTION = re.compile(r"\b(?:typo|no wait|wait|sorry|i mean|i meant|correct(?:ed|ion)"
                         r"|actually|oops|my bad|mistake|wrong|make it|scratch that)\b",
                         re.IGNORECASE)
# A turn that weighs a change rather than makes it ("a 25-cent increase would cover it").
_HEDGE = re.compile(r"\b(?:would|could|might|maybe|perhaps|options?|if we|if you|suggest\w*"
                    r"|propos\w*|consider\w*|what if|how about|should we|thinking about"
                    r"|wondering)\b", re.IGNORECASE)
# A turn that keeps what holds ("we stay on Prisma", "decaf still 6 lb").
_KEEP = re.compile(r"\b(?:stay\w*|still|keep\w*|kept|remain\w*|unchanged|as is|no change"
                   r"|same as)\b", re.IGNORECASE)
_BACK = re.compile(r"\b(?:back to|revert\w*|roll\w* (?:\w+ )?back|again|originally"
                   r"|like (?:we|it) (?:had|was)|return\w* to|undo)\b", re.IGNORECASE)
# A sentence that puts a new name in place of whatever held the slot ("from now on we order
# flour from Moulin Roux instead", "switching the flour order to Moulin Roux").
_SWITCH_TO = re.compile(
    r"\b(?:instead\b(?! of)|from now on|going forward|switch\w* (?:\w+ ){0,4}?to|mov(?:e|es|ed|ing)"
    r" (?:\w+ ){0,4}?to|replac\w* (?:\w+ ){0,4}?with|going with|we'?ll go with|renam\w*"
    r" (?:\w+ ){0,3}?to)\b", re.IGNORECASE)
# A sentence that sets a name as what holds now, saying less of a switch ("Owner changed to
# Björn", "the threat model is with Björn now", "Updated: living room colour is Harbor
# Grey", "let's go with the Glasshouse"); not one that adds ("we also use Redis now") or
# ends something "for now".
_SETS = re.compile(
    r"^\W*updated?\b[^.:]{0,30}:|\b(?:is|are) now\b"
    r"|(?<!^)(?<![.!?]\s)(?<!for )(?<!right )(?<!until )(?<!by )(?<!of )(?<!just )\bnow\b(?!,)"
    r"|\bchang\w* (?:\w+ ){0,3}?to\b|\bfrom (?:here|today|now) on\b|\bfrom here\b"
    r"|\blet'?s go with\b", re.IGNORECASE)
_ADDS = re.compile(r"\b(?:also|too|as well|add(?:s|ed|ing)?|plus|another|in addition|extra)\b",
                   re.IGNORECASE)
# A sentence that keeps what holds against an alternative ("we stay on Postgres", "Alpen
# stays", "MongoDB considered and rejected").
_DECIDED_KEEP = re.compile(
    r"\b(?:stay(?:s|ing)? (?:on|with)|stays\b|remains?\b|nothing (?:changes|moves)|no change"
    r"|(?:considered and )?rejected|said no|not (?:moving|switching)|sticking with"
    r"|stick with)\b", re.IGNORECASE)
# A clause that ends something without a successor ("I'm no longer taking the cetirizine",
# "drop casa do largo", "cancel the PureGym membership").
_DROPS = re.compile(
    r"\b(?:cancel(?:s|led|ling)?|drop(?:s|ped|ping)?|no longer (?:taking|using|doing|going)"
    r"|stop(?:s|ped|ping)? (?:taking|using|paying)|withdr[ae]w\w*|scrap(?:s|ped)?|call(?:ed)? off"
    r"|forget (?:about )?|quit(?:ting)?|pull(?:ed|ing)? (?:out|the plug))\b", re.IGNORECASE)
_NOT_BEFORE = re.compile(r"\b(?:don'?t|do not|never|not|won'?t)\s+(?:\w+\s+)?$", re.IGNORECASE)
_NOT = re.compile(r"\b(?:not|no|never)\b|n't\b", re.IGNORECASE)
_PASSIVE = re.compile(r"(?:cancelled|dropped|withdrawn|scrapped|called off)$",
                      re.IGNORECASE)
_SUBJECT = re.compile(r"\b(?:i|we|you|they|he|she)\b", re.IGNORECASE)
# A turn that raises an alternative rather than states what holds.
_PROPOSES = re.compile(r"\?|\b(?:push\w*|pitch\w*|swears? by|recommend\w*|wants? to try"
                       r"|why (?:we|don't|aren't|not)|\w+'d (?:get|have|be))\b", re.IGNORECASE)
_QUESTION = re.compile(r"\?\s*$")
_CLAUSE = re.compile(r";\s+|,?\s+but\s+")
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")


@dataclass(frozen=True, slots=True)
class Value:
    """One value a turn names: its kind ("time", "amount:<unit>", "version", "path",
    "name") and its normalised text."""

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
    for m in _DAY.finditer(text):
        found.add(Value("day", m.group(1).lower()))
        spans.append(m.span())
    for m in _CAPITAL.finditer(text):
        word = m.group(1) or m.group(2)
        if word.lower() in _COMMON or taken(*m.span()):
            continue
        found.add(Value("name", word.lower()))
    return found


@functools.lru_cache(maxsize=16_384)
def value_keys(text: str) -> frozenset[str]:
    """The keys of the values `text` names (memoized: recall reads the same candidates'
    texts again and again)."""
    return frozenset(v.key for v in values_in(text))


# Per session, what recall reads of the lineage: a value moved on from -> (the turn that
# moved on, the keys of the values that replaced it).
Gone = Mapping[str, tuple[str, tuple[str, ...]]]


class GoneValues:
    """A session's values moved on from, read once per recall (its names, turns and
    successors), then asked per candidate text (`stale`)."""

    def __init__(self, gone: Gone) -> None:
        self.gone = gone
        self.names = frozenset(k for key, (_turn, after) in gone.items() for k in (key, *after)
                               if k.startswith("name="))
        self.turns = {k: t for k, (t, _a) in gone.items()}
        self.successors = {k: list(a) for k, (_t, a) in gone.items()}

    def stale(self, text: str) -> str | None:
        """The turn that moved on from a value `text` carries without any of its successors
        (the text states only the old value: a config line, a reminder, a question about
        it), or None. Only strong values count (`_strong`); names are read in any case."""
        if not self.gone:
            return None
        keys = value_keys(text) | _named(text, self.names)
        stale = _stale(keys, self.turns, self.successors, text)
        return self.gone[stale][0] if stale is not None else None


def stale_value(text: str, gone: Gone) -> str | None:
    """`GoneValues(gone).stale(text)`, for one text."""
    return GoneValues(gone).stale(text)


def _paths(text: str, found: set[Value], spans: list[tuple[int, int]]) -> None:
    for m in _PATH.finditer(text):
        found.add(Value("path", m.group(1).lower()))
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


class Said(BaseModel):
    """What the lineage remembers of one turn: its values' keys and its words."""

    turn_id: str
    values: list[str] = Field(default_factory=list)
    words: list[str] = Field(default_factory=list)
    # Each name it says -> the words of the sentence it is said in (what the name is the
    # value of: "Flour: 200 kg from Farina Nord" -> flour).
    named: dict[str, list[str]] = Field(default_factory=dict)
    weighs: bool = False  # it asks, weighs or proposes rather than states
    ends: bool = False  # it says something ends or is not so ("we're not shipping Windows")


class Lineage(BaseModel):
    """Per session: the turns said so far (values and words, newest `MAX_SAID`) and the
    values moved on from (value key -> the turn that moved on)."""

    said: list[Said] = Field(default_factory=list)
    gone: dict[str, str] = Field(default_factory=dict)
    # A value moved on from -> the values that replaced it (a turn naming one of them beside
    # the old value is not stale: "from Redis to Memcached").
    successors: dict[str, list[str]] = Field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Step:
    """What one turn did: the lineage after it, the turns it made history (turn id -> the
    turn that replaced them) and the turns it made current again (a revert)."""

    lineage: Lineage
    history: dict[str, str]
    restored: tuple[str, ...]


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


@dataclass(frozen=True, slots=True)
class _Reading:
    """One turn as the lineage reads it."""

    text: str
    keys: frozenset[str]  # its values' keys
    words: frozenset[str]
    stated: tuple[str, ...]  # its sentences that neither ask nor weigh a change
    cue: bool  # it says something changes
    back: bool  # it goes back to something
    corrects: bool  # it corrects what was just said

    @classmethod
    def of(cls, text: str, asks: bool, known: Iterable[str] = (),
           people: frozenset[str] = frozenset()) -> _Reading:
        """`known`: the names said so far (a name is read by its capitals once: "let's use
        memcached" names Memcached when a turn before said "Memcached"); `people`: the
        session's speakers, never a value."""
        sentences = [x for x in _SENTENCE.split(text.strip()) if x]
        # Weighing is read per clause: "Replaced Jest with Vitest; the globals option keeps
        # old tests running" states a change whatever its other clause weighs.
        stated = () if asks else tuple(
            c for x in sentences if not _QUESTION.search(x)
            for c in _CLAUSE.split(x) if c and not _HEDGE.search(c))
        keys = {v.key for v in values_in(text)} | _named(text, known)
        keys = {k for k in keys if not (k.startswith("name=") and _person(k[5:], people))}
        return cls(
            text=text, keys=frozenset(keys), words=words_in(text),
            stated=stated,
            cue=any(_CHANGE_CUE.search(x) or has_update_language(x) or RETRACTION.search(x)
                    or _CORRECTION.search(x) for x in stated),
            back=any(_BACK.search(x) for x in stated),
            corrects=any(_CORRECTION.search(x) for x in stated))

    @property
    def names(self) -> set[str]:
        return {k for k in self.keys if k.startswith("name=")}

    def about(self, s: Said, value: Value) -> bool:
        """`s` names `value` and is on the same thing: it shares a word (or another name)
        with this turn."""
        return value.key in s.values and bool(
            self.words & set(s.words) or (self.names - {value.key}) & set(s.values))


def _named(text: str, known: Iterable[str]) -> set[str]:
    """The known names (`name=<lower>` keys) `text` says in any case, as whole words."""
    # A short or common word said with a capital once ("Go Joanna!") is not read in lower
    # case ("wherever you go").
    usable = frozenset(k[5:] for k in known if len(k) > 7 and k[5:] not in _STOP)
    if not usable:
        return set()
    return {"name=" + m for m in _names_pattern(usable).findall(text.lower())}


@functools.lru_cache(maxsize=256)
def _names_pattern(names: frozenset[str]) -> re.Pattern[str]:
    """One pattern for a session's known names (longest first), as whole words."""
    alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    return re.compile(rf"(?<![\w-])({alternatives})(?![\w-])")


def _person(name: str, people: frozenset[str]) -> bool:
    return any(name.startswith(p) or p.startswith(name) for p in people)


def _strong(key: str) -> bool:
    """A value specific enough that every turn carrying it is on the thing it was the value
    of: a name, a version, a path, a time, a date, an amount with its unit, currency or
    label. A bare count or a weekday is not ("3", "Friday")."""
    kind = key.partition("=")[0]
    return kind in ("name", "version", "path", "time", "date") or (
        kind.startswith("amount:") and kind != "amount:")


def _stale(keys: Iterable[str], gone: dict[str, str],
           successors: dict[str, list[str]], text: str) -> str | None:
    """The first strong value of `keys` moved on from with none of its successors in
    `keys` (the turn carries only the old value), or None. A value that ended with no
    successor (dropped, cancelled) is not stale in a text that says it ended or what
    holds instead ("we're not shipping Windows", "windows users can stay on 3.1.4")."""
    mine = set(keys)
    for key in sorted(mine):
        after = successors.get(key, ())
        if key in gone and _strong(key) and not mine & set(after) and (
                after or not (_ends(text) or _KEEP.search(text))):
            return key
    return None


def _ends(text: str) -> bool:
    return bool(_DROPS.search(text) or RETRACTION.search(text) or _NOT.search(text))


def step(lineage: Lineage, turn_id: str, text: str, *, asks: bool = False,
         people: frozenset[str] = frozenset()) -> Step:
    """`text` (turn `turn_id`) applied to `lineage`. `asks`: the turn is a question (it
    never moves on from anything; naming a gone value only, it is history itself);
    `people`: the session's speakers (their names are never values)."""
    earlier = lineage.said
    said_before = _said_before(earlier)
    turn = _Reading.of(text, asks, (k for k in said_before if k[:5] == "name="), people)
    gone = dict(lineage.gone)
    successors = {k: list(v) for k, v in lineage.successors.items()}
    history: dict[str, str] = {}
    restored: list[str] = []
    if turn.cue:
        known = said_before
        # A value raised in the last few turns that has replaced nothing yet is still new
        # to the turn that takes it up: a change is often said over two turns ("let's say
        # $550" ... "Updated: budget $550"; "what about the Glasshouse?" ... "switch the
        # venue to the Glasshouse"), and the turn that confirms it names what it is about.
        fresh = _fresh(turn.text, turn.keys, earlier, gone, successors)
        old = {v for v in _keyed(turn.keys) if v.key in known and v.key not in fresh}
        new = {v for v in _keyed(turn.keys) if v.key not in known or v.key in fresh}
        # A change said within the turn, both values new ("we run on Node 20. let's bump to
        # Node 22"): the first is gone from here on.
        for o in new:
            for n in new:
                if _same_kind(o, n) and o.key not in gone and _from_to(turn.text, o, n):
                    gone[o.key] = turn_id
                    successors[o.key] = [n.key]
        # A revert: a value moved on from, named again with "back to" and the like.
        back_said = " ".join(x for x in turn.stated if _BACK.search(x))
        revived = {v for v in old if v.key in gone and v.key in _keys_in(back_said, known)
                   } if turn.back else set()
        for value in revived:
            restored += _revert(value, turn_id, earlier, gone, successors, history)
        for o, pairs_new, loose in _pairs(turn, old - revived, new, earlier, fresh):
            if o.key in gone and (o.key not in turn.keys
                                  or set(successors.get(o.key, ())) & turn.keys):
                continue  # replaced before: the new value replaces what holds now
            gone[o.key] = turn_id
            successors[o.key] = sorted(
                k for k in pairs_new if any(_same_kind(o, v) or _corrected_by(o, v, turn)
                                            for v in _keyed([k]))) or sorted(pairs_new)
            # A bare count said to be wrong ("400 is too aggressive", "no wait, 14") is
            # gone from the recent turns that carry it, whatever their words.
            said_wrong = o.kind == "amount:" and (
                turn.corrects or _dismissed(turn.text, o) or _negated(turn.text, o))
            recent = {s.turn_id for s in earlier[-_RECENT:]} if said_wrong else set()
            for s in earlier:
                # A strong value is gone wherever it was said without its successor; a
                # weak one only on the same thing.
                if (turn.about(s, o) or ((loose or _strong(o.key) or s.turn_id in recent)
                                         and o.key in s.values)) \
                        and not (set(s.values) & pairs_new):
                    history[s.turn_id] = turn_id
    if not history and not (turn.cue and turn.back) and not (turn.cue and _new_of_kind(
            turn, earlier)):
        # It names a value moved on from and not what replaced it (the config line, the
        # question about it, the complaint): history as soon as it is said.
        old_key = _stale(turn.keys, gone, successors, text)
        if old_key is not None:
            history[turn_id] = gone[old_key]
    # What each name is the value of, from the clauses that state (a question's names are
    # asked about, not set: "TTL of 30 minutes on session keys?").
    named = _names_by_sentence(" ".join(x for x in _SENTENCE.split(text.strip())
                                        if x and not _QUESTION.search(x)), turn.keys)
    if not asks:
        _by_names(turn, turn_id, named, earlier, said_before, gone, successors, history)
    said = Said(turn_id=turn_id, values=sorted(turn.keys), words=sorted(turn.words),
                named=named, weighs=asks or bool(_PROPOSES.search(text) or _HEDGE.search(text)),
                ends=_ends(text))
    lineage = Lineage(said=[*earlier, said][-MAX_SAID:], gone=gone, successors=successors)
    return Step(lineage, history, tuple(t for t in restored if t not in history))


def _fresh(text: str, keys: frozenset[str], earlier: list[Said], gone: dict[str, str],
           successors: dict[str, list[str]]) -> dict[str, int]:
    """The keys of `keys` (said in `text`) first said within the last `_FRESH` turns that
    neither went nor replaced anything since, and that `text` does not say are wrong
    ("not 45", "400 is too aggressive") nor names beside a value of their kind never said
    before, each -> where it was first said."""
    start = max(0, len(earlier) - _FRESH)
    before = {k for s in earlier[:start] for k in s.values}
    adopted = {k for after in successors.values() for k in after}
    out: dict[str, int] = {}
    for index in range(start, len(earlier)):
        for k in earlier[index].values:
            if k in keys and k not in out and k not in before and k not in gone \
                    and k not in adopted:
                out[k] = index
    # Beside a value never said of its kind, it is the old one ("standup is at 10:15 from
    # monday. 9:30 was brutal").
    unsaid = {v for v in _keyed(keys) if not any(v.key in s.values for s in earlier)}
    return {k: i for k, i in out.items() if not any(
        _negated(text, v) or _dismissed(text, v) or any(_same_kind(v, u) for u in unsaid)
        for v in _keyed([k]))}


def _said_in(key: str, turns: Iterable[Said]) -> bool:
    return any(key in s.values for s in turns)


def _said_before(earlier: list[Said]) -> set[str]:
    """Every value key the remembered turns said."""
    out: set[str] = set()
    for s in earlier:
        out.update(s.values)
    return out


def _names_by_sentence(text: str, keys: Iterable[str]) -> dict[str, list[str]]:
    """Each name key of `keys` -> the words of the first clause (or list line) saying it
    ("logs in ELK, metrics in Prometheus": ELK is the logs' value, not the metrics')."""
    names = [k for k in keys if k.startswith("name=")]
    out: dict[str, list[str]] = {}
    for sentence in re.split(r"(?<=[.!?;,])\s+|\n+|\s+-\s+", text):
        lowered = sentence.lower()
        for key in names:
            if key not in out and re.search(
                    rf"(?<![\w-]){re.escape(key[5:])}(?![\w-])", lowered):
                out[key] = sorted(words_in(sentence) - {key[5:]})
    return out


def _by_names(turn: _Reading, turn_id: str, named: dict[str, list[str]],
              earlier: list[Said], known: set[str], gone: dict[str, str],
              successors: dict[str, list[str]], history: dict[str, str]) -> None:
    """Names put in place of others (`_SWITCH_TO`), or alternatives turned down
    (`_DECIDED_KEEP`), read per sentence: the old names are those said earlier in a sentence
    sharing a word with the switching one; the turned-down ones are those the keeping turn
    names beside the kept one, said first after it."""
    first_said: dict[str, int] = {}

    def first(key: str) -> int:
        """Where `key` was said first (read once per turn, when a clause needs it)."""
        if not first_said:
            for index, s in enumerate(earlier):
                for value in s.values:
                    first_said.setdefault(value, index)
        return first_said.get(key, -1)

    for sentence in (x for x in _SENTENCE.split(turn.text.strip())
                     if x and not _QUESTION.search(x)):
        keys = set(_names_by_sentence(sentence, turn.keys))
        if not keys:
            continue
        # What the sentence is about: its words besides its names and its change words.
        words = words_in(_CHANGE_CUE.sub(" ", sentence)) - {
            k[5:] for k in keys}
        if (_SWITCH_TO.search(sentence) or (_SETS.search(sentence) and not _ADDS.search(
                sentence) and not _DROPS.search(sentence))) and not _HEDGE.search(sentence):
            new = {k for k in keys if k not in gone}
            if not new or not words or new != keys:
                # It names what it moves on from ("from ELK to Loki"): `_pairs` read it.
                continue
            old = {k for s in earlier for k, w in s.named.items()
                   if k not in turn.keys and k not in gone and words & set(w)}
            for key in old:
                _gone(key, new, turn_id, earlier, gone, successors, history)
        elif _DROPS.search(sentence) and not _HEDGE.search(sentence):
            adopted = {k for after in successors.values() for k in after}
            for clause in re.split(r"[,;]\s+|\s+but\s+|\s+and\s+", sentence):
                dropped = _DROPS.search(clause)
                if dropped is None or _NOT_BEFORE.search(clause[:dropped.start()]):
                    continue  # "don't ever forget that ..." ends nothing
                # What it ends is named after the verb ("GP says ... no longer taking the
                # cetirizine": the cetirizine), or right before a passive one ("Webpack
                # removed").
                ended = clause[dropped.end():]
                if _PASSIVE.match(dropped.group(0)) and not _SUBJECT.search(
                        clause[:dropped.start()]):
                    ended = clause[:dropped.start()] + " " + ended
                for key in _names_by_sentence(ended, keys):
                    if key in known and key not in gone and key not in adopted:
                        # A turn that itself said it ends ("we're not shipping Windows")
                        # is the answer, not history.
                        _gone(key, set(), turn_id, [x for x in earlier if not x.ends], gone,
                              successors, history)
        elif _DECIDED_KEEP.search(sentence):
            clause = next(c for c in re.split(r"[,;]\s+|\s+but\s+", sentence)
                          if _DECIDED_KEEP.search(c))
            kept = {k for k in _names_by_sentence(clause, keys) if k in known}
            if not kept:
                continue
            start = min(first(k) for k in kept)
            # The alternatives: raised after the kept value, first by a turn that weighed
            # or proposed them ("nadia keeps pushing EKS", "should we switch to Kerrygold?").
            adopted = {k for after in successors.values() for k in after}
            rivals = {k for k in turn.keys if k.startswith("name=") and k not in kept
                      and first(k) > start and k not in gone
                      and k not in adopted and earlier[first(k)].weighs
                      and not _contains(k, kept)}
            for key in rivals:
                _gone(key, kept, turn_id, earlier, gone, successors, history)


def _contains(key: str, others: set[str]) -> bool:
    text = key[5:]
    return any(text.startswith(o[5:]) or o[5:].startswith(text) for o in others)


def _gone(key: str, new: set[str], turn_id: str, earlier: list[Said], gone: dict[str, str],
          successors: dict[str, list[str]], history: dict[str, str]) -> None:
    gone[key] = turn_id
    successors[key] = sorted(new)
    for s in earlier:
        if key in s.values and not set(s.values) & new:
            history[s.turn_id] = turn_id


def _new_of_kind(turn: _Reading, earlier: list[Said]) -> bool:
    """Whether the turn names a value not said before (it may be setting something)."""
    known = {k for s in earlier for k in s.values}
    return any(k not in known for k in turn.keys)


def retire(lineage: Lineage, old_turn: str, by_turns: Iterable[str], turn_id: str,
           people: frozenset[str] = frozenset()) -> tuple[Lineage, dict[str, str]]:
    """What another rule decided (the slot rules: `old_turn` is history, replaced by
    `by_turns`) read as values: each strong value of the old turn that the replacing turns
    do not carry, beside a new value of the same kind they brought, is gone, and every
    turn said carrying it without its successor is history. Returns the lineage and the
    turns made history (turn id -> `turn_id`)."""
    said = {s.turn_id: s for s in lineage.said}
    old = said.get(old_turn)
    by = [said[t] for t in by_turns if t in said]
    if old is None or not by:
        return lineage, {}
    new_keys = {k for s in by for k in s.values
                if not (k.startswith("name=") and _person(k[5:], people))}
    dropped = _keyed(k for k in old.values if k not in new_keys and _strong(k)
                     and not (k.startswith("name=") and _person(k[5:], people)))
    brought = _keyed(k for k in new_keys if k not in old.values)
    if sum(1 for k in old.values if k.startswith("name=")) > 1:
        # Several names in the old statement ("logs in ELK, metrics in Prometheus"): which
        # of them the new one replaced is not read off the values.
        dropped = {v for v in dropped if v.kind != "name"}
    gone = dict(lineage.gone)
    successors = {k: list(v) for k, v in lineage.successors.items()}
    history: dict[str, str] = {}
    for o in dropped:
        if o.key in gone:
            continue
        news = {n.key for n in brought if _same_kind(o, n)}
        if not news:
            continue
        gone[o.key] = turn_id
        successors[o.key] = sorted(news)
        for s in lineage.said:
            if o.key in s.values and not set(s.values) & news and s.turn_id not in by_turns:
                history[s.turn_id] = turn_id
    return lineage.model_copy(update={"gone": gone, "successors": successors}), history


def _revert(value: Value, turn_id: str, earlier: list[Said], gone: dict[str, str],
            successors: dict[str, list[str]], history: dict[str, str]) -> list[str]:
    """`value` is current again: what replaced it (the values of its kind the replacing turn
    brought) goes, with the turns carrying them. Returns the turns current again."""
    replacer = gone.pop(value.key)
    successors.pop(value.key, None)
    by = next((s for s in earlier if s.turn_id == replacer), None)
    if by is None:
        return []
    for successor in _keyed(by.values):
        if not _same_kind(successor, value):
            continue
        gone[successor.key] = turn_id
        successors[successor.key] = [value.key]
        for s in earlier:
            if successor.key in s.values and (
                    s.turn_id == replacer or value.key not in s.values):
                history[s.turn_id] = turn_id
    return [s.turn_id for s in earlier if value.key in s.values
            and not any(k in gone for k in s.values if k != value.key)]


def _pairs(turn: _Reading, old: set[Value], new: set[Value], earlier: list[Said],
           fresh: Mapping[str, int] | None = None) -> list[tuple[Value, set[str], bool]]:
    """The values `turn` moves on from: (old value, the new values' keys, loose: every turn
    carrying it goes, not only those on the same thing by their words). Each reading is
    tried in turn, and one whose pairs all fall (the old values are named beside the new
    ones, kept) leaves the next one to try: "Updated: espresso $16.20/lb, decaf stays
    $15.75/lb" keeps the decaf price and still moves on from the espresso's old one."""
    # The old value named beside a new one of its kind.
    named = [(o, n) for o in old for n in new if _same_kind(o, n)]
    out = _kept(turn, named, False)
    if not out:
        # The old value said to be wrong beside a new one of its sort ("400 is too
        # aggressive; let's make the threshold 600"): their labels may differ.
        out = _kept(turn, [(o, n) for o in old if _dismissed(turn.text, o) for n in new
                           if o.kind.partition(":")[0] == n.kind.partition(":")[0]], False)
    # A value raised a few turns back replaces only what was said before it was raised.
    raised = fresh or {}

    def older(o: Value, n: Value) -> bool:
        return n.key not in raised or _said_in(o.key, earlier[:raised[n.key]])

    if not out and new:
        # No old value named: a new value of a kind an earlier turn on the same thing set
        # (a turn naming more of its kind than this one brings, "drinks 18:30, dinner
        # 19:30, auction 21:00" against "ends around 22:30", does not say which; as many,
        # "Sat 9-17, Sun 10-14" against "Sat 9-15, Sun 10-16", are replaced as a list).
        brought = {n: sum(1 for m in new if m.kind == n.kind) for n in new}
        out = _kept(turn, [(o, n) for n in new for s in earlier
                           if turn.words & set(s.words) or turn.names & set(s.values)
                           if 0 < len(c := [o for o in _keyed(s.values) if _same_kind(o, n)
                                            and o.key not in turn.keys and older(o, n)])
                           <= brought[n]
                           for o in c if _exact(o) and _exact(n)], False)
    if not out and new and not named:
        # Nothing on the same thing by its words: a correction ("no wait, 14", "typo, it's
        # $45k") or a change to an exact value replaces the latest value of its kind (not
        # in a turn naming old values beside new ones: it says what it keeps, and not
        # what it replaces).
        pairs = []
        for n in new:
            # Never a name: a person or a title met in passing is not a value corrected.
            if n.kind != "name" and (_exact(n) or turn.corrects):
                # A turn naming several candidates does not say which (its times of
                # departure and arrival): the latest turn naming one does.
                latest = next((c[0] for s in reversed(earlier)
                               if len(c := [o for o in _keyed(s.values) if _corrected_by(o, n, turn)
                                            and o.key not in turn.keys and older(o, n)]) == 1),
                              None)
                if latest is not None:
                    pairs.append((latest, n))
        out = _kept(turn, pairs, True)
    return out


def _kept(turn: _Reading, pairs: list[tuple[Value, Value]],
          loose: bool) -> list[tuple[Value, set[str], bool]]:
    """The pairs of (old, new) value that stand: not an old value the turn names beside the
    new one or keeps, not two names or counts side by side with nothing saying which goes."""
    out = []
    for o, n in pairs:
        if o.key in turn.keys and not _contrasted(turn.text, o, n):
            continue  # named beside the new one, not said to be gone
        if o.key in turn.keys and _KEEP.search(_clause_of(turn.text, o)) \
                and not _negated(turn.text, o):
            continue  # kept ("we stay on Prisma, not Drizzle")
        if o.kind in ("name", "amount:") and not (
                _negated(turn.text, o) or _from_to(turn.text, o, n) or _dismissed(turn.text, o)
                or (loose and turn.corrects)):
            continue  # two names or counts side by side: a change only when it says so
        out.append((o, {m.key for _o, m in pairs}, loose))
    return out


def _keys_in(text: str, known: Iterable[str]) -> frozenset[str]:
    """The value keys `text` names (known names in any case)."""
    return value_keys(text) | _named(text, {k for k in known if k.startswith("name=")})


def _clause_of(text: str, value: Value) -> str:
    """The clause of `text` naming `value` (the whole text if none does by its words)."""
    probe = value.text.split(" ")[-1]
    return next((x for x in re.split(r"(?<=[.!?;])\s+|\n+|,\s+but\s+", text)
                 if probe in x.lower()), text)


def _corrected_by(old: Value, new: Value, turn: _Reading) -> bool:
    """Whether a correction's `new` value may replace `old`: one kind, or a bare number
    correcting the latest number said ("keep 7 daily snapshots" ... "no wait, 14")."""
    if _same_kind(old, new):
        return True
    return (turn.corrects and new.kind == "amount:" and old.kind.startswith("amount:")
            and "$" not in old.kind and old.text != new.text)


_DISMISSED = r"(?:is|was|are|were|'s)\s+(?:overkill|way too|too|not enough|excessive|a lot)"


def _dismissed(text: str, value: Value) -> bool:
    """ "400 is too aggressive", "14 is overkill": the value is said to be wrong."""
    said = rf"(?<![\w.]){re.escape(value.text)}(?:\s?(?:%|[a-z]+))?"  # "5% is too little"
    return bool(re.search(rf"{said}\s+{_DISMISSED}\b", text.lower()))


def _exact(value: Value) -> bool:
    """A value precise enough to say what changed by itself (a time, a version, an amount
    with its unit or currency), not a bare count or a name."""
    return value.kind in ("time", "version", "path", "date", "day") or (
        value.kind.startswith("amount:") and value.kind != "amount:")


def _negated(text: str, value: Value) -> bool:
    probe = re.escape(value.text)
    return bool(re.search(rf"\b{_NEGATED}\s+(?:the\s+|with\s+)?[$€£]?{probe}", text.lower()))


def _from_to(text: str, old: Value, new: Value) -> bool:
    """ "from Jenkins to GitHub", "Jenkins -> GitHub", "GitHub instead of Jenkins",
    "replaced Jest with Vitest"."""
    o, n = re.escape(old.text), re.escape(new.text)
    lowered = text.lower()
    return bool(re.search(rf"\b{o}\w*\s*(?:\S+\s+){{0,3}}?(?:to|->|→|=>)\s+(?:the\s+)?{n}\b",
                          lowered) or re.search(rf"\b{n}\w*\s+(?:instead of|over|not)\s+{o}",
                                                lowered)
                or re.search(rf"\b(?:replac\w*|swap\w*)\s+(?:the\s+)?{o}\w*\s+(?:with|for)\s+"
                             rf"(?:the\s+)?{n}\b", lowered))


# A turn that says what it moves from and to, whatever words it names them by ("switched
# the case from a refund to store credit: $129 + 10% = $141.90").
_FROM_TO = re.compile(r"\bfrom\b.{1,60}?\bto\b|\binstead of\b|\breplac\w* .{1,40}?\bwith\b")
_NEGATED = r"(?:not|no|no longer|instead of|rather than|from|was|were|isn't|wasn't|over)"


def _contrasted(text: str, value: Value, new: Value | None = None) -> bool:
    """Whether `text` says `value` is the old one: a negation or "from" before it, or
    "was" after it ("9:30 was brutal"), or the turn says it changes at all and does not
    name it before its new value `new` unless it says from what to what ("replaced Jest
    with Vitest"): in "the cleaning moved to 8:45, the reminder to 7:45" 8:45 is the new
    value of one thing and 7:45 of another."""
    lowered = text.lower()
    probe = re.escape(value.text)
    if re.search(rf"\b{_NEGATED}\s+(?:the\s+)?[$€£]?{probe}", lowered) or _dismissed(
            text, value):
        return True
    if re.search(rf"{probe}\w*\s+(?:was|were|is out|is gone|no more|anymore)", lowered):
        return True
    if new is not None and _named_before(lowered, value, new) and not (
            _from_to(text, value, new) or _FROM_TO.search(lowered)):
        return False
    return bool(re.search(r"\b(?:not|no longer|anymore|instead|typo|correct\w*|wrong"
                          r"|mistake|chang\w*|mov\w*|switch\w*|replac\w*|push\w*|from)\b",
                          lowered))


def _named_before(lowered: str, value: Value, new: Value) -> bool:
    """Whether `value` is first named before `new` in `lowered` (not known where the words
    are not found as normalised: "6pm" for 18:00, "$45k" for 45000)."""
    at, new_at = _position(lowered, value), _position(lowered, new)
    return at is not None and new_at is not None and at < new_at


def _position(lowered: str, value: Value) -> int | None:
    digits = value.text
    if value.kind.startswith("amount:") and digits.replace(".", "").isdigit():
        whole, _, cents = digits.partition(".")
        digits = ",?".join(whole) + (r"\." + cents if cents else "")
        found = re.search(rf"(?<![\d.,]){digits}(?![\d])", lowered)
    else:
        found = re.search(rf"(?<![\w.]){re.escape(digits)}", lowered)
    return found.start() if found else None
