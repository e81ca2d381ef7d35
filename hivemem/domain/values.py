"""Values: what a statement sets (names, acronyms, numbers) and how two compare (pure).

"Switch the database to MySQL" sets ``mysql``; "the limit is 100/min" sets ``100``.
Consolidation versions facts by these: a newer statement of a slot that sets another value
replaces the old one, one that sets the same value restates it.
"""

from __future__ import annotations

import functools
import re

from hivemem.domain.fact import Fact

__all__ = ["contradicts", "contrast", "differs", "drop_cached", "holds", "named_values",
           "normalise", "overlap", "restates", "shape_of", "values_of"]

_CACHED = 1 << 16  # statements whose values are remembered (recall and reflection ask often)

# A word after a sentence end or a label ("Sam: The build...") is capitalised anyway.
_NAME = re.compile(r"(?<![.!?:]\s)(?<!^)\b([A-Z][A-Za-z0-9.+#-]*[A-Za-z0-9+#]|[A-Z]{2,})\b")
_FIRST_NAME = re.compile(r"([A-Z][a-z0-9.+#-]*[A-Z0-9+#][A-Za-z0-9.+#-]*)\b")
# A word with a capital inside (MySQL, GraphQL, PostgreSQL) is a name wherever it stands.
_INNER_CAPITAL = re.compile(r"\b([A-Za-z][a-z0-9]*[A-Z][A-Za-z0-9.+#-]*[A-Za-z0-9+#])\b")
_FIRST_POSSESSIVE = re.compile(r"([A-Z][A-Za-z0-9]+)(?:'s|\u2019s)\b")
# "Jonas owns the billing service": a capitalised first word acting on something is a name.
_FIRST_ACTOR = re.compile(r"([A-Z][a-z]{2,}) (?:owns|leads|maintains|manages|runs|handles"
                          r"|writes|approves|reviews|hosts|is responsible)\b")
_IDENTIFIER = re.compile(r"(?<![\w.:$-])([a-z][a-z]+\d[a-z0-9]*)(?![\w.-]*\d*\s?(?:%|ms))\b")
# Regions, zones, instance types: eu-west-1, us-east-2, europe-west4, t3.large.
_DASHED_ID = re.compile(r"(?<![\w-])([a-z]{2,}(?:-[a-z]+)*-[a-z]*\d+[a-z]?)(?![\w-])")
# Versions: v2.4.1, 3.11, 1.2.0-rc1 (one value, not two numbers).
_VERSION = re.compile(r"(?<![\w.])v?(\d+(?:\.\d+)+(?:-[a-z0-9.]+)?)(?![\w.]*\d)", re.IGNORECASE)
# Dates: "March 3", "3 March", "2026-03-14", "next Friday", "end of the month".
_MONTHS = ("jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
           "|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?")
_DAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_DATE = re.compile(
    rf"\b(?:(?:{_MONTHS})\.? \d{{1,2}}(?:st|nd|rd|th)?"
    rf"|\d{{1,2}}(?:st|nd|rd|th)? (?:of )?(?:{_MONTHS})"
    rf"|\d{{4}}-\d{{2}}-\d{{2}}|(?:next|this|last) (?:{_DAYS}|week|month|quarter|sprint)"
    rf"|end of (?:the )?(?:week|month|quarter|sprint|year)|(?:{_DAYS})|tomorrow"
    rf"|q[1-4](?: \d{{4}})?)\b", re.IGNORECASE)
# Short acronyms that name no choice (API, PR, VM); UTC, AWS or CET do.
_GENERIC = frozenset(re.findall(r"\w+", (
    "api apis get post put patch delete vm vms pr prs ci cd qa ui ux id ids url urls sdk cli db "
    "ok fyi eta pm am todo json http https sql csv mb gb kb tb cpu ram sla slo dns ssr io os "
    "it i tl dr asap faq rfc poc mvp q1 q2 q3 q4")))
# "Sam: ..." names the speaker, "Change of plan: ..." opens the sentence: neither is a value.
_LABELLED = re.compile(r"^(?:[A-Z][a-z]+|[A-Za-z]+(?: [a-z]+){1,3}):\s+")
# Units a number keeps (so "30 seconds" and "30 minutes" differ), in one spelling each.
_UNITS = {
    "%": "%", "percent": "%", "ms": "ms", "millisecond": "ms", "milliseconds": "ms",
    "s": "s", "sec": "s", "secs": "s", "second": "s", "seconds": "s",
    "min": "min", "mins": "min", "minute": "min", "minutes": "min",
    "h": "h", "hr": "h", "hrs": "h", "hour": "h", "hours": "h",
    "day": "d", "days": "d", "week": "w", "weeks": "w", "month": "mo", "months": "mo",
    "year": "y", "years": "y", "gb": "gb", "mb": "mb", "kb": "kb", "tb": "tb",
    "k": "k", "m": "m", "am": "am", "pm": "pm", "x": "x",
}
_NUMBER = re.compile(
    r"(?<![A-Za-z.\d-])\$?\d+(?:[.,:]\d+)*(?:\s?(" + "|".join(
        sorted((re.escape(u) for u in _UNITS), key=len, reverse=True)) + r"))?(?![\w.]*\d)\b",
    re.IGNORECASE)


