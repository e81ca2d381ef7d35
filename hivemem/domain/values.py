"""Values: what a statement sets (names, acronyms, numbers) and how two compare (pure).

"Switch the database to MySQL" sets ``mysql``; "the limit is 100/min" sets ``100``.
Consolidation versions facts by these: a newer statement of a slot that sets another value
replaces the old one, one that sets the same value restates it.
"""

from __future__ import annotations

import re
from functools import lru_cache

from hivemem.domain.fact import Fact

__all__ = ["contradicts", "differs", "named_values", "normalise", "overlap", "restates",
           "shape_of", "values_of"]

# A word after a sentence end or a label ("Sam: The build...") is capitalised anyway.
_NAME = re.compile(r"(?<![.!?:]\s)(?<!^)\b([A-Z][A-Za-z0-9.+#-]*[A-Za-z0-9+#]|[A-Z]{2,})\b")
_FIRST_NAME = re.compile(r"([A-Z][a-z0-9.+#-]*[A-Z0-9+#][A-Za-z0-9.+#-]*)\b")
# "Jonas owns the billing service": a capitalised first word acting on something is a name.
_FIRST_ACTOR = re.compile(r"([A-Z][a-z]{2,}) (?:owns|leads|maintains|manages|runs|handles"
                          r"|writes|approves|reviews|hosts|is responsible)\b")
_IDENTIFIER = re.compile(r"(?<![\w.:$-])([a-z][a-z]+\d[a-z0-9]*)(?![\w.-]*\d*\s?(?:%|ms))\b")
# Short acronyms that name no choice (API, PR, VM); UTC, AWS or CET do.
_GENERIC = frozenset(re.findall(r"\w+", (
    "api apis get post put patch delete vm vms pr prs ci cd qa ui ux id ids url urls sdk cli db "
    "ok fyi eta pm am todo json http https sql csv mb gb kb tb cpu ram sla slo dns ssr io os "
    "it i tl dr asap faq rfc poc mvp q1 q2 q3 q4")))
_LABELLED = re.compile(r"^[A-Z][a-z]+:\s+")  # "Sam: ..." names the speaker, not a value
_NUMBER = re.compile(r"(?<![A-Za-z])\$?\d+(?:[.,:]\d+)*\s?(?:%|ms|s|gb|mb|k|m|am|pm)?\b",
                     re.IGNORECASE)

def named_values(text: str) -> set[str]:
    """Proper names and acronyms in a statement (PostgreSQL, MySQL, GraphQL, AWS...)."""
    # Generic acronyms (API, GET, VM) name no choice; UTC, AWS or RQ do.
    text = _LABELLED.sub("", text.strip())
    names = {m.group(1).lower() for m in _NAME.finditer(text)
             if m.group(1).lower() not in _GENERIC}
    # A sentence's first word counts when it could not be an ordinary capitalised word.
    first = _FIRST_NAME.match(text)
    if first and first.group(1).lower() not in _GENERIC:
        names.add(first.group(1).lower())
    # Tool names are often lowercase with a digit: autopep8, python3, http2.
    names.update(m.lower() for m in _IDENTIFIER.findall(text))
    actor = _FIRST_ACTOR.match(text)
    if actor and actor.group(1) not in ("The", "This", "That", "Our", "Everyone", "Nobody"):
        names.add(actor.group(1).lower())
    return names


def values_of(text: str) -> set[str]:
    """What a statement sets: its names and its numbers (a new set each call)."""
    return set(_values_of(text))


@lru_cache(maxsize=1 << 16)
def _values_of(text: str) -> frozenset[str]:
    """`values_of`, remembered: consolidation asks it of every known fact's content for
    every new statement (reflection, and recall's view of the unreflected turns), and the
    regexes cost ~50 us a text."""
    numbers = {" ".join(m.group(0).lower().split()) for m in _NUMBER.finditer(text)}
    return frozenset(named_values(text) | numbers)


def _same_value(x: str, y: str) -> bool:
    """One value, allowing a prefix for names ("Postgres", "PostgreSQL"); numbers only
    match exactly ("1" is not "15")."""
    if x == y:
        return True
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
