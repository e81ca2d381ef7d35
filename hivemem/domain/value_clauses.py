"""The words said around each value of a turn (pure).

A turn often carries several values, each the value of something else ("Redis for caching,
S3 for uploads"; "standup 9:30, retro Thursdays 16:00"). When one of them is replaced, the
turn is history only for a question about that one: what it is the value of is read off the
clause it is said in (`clause_words`), and a question is about it when it shares those
words (`about`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from hivemem.domain.value_reading import value_keys, words_in

# Where one value's clause ends and the next one's begins: sentence ends, commas, semicolons,
# colons, list lines, dashes between spaces, and the joining words of a list.
_CLAUSE = re.compile(r"(?<=[.!?;,:])\s+|\n+|\s+[-\u2013\u2014]\s+"
                     r"|\s+(?:and|but|while|whereas|plus)\s+|\s+\+\s+|\s*\|\s*")
# Read before each clause, so its first word is read as it was inside the turn (a name at
# the start of a clause is a name, not the start of a sentence).
_LEAD = "so "

# "What time ...", "when ...": a question about a time, a date or a day; "how much ...": an
# amount; "which version ...": a version. Which kinds of value a question asks for.
_ASKS_KIND = (
    (re.compile(r"\b(?:when|what time|which time|what day|which day|what date|how early"
                r"|how late|start|starts|begin|begins|deadline|due)\b", re.IGNORECASE),
     ("time", "date", "day")),
    (re.compile(r"\b(?:how (?:much|many|long|big|large|often)|cost|costs|price|budget|cap"
                r"|limit|amount|count|number of|rate|size|percentage)\b", re.IGNORECASE),
     ("amount:",)),
    (re.compile(r"\b(?:version|release)\b", re.IGNORECASE), ("version",)),
)


def clause_words(text: str, keys: Iterable[str],
                 names: Callable[[str], set[str]] | None = None) -> dict[str, frozenset[str]]:
    """Each key of `keys` (values `text` carries) -> the content words of the first clause
    of `text` it is said in (two values of one clause get the same words). A key no clause
    reads on its own (its reading needs more of the turn) is left out. `names`: the names
    known to the session read in a text in any case (`hivemem.domain.lineage`)."""
    wanted = set(keys)
    out: dict[str, frozenset[str]] = {}
    for clause in _CLAUSE.split(text):
        if not clause or not wanted - out.keys():
            continue
        found = (value_keys(_LEAD + clause) | (names(clause) if names else set())) & wanted
        if not found:
            continue
        # A heading ("Caps for the agents:") is what every value after it is of: it tells
        # none of them apart.
        words = frozenset() if clause.rstrip().endswith(":") else words_in(clause)
        for key in found - out.keys():
            out[key] = words
    return out


def own_words(key: str) -> frozenset[str]:
    """The words of a value itself ("name=cloudflare r2" -> cloudflare, r2), with its unit
    ("amount:hour=3" -> hour: "3 hours ago" and "2 hours" are on different things; a
    label, "amount:@pool=20", is what the value is of and stays a word of its clause)."""
    kind, _, text = key.partition("=")
    unit = kind.partition(":")[2]
    return words_in(text) | (words_in(unit) if unit and unit[0] not in "@$" else frozenset())


@dataclass(frozen=True, slots=True)
class Question:
    """What a question names, read once per recall: its content words, its values' keys and
    the kinds of value it asks for."""

    words: frozenset[str]
    keys: frozenset[str]
    kinds: frozenset[str]

    @classmethod
    def of(cls, text: str) -> Question:
        return cls(words=words_in(text), keys=value_keys(text), kinds=frozenset(
            k for pattern, kinds in _ASKS_KIND if pattern.search(text) for k in kinds))


@dataclass(frozen=True, slots=True)
class ValueParts:
    """A turn some of whose values went: the gone ones and the ones it still carries
    (`kept`), each with the words of its clause, read once (per slot-table view)."""

    gone: frozenset[str]
    kept: frozenset[str]
    gone_words: frozenset[str]  # besides the kept values' clauses' words
    kept_words: frozenset[str]  # besides the gone values' clauses' words

    @classmethod
    def of(cls, gone: Mapping[str, Iterable[str]], kept: Mapping[str, Iterable[str]]
           ) -> ValueParts:
        g = frozenset(w for words in gone.values() for w in words)
        k = frozenset(w for words in kept.values() for w in words)
        return cls(gone=frozenset(gone), kept=frozenset(kept), gone_words=g - k,
                   kept_words=k - g)

    @property
    def partial(self) -> bool:
        """Some of its values are still current."""
        return bool(self.gone) and bool(self.kept)

    def asked_by(self, question: Question) -> bool:
        """Whether `question` may be about a gone value. It is about a kept one only when it
        says so and nothing of the gone ones: it shares a word with a kept value's clause
        (or asks for a kind of value only a kept one is), and names no gone value nor what
        replaced it, shares no word with a gone value's clause and asks for no kind of value
        only a gone one is ("when ...?" and only a time went). A stale value handed over beside its
        successor misleads; a current one left out is most often said again elsewhere."""
        gone_kind = any(_kind_in(g, question.kinds) for g in self.gone)
        kept_kind = any(_kind_in(k, question.kinds) for k in self.kept)
        if question.keys & self.gone or question.words & self.gone_words or (
                gone_kind and not kept_kind):
            return True
        return not (question.words & self.kept_words or (kept_kind and not gone_kind))


def _kind_in(key: str, kinds: frozenset[str]) -> bool:
    kind = key.partition("=")[0]
    return kind in kinds or (kind.startswith("amount:") and "amount:" in kinds)
