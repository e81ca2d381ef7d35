"""The newest answer to a question about now (pure).

The keeper marks a statement stale when it reads a change off the turns as they come, by
their words and values. A question names the slot too: of two statements of one session
that both answer it, on one thing (their vectors close), where the later one says a value
of the same kind in place of one the earlier says ("Q1 capacity: 6 engineers x 8 = 48
points per sprint", then "From the 3rd: 8 engineers ... then 64 points per sprint"), the
later one is what holds now, however it was worded. Recall then treats the earlier one as
it treats a statement the keeper replaced: left out of a context about now once its
successor is in it or competed for it; a question about the past is not asked this way.

A turn that asks, weighs or proposes (`weighs`) replaces nothing: "what if we did mongo"
leaves Postgres current.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hivemem.domain.change_words import weighs
from hivemem.domain.recall.resemblance import similarity_blocks
from hivemem.domain.value_reading import Value, _keyed, _same_kind, value_keys

__all__ = ["Answer", "newer_answers"]

# How close two statements' vectors are when they say one thing. all-MiniLM-L6-v2 puts two
# wordings of one slot at ~0.45-0.9; at 0.45 statements on neighbouring slots of one topic
# paired too (12 tuning probes lost: a summary replaced the list it summed up), at 0.6 with
# the loose kinds left out none was lost.
TOPIC = 0.6
# How close to the question a statement is when it answers it, at least, and at most how
# far below the question's best candidate.
RELEVANCE = 0.3
BELOW_BEST = 0.25
# How much less close to the question the later statement may be (a later statement on a
# neighbouring slot, "Decaf: $15.75/lb" after the house espresso's price, is less about a
# question on the espresso)...
SLACK = 0.05
# ...unless the two say nearly the same thing (vectors this close are one statement reworded,
# "All worker Dockerfiles use python:3.11-slim" and "...all 5 worker Dockerfiles now build
# FROM python:3.12-slim. Images rebuilt and pushed."): what sets them apart from the
# question is then their wording, not what they are about.
RESTATED = 0.85


# Kinds read too loosely to pair on their own: any capitalised word is a name, and a
# bare clock time is as often an option or another leg of a trip as a change.
_LOOSE = frozenset(("name", "time", "day"))
_DIGIT_OR_PATH = re.compile(r"[0-9/]")


@dataclass(frozen=True, slots=True)
class Answer:
    """One candidate statement of the asking session: its place in the session, its text,
    its unit vector and its similarity to the question."""

    seq: int
    text: str
    vector: npt.NDArray[np.float32]
    relevance: float


def newer_answers(answers: Sequence[Answer], *, topic: float = TOPIC,
                  relevance: float = RELEVANCE,
                  below_best: float = BELOW_BEST) -> dict[int, int]:
    """Index of an answer -> index of the newest later answer that replaces it (on one
    thing, a value of the same kind said in place of one it says)."""
    if len(answers) < 2:
        return {}
    best = max(a.relevance for a in answers)
    floor = max(relevance, best - below_best)
    rows = [i for i, a in enumerate(answers) if a.relevance >= floor]
    if len(rows) < 2:
        return {}
    rows.sort(key=lambda i: answers[i].seq)
    # The vectors first: pairs on one thing are few, and only their texts are read for
    # values and wording (each read is a parse; kept per text, as recall meets the same
    # candidates again and again).
    sims = _pair_similarities(np.stack([answers[i].vector for i in rows]))
    close = sims >= topic
    replaced: dict[int, int] = {}
    for a, b_rows in enumerate(close):
        later = np.flatnonzero(b_rows)
        if not len(later):
            continue
        old = rows[a]
        gone = _pairing_values(answers[old].text)
        if not gone:
            continue
        for b in later[::-1]:  # the newest first
            new = rows[int(b)]
            if answers[new].seq <= answers[old].seq:
                continue
            if answers[new].relevance < answers[old].relevance - SLACK \
                    and sims[a, b] < RESTATED:
                continue
            if _in_place_of(gone, _pairing_values(answers[new].text)) \
                    and not _weighs(answers[new].text):
                replaced[old] = new
                break
    return replaced


@functools.lru_cache(maxsize=16_384)
def _pairing_values(text: str) -> frozenset[Value]:
    """The values of `text` that pair (`_pairs`). Each has a digit or is a path: a text with
    neither is not parsed (most chat turns)."""
    if _DIGIT_OR_PATH.search(text) is None:
        return frozenset()
    return frozenset(v for v in _keyed(value_keys(text)) if _pairs(v, text))


def _pairs(value: Value, text: str) -> bool:
    """Whether `value` says how much or when, not which one. A number before what it counts
    or measures ("6 engineers", "220 g", "$45") is a quantity; a number after a word names
    which one as often as it sets a value ("note 3", "Sprint 18", "Node 20", "limit 100"),
    and a bare number says neither: those are left to the keeper's rules."""
    kind = value.kind
    if kind in _LOOSE:
        return False
    if kind.startswith("amount:"):
        unit = kind.removeprefix("amount:")
        if unit.startswith("@"):
            counted = rf"(?<![\w.]){re.escape(value.text)}\s+{re.escape(unit[1:])}"
            return re.search(counted, text, re.IGNORECASE) is not None
        return bool(unit)
    return kind != "version" or " " not in value.text


@functools.lru_cache(maxsize=16_384)
def _weighs(text: str) -> bool:
    return weighs(text)


def _pair_similarities(matrix: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Row i, column j > i: the cosine of vectors i and j (0 elsewhere). In products small
    enough to stay off OpenBLAS's thread pool (`similarity_blocks`): on a busy 2-core box
    one 40 x 384 x 40 product handed to it took 7-8 ms instead of 20 us (measured)."""
    n = len(matrix)
    sims = np.zeros((n, n), dtype=np.float32)
    for start, block in similarity_blocks(matrix):
        sims[start:start + len(block)] = block
    return np.triu(sims, 1)


def _in_place_of(old: frozenset[Value], new: frozenset[Value]) -> bool:
    """`new` says a value of the same kind as one `old` says and `new` does not."""
    gone = old - new
    added = new - old
    return any(_same_kind(g, n) for g in gone for n in added)