def named_values(text: str) -> set[str]:
    """Proper names and acronyms in a statement (PostgreSQL, MySQL, GraphQL, AWS...)."""
    return set(_named_values(text))


@functools.lru_cache(maxsize=_CACHED)
def _named_values(text: str) -> frozenset[str]:
    # Generic acronyms (API, GET, VM) name no choice; UTC, AWS or RQ do.
    text = _LABELLED.sub("", text.strip())
    names = {m.group(1).lower() for m in _NAME.finditer(text)
             if m.group(1).lower() not in _GENERIC}
    names.update(m.lower() for m in _INNER_CAPITAL.findall(text)
                 if m.lower() not in _GENERIC)
    # A sentence's first word counts when it could not be an ordinary capitalised word.
    first = _FIRST_NAME.match(text)
    if first and first.group(1).lower() not in _GENERIC:
        names.add(first.group(1).lower())
    # Tool names are often lowercase with a digit: autopep8, python3, http2.
    names.update(m.lower() for m in _IDENTIFIER.findall(text))
    names.update(m.lower() for m in _DASHED_ID.findall(text))
    # "Celery's configuration ...": a capitalised first word with a possessive is a name.
    owner = _FIRST_POSSESSIVE.match(text)
    if owner and owner.group(1).lower() not in ("it", "that", "this", "there", "here", "what",
                                                 "let", "he", "she", "who"):
        names.add(owner.group(1).lower())
    actor = _FIRST_ACTOR.match(text)
    if actor and actor.group(1) not in ("The", "This", "That", "Our", "Everyone", "Nobody"):
        names.add(actor.group(1).lower())
    # A date's words are one value ("March 3"), not a month and a number.
    return frozenset(names - {m.lower() for d in _DATE.findall(text) for m in d.split()})


def _numbers(text: str) -> set[str]:
    out = set()
    for match in _NUMBER.finditer(text):
        unit = match.group(1)
        number = match.group(0)[: match.start(1) - match.start(0)].strip() if unit else (
            match.group(0))
        out.add(number + _UNITS[unit.lower()] if unit else number)
    return out


# A numbered label ("status update 3: ...", "step 2: ..."): which one, not a value it sets.
_LABEL = re.compile(r"(?<=[a-z] )\d{1,3}(?=:(?!\d))", re.IGNORECASE)
# Codes of digits and capitals: seats, rooms, gates, sizes (14C, 22A, B12, 4K).
_CODE = re.compile(r"(?<![\w.$-])(?!Q[1-4]\b)(\d{1,4}[A-Z]{1,2}|[A-Z]{1,2}\d{1,4}[A-Z]?)(?![\w.-])")
# Channels, handles, paths, addresses: "#incidents-live", "@oncall", "/healthz".
_HANDLE = re.compile(r"(?<![\w/#@.-])([#@][a-z0-9][\w.-]*[a-z0-9]|/[a-z][\w./-]*[a-z0-9]"
                     r"|[\w.+-]+@[\w-]+\.[\w.]+|https?://\S+[\w/])", re.IGNORECASE)


def values_of(text: str) -> set[str]:
    """What a statement sets: its names, dates, versions, numbers (with their units) and
    handles (channels, paths, addresses)."""
    return set(_values_of(text))


@functools.lru_cache(maxsize=_CACHED)
def _values_of(text: str) -> frozenset[str]:
    # (Cached: consolidation compares each statement with every known one, many times.)
    handles = {m.lower() for m in _HANDLE.findall(text)} | {
        m.lower() for m in _CODE.findall(text)}
    text = _CODE.sub(" ", _HANDLE.sub(" ", text))
    dates = {" ".join(m.lower().split()) for m in _DATE.findall(text)}
    versions = {m.lower() for m in _VERSION.findall(text)}
    without = _LABEL.sub(" ", _VERSION.sub(" ", _DATE.sub(" ", _DASHED_ID.sub(" ", text))))
    return frozenset(_named_values(text) | dates | versions | _numbers(without) | handles)


def names_and_numbers(text: str) -> set[str]:
    """The values a plain statement is kept for as a reflected fact: its names and numbers
    (not the dates, versions and handles `values_of` also reads: chat names a day or a time
    in passing far more often than it sets one; measured on LoCoMo, those made reflection
    keep chat as facts that crowded out the turns a question needs)."""
    without = _LABEL.sub(" ", _VERSION.sub(" ", _DATE.sub(" ", _DASHED_ID.sub(" ", text))))
    return named_values(text) | _numbers(without)


_NUMERIC = re.compile(r"^(\$?[\d.,:]+)([a-z%]*)$")


