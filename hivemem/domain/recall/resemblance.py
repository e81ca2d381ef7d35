"""Which candidates repeat one another, as the budget's dedup reads them (`budget.select`):
each candidate's text normalised, and the cosine of its vector with every other's.

Dedup compares a candidate only with the items chosen before it, and a recall chooses ~20
of its ~60 candidates, up to four times over one pool (`_select_current` fills again the
room that stale statements leave). So the cosines are computed in row blocks when one of
the block's candidates is first chosen, and kept for the pool: not every pair in every
round (`_near_pairs` did that: 10-13% of a LoCoMo recall's CPU).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Generic, Protocol, TypeVar, cast

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]


class Comparable(Protocol):
    """What dedup reads of a candidate (`budget.Candidate`)."""

    @property
    def key(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def score(self) -> float: ...
    @property
    def vector(self) -> F32 | None: ...


C = TypeVar("C", bound=Comparable)

# Multiply-adds per matrix product at most: OpenBLAS hands a product of more than 262k to
# its thread pool, which costs more than it saves on a busy 2-core box.
PRODUCT_SIZE = 200_000


def similarity_blocks(matrix: F32) -> Iterator[tuple[int, F32]]:
    """`matrix @ matrix.T` in row blocks of at most `PRODUCT_SIZE` multiply-adds: (first row,
    the block's similarities to every row). The last row is left out (its pairs are all in
    earlier rows' blocks when only pairs with a later row are wanted)."""
    step = block_rows(matrix)
    for start in range(0, len(matrix) - 1, step):
        yield start, matrix[start:start + step] @ matrix.T


def block_rows(matrix: F32) -> int:
    """Rows of `matrix` whose similarities to every row make one product of at most
    `PRODUCT_SIZE` multiply-adds (at least one)."""
    return max(1, PRODUCT_SIZE // max(1, matrix.size))


def normalised(text: str) -> str:
    """A text as dedup compares it: lower case, runs of whitespace as one space."""
    return " ".join(text.lower().split())


class Resemblance(Generic[C]):
    """One pool of candidates, best first (`ordered`; a candidate is named by its position
    there): each one's text normalised (`texts`), and the candidates whose vectors are at
    cosine `threshold` or more from its own (`near`, computed when first asked for).

    The pool's selections pass its candidates, or some of them, as they are (`positions`
    finds them by identity): a candidate this pool was not built over is refused, never
    answered with another's cosines."""

    def __init__(self, candidates: Iterable[C], threshold: float) -> None:
        self.threshold = threshold
        # Best first, as `select` orders them: the rows asked for (the chosen items') are
        # the first ones, so they come in few blocks.
        self.ordered = sorted(candidates, key=lambda c: c.score, reverse=True)
        self._at = {id(c): p for p, c in enumerate(self.ordered)}
        self._with_vector = [p for p, c in enumerate(self.ordered) if c.vector is not None]
        self._row = {p: r for r, p in enumerate(self._with_vector)}
        self._matrix: F32 | None = None  # the vectors, a row each (stacked when first read)
        self._step = 1  # rows per block
        self._near: dict[int, list[tuple[float, int]]] = {}
        # Each text as dedup compares it (a position's, by position).
        self.texts = [normalised(c.text) for c in self.ordered]

    def positions(self, candidates: Sequence[C]) -> list[int]:
        """Where each of `candidates` (these very objects) is in `ordered`."""
        at = self._at
        try:
            return [at[id(c)] for c in candidates]
        except KeyError:
            missing = next(c for c in candidates if id(c) not in at)
            raise ValueError(
                f"{missing.key!r} is not one of this pool's candidates") from None

    def near(self, position: int) -> list[tuple[float, int]]:
        """The other candidates whose vectors have cosine >= `threshold` with this one's:
        [(cosine, position)] in position order (none without a vector)."""
        got = self._near.get(position)
        if got is None:
            row = self._row.get(position)
            if row is None or len(self._with_vector) < 2:
                return []
            self._compute_block(row - row % self._block_rows())
            got = self._near[position]
        return got

    def _block_rows(self) -> int:
        if self._matrix is None:
            self._matrix = np.stack([cast(F32, self.ordered[p].vector)
                                     for p in self._with_vector])
            self._step = block_rows(self._matrix)
        return self._step

    def _compute_block(self, start: int) -> None:
        """The near candidates of every row of the block from row `start`: one product, one
        scan of it (most rows are near none but themselves)."""
        matrix = cast(F32, self._matrix)
        rows = self._with_vector[start:start + self._step]
        cosines = matrix[start:start + self._step] @ matrix.T
        for position in rows:
            self._near[position] = []
        for r, c in zip(*np.nonzero(cosines >= self.threshold), strict=True):
            if start + r != c:  # (each vector with itself)
                self._near[rows[r]].append((float(cosines[r, c]), self._with_vector[c]))
