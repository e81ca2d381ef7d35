"""The newer of two statements on one thing first, for a question about what holds now (pure).

The change rules (`hivemem.domain.lineage`, the slot table) mark a statement history only on
plain evidence: a value they read, a slot they name. A change said in words they do not
read ("Planning day is at the Linden Room in the central library." after "It's at the
Harbourside Hotel") leaves both statements current, and the older one, often worded closer
to the question, ranks first. What recall can still tell without reading the words is that
the two are about one thing (their embeddings are close) and which was said later.

So, for a question about now, among the best-ranked candidates: a statement said after
another one on the same thing ranks just above it. Nothing is left out (what the rules did
not mark history stays in the context; only its order changes), a question or a proposal
never moves up ("what if we did mongo?"), and questions about the past or about an event
are left alone (`QueryIntent.current`). Measured on the change suite before it was built:
writer c's tuning third (never tuned on before) gained 5 ranked probes of 94, writers a and
b one of 414 (two lost, both items that restate the change with the old value beside it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hivemem.domain.change_words import weighs

# Two statements whose embeddings are this close are about one thing (all-MiniLM-L6-v2:
# "staging lives on stg-eu-2" / "staging is on stg-eu-4 now" ~0.8; two unrelated turns of
# one chat ~0.1-0.3).
SAME_THING = 0.6
# How many of the best-ranked candidates are reordered: about a context's worth at the
# usual budgets (a newer statement far down the ranking is not pulled up by this).
TOP = 12
_STEP = 1e-4


@dataclass(frozen=True, slots=True)
class Statement:
    """A ranked candidate as this reads it: its score, when it was said, its words and
    its embedding (unit length)."""

    key: str
    final: float
    seq: int
    text: str
    vector: npt.NDArray[np.float32]


def newer_first(statements: Sequence[Statement], *, same_thing: float = SAME_THING,
                top: int = TOP) -> dict[str, float]:
    """The new final scores (key -> score) of the statements that move: among the `top`
    best-ranked, each one said after another on the same thing (cosine >= `same_thing`)
    that ranks above it, moved to just above that one. A question or a turn that weighs
    or proposes never moves up; an older statement is never moved down past a newer one
    that is not about the same thing."""
    ranked = sorted(statements, key=lambda s: -s.final)[:top]
    if len(ranked) < 2:
        return {}
    vectors = np.stack([s.vector for s in ranked]).astype(np.float32, copy=False)
    similar = (vectors @ vectors.T) >= same_thing
    # Whether a statement may move up, read only for one about to (the weighing patterns
    # cost ~20 us a text; most recalls move nothing).
    movable: dict[int, bool] = {}

    def may_move(i: int) -> bool:
        if i not in movable:
            text = ranked[i].text
            movable[i] = not (text.rstrip().endswith("?") or weighs(text))
        return movable[i]

    order = list(range(len(ranked)))
    # Each pass moves one statement up; a statement moves only above older ones, so the
    # passes end (at most one per pair).
    for _ in range(len(ranked) * len(ranked)):
        move = _first_move(order, ranked, similar, may_move)
        if move is None:
            break
        above, newer = move
        order.insert(above, order.pop(newer))
    moved: dict[str, float] = {}
    if order == list(range(len(ranked))):
        return moved
    # The reordered statements take the scores of the places they now hold (a score a
    # little above the next one down where two places had the same score).
    places = [ranked[i].final for i in range(len(ranked))]
    for place in range(len(order) - 2, -1, -1):
        if places[place] <= places[place + 1]:
            places[place] = places[place + 1] + _STEP
    for place, index in enumerate(order):
        if index != place:
            moved[ranked[index].key] = places[place]
    return moved


def _first_move(order: list[int], ranked: Sequence[Statement], similar: npt.NDArray[np.bool_],
                may_move: Callable[[int], bool]) -> tuple[int, int] | None:
    """(the place to move to, the place of the statement to move) for the first newer
    statement ranked below an older one on the same thing, or None."""
    for above, a in enumerate(order):
        for below in range(above + 1, len(order)):
            b = order[below]
            if ranked[b].seq > ranked[a].seq and similar[a, b] and may_move(b):
                return above, below
    return None