def _same_value(x: str, y: str) -> bool:
    """One value, allowing a prefix for names ("Postgres", "PostgreSQL"); numbers only
    match exactly ("1" is not "15"), with their units, or without one on either side
    ("30" and "30min")."""
    if x == y:
        return True
    nx, ny = _NUMERIC.match(x), _NUMERIC.match(y)
    if nx and ny:
        return nx.group(1) == ny.group(1) and not (
            nx.group(2) and ny.group(2) and nx.group(2) != ny.group(2))
    if x[:1].isdigit() or y[:1].isdigit() or x[:1] == "$" or y[:1] == "$":
        return False
    return x.startswith(y) or y.startswith(x)


def overlap(xs: set[str], ys: set[str]) -> bool:
    return any(_same_value(x, y) for x in xs for y in ys)


def contradicts(a: str, b: str) -> bool:
    """Two statements on one subject contradict when each names something and none of the
    names match (allowing a prefix: "Postgres" and "PostgreSQL" are one value)."""
    va, vb = named_values(a), named_values(b)
    if not va or not vb:
        return False
    return not overlap(va, vb)


def differs(a: str, b: str) -> bool:
    """Each statement sets a value (a name or a number) the other does not: "Node 18" and
    "Node 22" differ, "Dublin" and "Dublin, three zones" do not (nothing of the first is
    gone)."""
    va, vb = values_of(a), values_of(b)
    if not va or not vb:
        return False
    return any(not overlap({x}, vb) for x in va) and any(not overlap({y}, va) for y in vb)


def restates(text: str, fact: Fact) -> bool:
    """Every value `text` sets is one `fact` already holds."""
    said, held = values_of(text), values_of(fact.content)
    return bool(said) and all(overlap({v}, held) for v in said)


def shape_of(value: str) -> str:
    """A number's shape ("3.11" -> "9.9", "10:15" -> "9:9"); names have none."""
    if not value[:1].isdigit():
        return ""
    return re.sub(r"\d+", "9", value)


def normalise(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


# "X instead of Y", "X, not Y", "from Y to X", "no more Y", "it used to be Y": the words a
# change says are gone (group "old") and, where it says so, the ones it sets (group "new").
_STOP = r"(?=[,.;:!?)]|\s+(?:and|but|because|since|as|from|for|now|anymore|any more|then)\b|$)"
_OLD = r"(?P<old>[\w$#.:/+-]+(?: [\w$#.:/+-]+){0,2}?)"
_NEW = r"(?P<new>[\w$#.:/+-]+(?: [\w$#.:/+-]+){0,2}?)"
_CONTRASTS: tuple[re.Pattern[str], ...] = tuple(re.compile(p, re.IGNORECASE) for p in (
    rf"\b{_NEW},? (?:instead of|rather than|in place of|replacing) (?:the |our )?{_OLD}{_STOP}",
    rf"\b(?:instead of|rather than) (?:the |our )?{_OLD},? (?:we(?:'ll| will)? (?:use|go with"
    rf"|pick|take)|it(?:'s| is)|use|go with) {_NEW}{_STOP}",
    rf"\bfrom {_OLD} to {_NEW}{_STOP}",
    rf"\b{_NEW},? not {_OLD}(?: anymore| any more)?{_STOP}",
    rf"\b(?:no more|no longer|not using|stop using|moving off|moving away from|away from"
    rf"|drop(?:ping)?|ditch(?:ing)?|replac(?:e|ing)) (?:the |our )?{_OLD}{_STOP}",
    rf"\b(?:it|that|this|the \w+) (?:used to be|was previously|was originally) {_OLD}{_STOP}",
))
_FILLER_WORDS = frozenset(re.findall(r"\w+", (
    "the a an our we it that this them to of in on at for with is are be was were set "
    "make it's its now from use using what which who plan change update")))


def _words_value(phrase: str) -> set[str]:
    """The values a short phrase names; without names or numbers, its last content word
    ("amber", "the blue room")."""
    found = values_of(phrase)
    if found:
        return found
    words = [w for w in re.findall(r"[a-z][a-z0-9+#-]*", phrase.lower())
             if w not in _FILLER_WORDS]
    return {words[-1]} if words else set()


def contrast(text: str) -> tuple[set[str], set[str]]:
    """(new values, old values) a change names by contrast ("teal instead of amber", "now
    1000, not 200", "from Jenkins to GitHub Actions"); two empty sets when it names none."""
    new: set[str] = set()
    old: set[str] = set()
    for pattern in _CONTRASTS:
        for match in pattern.finditer(text):
            said = match.groupdict()
            if said.get("old"):
                old |= _words_value(said["old"])
            if said.get("new"):
                new |= _words_value(said["new"])
    return new - old, old


def drop_cached() -> None:
    """Forget the statements whose values are remembered (a forget erases their text from
    the process too)."""
    _named_values.cache_clear()
    _values_of.cache_clear()


def holds(text: str, value: str) -> bool:
    """Whether `text` states `value` (one of its values, or the word itself: "amber")."""
    if overlap(values_of(text), {value}):
        return True
    return " " not in value and not value[:1].isdigit() and re.search(
        rf"(?<![\w-]){re.escape(value)}(?![\w-])", text.lower()) is not None
