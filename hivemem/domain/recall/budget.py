"""Token-budget packing and near-duplicate removal over scored candidates."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from hivemem.domain.consolidation import differs


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
) -> tuple[list[Candidate], list[Excluded]]:
    """Choose what goes into the context, best first, and say why the rest did not.

    In score order: below `min_score` -> threshold; a near-duplicate of a better item ->
    duplicate; past `limit` items -> limit; past its source's share of the budget -> quota;
    not fitting the remaining budget -> budget (smaller, lower-scored items may still fit).
    The token counts of the chosen items never sum past `budget`.
    """
    ordered = sorted(candidates, key=lambda c: c.score, reverse=True)
    excluded: list[Excluded] = []
    relevant = []
    for cand in ordered:
        judged = cand.score if cand.threshold_score is None else cand.threshold_score
        if judged < min_score:
            excluded.append(Excluded(cand, "threshold", f"score below {min_score:g}"))
        else:
            relevant.append(cand)
    unique, duplicates = _dedup(relevant, dedup_threshold)
    excluded.extend(Excluded(c, "duplicate", f"near-duplicate of {k}") for c, k in duplicates)
    chosen: list[Candidate] = []
    used = 0
    used_by_source: dict[str, int] = {}
    for cand in unique:
        if limit is not None and len(chosen) >= limit:
            excluded.append(Excluded(cand, "limit", f"past the first {limit} items"))
            continue
        share = quotas.get(cand.source, 1.0)
        source_used = used_by_source.get(cand.source, 0)
        if share < 1.0 and source_used + cand.token_count > share * budget:
            excluded.append(Excluded(cand, "quota", f"{cand.source} quota {share:.0%} of budget"))
            continue
        if used + cand.token_count > budget:
            excluded.append(Excluded(cand, "budget", f"{cand.token_count} tokens, "
                                                      f"{budget - used} left"))
            continue
        chosen.append(cand)
        used += cand.token_count
        used_by_source[cand.source] = source_used + cand.token_count
    return chosen, excluded


def _normalised(text: str) -> str:
    return " ".join(text.lower().split())


def drop_near_duplicates(
    candidates: Sequence[Candidate], threshold: float
) -> tuple[list[Candidate], list[Candidate]]:
    """Keep the best-scored of each group of near-duplicates.

    Two candidates are duplicates when their normalised texts are equal or their (unit)
    vectors have cosine >= threshold. Returns (kept, dropped), kept in descending score.
    """
    ordered = sorted(candidates, key=lambda c: c.score, reverse=True)
    kept, dropped = _dedup(ordered, threshold)
    return kept, [c for c, _key in dropped]


def _dedup(
    ordered: Sequence[Candidate], threshold: float
) -> tuple[list[Candidate], list[tuple[Candidate, str]]]:
    """`ordered` best first; each dropped candidate comes with the key of the kept one."""
    dim = next((len(c.vector) for c in ordered if c.vector is not None), 0)
    # Kept vectors fill one preallocated matrix (stacking them per candidate was O(n^2)
    # copying); one matrix-vector product per candidate, no n x n gemm (OpenBLAS's thread
    # pool costs more than it saves on a busy 2-core box).
    matrix = np.empty((len(ordered), dim), dtype=np.float32)
    n_vectors = 0
    vector_keys: list[str] = []
    vector_texts: list[str] = []
    kept: list[Candidate] = []
    dropped: list[tuple[Candidate, str]] = []
    seen_texts: dict[str, str] = {}
    for cand in ordered:
        text = _normalised(cand.text)
        if text in seen_texts:
            dropped.append((cand, seen_texts[text]))
            continue
        if cand.vector is not None and n_vectors:
            sims = matrix[:n_vectors] @ cand.vector
            # "The deploy is on Tuesday" and "... on Thursday" embed alike but say two
            # things: a near-duplicate must not set another value. (Most candidates are
            # near no kept one: one `max` before listing indexes.)
            same = [i for i in np.flatnonzero(sims >= threshold)
                    if not differs(vector_texts[i], cand.text)] if sims.max() >= threshold else []
            if same:
                best = max(same, key=lambda i: float(sims[i]))
                dropped.append((cand, vector_keys[best]))
                continue
        seen_texts[text] = cand.key
        if cand.vector is not None:
            matrix[n_vectors] = cand.vector
            vector_keys.append(cand.key)
            vector_texts.append(cand.text)
            n_vectors += 1
        kept.append(cand)
    return kept, dropped


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
