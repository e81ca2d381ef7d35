"""Token-budget packing and near-duplicate removal over scored candidates."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt


@dataclass(slots=True)
class Candidate:
    """A scored item on its way into the context. `vector` is only used for dedup."""

    key: str
    text: str
    score: float
    token_count: int
    vector: npt.NDArray[np.float32] | None = None
    payload: dict[str, object] = field(default_factory=dict)


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
    dim = next((len(c.vector) for c in ordered if c.vector is not None), 0)
    # Kept vectors fill one preallocated matrix (stacking them per candidate was O(n^2)
    # copying); one matrix-vector product per candidate, no n x n gemm (OpenBLAS's thread
    # pool costs more than it saves on a busy 2-core box).
    matrix = np.empty((len(ordered), dim), dtype=np.float32)
    n_vectors = 0
    kept: list[Candidate] = []
    dropped: list[Candidate] = []
    seen_texts: set[str] = set()
    for cand in ordered:
        text = _normalised(cand.text)
        if text in seen_texts:
            dropped.append(cand)
            continue
        if (
            cand.vector is not None
            and n_vectors
            and float((matrix[:n_vectors] @ cand.vector).max()) >= threshold
        ):
            dropped.append(cand)
            continue
        seen_texts.add(text)
        if cand.vector is not None:
            matrix[n_vectors] = cand.vector
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
