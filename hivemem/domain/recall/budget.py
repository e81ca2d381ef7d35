"""Token-budget packing and near-duplicate removal over scored candidates."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from hivemem.domain.consolidation import differs
from hivemem.domain.recall.resemblance import Resemblance


@dataclass(slots=True)
class Candidate:
    """A scored item on its way into the context. `vector` is only used for dedup."""

    key: str
    text: str
    score: float
    token_count: int
    vector: npt.NDArray[np.float32] | None = None
    payload: dict[str, object] = field(default_factory=dict)
    source: str = "turn"
    # What `min_score` is judged on, when not `score` (history ranks low but is not noise).
    threshold_score: float | None = None


@dataclass(frozen=True, slots=True)
class Excluded:
    candidate: Candidate
    reason: str  # budget, threshold, duplicate, quota, limit
    detail: str = ""


def select(
    candidates: Sequence[Candidate],
    *,
    budget: int,
    min_score: float,
    dedup_threshold: float,
    quotas: Mapping[str, float],
    limit: int | None = None,
    resemblance: Resemblance[Candidate] | None = None,
) -> tuple[list[Candidate], list[Excluded]]:
    """Choose what goes into the context, best first, and say why the rest did not.

    In score order: below `min_score` -> threshold; a near-duplicate of an item already
    chosen -> duplicate; past `limit` items -> limit; past its source's share of the budget
    -> quota; not fitting the remaining budget -> budget (smaller, lower-scored items may
    still fit). An item left out never stands for its near-duplicates (the turn that says
    what a quota-excluded fact says still competes), and budget the others leave unused goes
    to quota-excluded items, best first. The token counts of the chosen items never sum
    past `budget`.

    `resemblance`: what dedup reads of a pool that `candidates` are some of (built over
    `candidates` when not given): a caller that selects from one pool several times
    passes the same one, so each text is normalised and each cosine computed once.
    """
    if resemblance is not None and resemblance.threshold != dedup_threshold:
        raise ValueError("the resemblance was built for another dedup threshold")
    ordered = sorted(candidates, key=lambda c: c.score, reverse=True)
    excluded: list[Excluded] = []
    relevant = []
    for cand in ordered:
        judged = cand.score if cand.threshold_score is None else cand.threshold_score
        if judged < min_score:
            excluded.append(Excluded(cand, "threshold", f"score below {min_score:g}"))
        else:
            relevant.append(cand)
    packer = _Packer(relevant, resemblance or Resemblance(relevant, dedup_threshold),
                     budget, limit)
    waiting: list[int] = []  # quota-excluded, for the room left at the end
    for j, cand in enumerate(relevant):
        duplicate_of = packer.duplicate_of(j)
        if duplicate_of is not None:
            excluded.append(Excluded(cand, "duplicate", f"near-duplicate of {duplicate_of}"))
            continue
        if limit is not None and len(packer.chosen) >= limit:
            excluded.append(Excluded(cand, "limit", f"past the first {limit} items"))
            continue
        share = quotas.get(cand.source, 1.0)
        source_used = packer.used_by_source.get(cand.source, 0)
        if share < 1.0 and source_used + cand.token_count > share * budget:
            waiting.append(j)
            continue
        if packer.used + cand.token_count > budget:
            excluded.append(Excluded(cand, "budget", f"{cand.token_count} tokens, "
                                                      f"{budget - packer.used} left"))
            continue
        packer.choose(j)
    for j in waiting:
        cand = relevant[j]
        share = quotas.get(cand.source, 1.0)
        if packer.fits(j) and packer.duplicate_of(j) is None:
            packer.choose(j)
        else:
            excluded.append(Excluded(cand, "quota", f"{cand.source} quota {share:.0%} of budget"))
    chosen = sorted(packer.chosen, key=lambda i: (-relevant[i].score, i))
    return [relevant[i] for i in chosen], excluded


class _Packer:
    """The items chosen so far (indices into `ordered`, best first) and what they use."""

    def __init__(self, ordered: Sequence[Candidate], resemblance: Resemblance[Candidate],
                 budget: int, limit: int | None) -> None:
        self.ordered = ordered
        self.resemblance = resemblance
        # Each candidate's place in the resemblance's pool, and back.
        self.positions = resemblance.positions(ordered)
        self.index_at = {p: j for j, p in enumerate(self.positions)}
        self.budget = budget
        self.limit = limit
        # Per candidate, the chosen items near it: [(cosine, index)] (filled as they are
        # chosen, from the chosen item's cosines: the only ones computed).
        self.near_chosen: dict[int, list[tuple[float, int]]] = {}
        self.chosen: list[int] = []
        self.texts: dict[str, str] = {}
        self.used = 0
        self.used_by_source: dict[str, int] = {}

    def duplicate_of(self, j: int) -> str | None:
        """The key of a chosen item `ordered[j]` repeats, or None."""
        cand = self.ordered[j]
        text = self.resemblance.texts[self.positions[j]]
        if text in self.texts:
            return self.texts[text]
        # "The deploy is on Tuesday" and "... on Thursday" embed alike but say two things:
        # a near-duplicate must not set another value.
        same = [(sim, i) for sim, i in self.near_chosen.get(j, ())
                if not differs(self.ordered[i].text, cand.text)]
        return self.ordered[max(same, key=_closest)[1]].key if same else None

    def fits(self, j: int) -> bool:
        return (self.used + self.ordered[j].token_count <= self.budget
                and (self.limit is None or len(self.chosen) < self.limit))

    def choose(self, j: int) -> None:
        cand = self.ordered[j]
        self.chosen.append(j)
        for sim, position in self.resemblance.near(self.positions[j]):
            other = self.index_at.get(position)
            if other is not None:
                self.near_chosen.setdefault(other, []).append((sim, j))
        self.texts[self.resemblance.texts[self.positions[j]]] = cand.key
        self.used += cand.token_count
        self.used_by_source[cand.source] = self.used_by_source.get(cand.source, 0) + (
            cand.token_count)


def drop_near_duplicates(
    candidates: Sequence[Candidate], threshold: float
) -> tuple[list[Candidate], list[Candidate]]:
    """Keep the best-scored of each group of near-duplicates.

    Two candidates are duplicates when their normalised texts are equal or their (unit)
    vectors have cosine >= threshold. Returns (kept, dropped), kept in descending score.
    """
    kept, dropped = _dedup(Resemblance(candidates, threshold))
    return kept, [c for c, _key in dropped]


def _dedup(pool: Resemblance[Candidate]) -> tuple[list[Candidate], list[tuple[Candidate, str]]]:
    """The pool best first; each dropped candidate comes with the key of the kept one."""
    ordered = pool.ordered
    near_kept: dict[int, list[tuple[float, int]]] = {}  # as `_Packer.near_chosen`
    kept: list[Candidate] = []
    dropped: list[tuple[Candidate, str]] = []
    seen_texts: dict[str, str] = {}
    for j, cand in enumerate(ordered):
        text = pool.texts[j]
        if text in seen_texts:
            dropped.append((cand, seen_texts[text]))
            continue
        # "The deploy is on Tuesday" and "... on Thursday" embed alike but say two things:
        # a near-duplicate must not set another value.
        same = [(sim, i) for sim, i in near_kept.get(j, ())
                if not differs(ordered[i].text, cand.text)]
        if same:
            dropped.append((cand, ordered[max(same, key=_closest)[1]].key))
            continue
        seen_texts[text] = cand.key
        kept.append(cand)
        for sim, other in pool.near(j):
            near_kept.setdefault(other, []).append((sim, j))
    return kept, dropped


def _closest(pair: tuple[float, int]) -> tuple[float, int]:
    """The most similar; of equals, the better-scored (earlier)."""
    return pair[0], -pair[1]


def pack(
    candidates: Sequence[Candidate], budget: int
) -> tuple[list[Candidate], list[Candidate]]:
    """Greedy packing by score into a hard token budget.

    An item that does not fit is skipped, and smaller, lower-scored ones may still fill the
    remaining room. The sum of token counts of the returned items never exceeds `budget`.
    """
    chosen: list[Candidate] = []
    left_out: list[Candidate] = []
    used = 0
    for cand in sorted(candidates, key=lambda c: c.score, reverse=True):
        if used + cand.token_count <= budget:
            chosen.append(cand)
            used += cand.token_count
        else:
            left_out.append(cand)
    return chosen, left_out
