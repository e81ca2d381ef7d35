"""The embedded store's vectors as rows of a file per collection, read by recall as arrays.

Recall reads the vectors of every candidate (~60 turns and facts a call). The engine hands
a point's vectors over as Python lists of floats, built anew on each read and converted to
arrays by us: at 100k turns that was ~1.5 ms of a 7 ms recall. Here each turn point's dense
and fused vectors are also one row of `turn-vectors.rows` (float32, dense then fused), each
fact's dense vector one row of `fact-vectors.rows`, and the point's payload names its row
(`ROW`): a search asks the engine for payloads only and reads the rows it names from a
memory map in one step.

The file is append-only but for rewrites in place: a point written again rewrites its row, a
refined window a row's fused half, a deleted point's row is zeroed (a forgotten turn leaves
no vector here), and a vacuum zeroes the rows no point names. A row is written before the
point that names it, so a crash leaves at most rows no point names (zeroed by the next
vacuum); a trailing partial row (a crash in the middle of an append) is cut on open. This
process is the folder's one writer (`edge`).
"""

from __future__ import annotations

import mmap
import os
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

# The payload field that names a point's row.
ROW = "vrow"
# The rows file of each collection, and the vectors a row holds (turns: dense and fused).
FILES = {"turns": "turn-vectors.rows", "facts": "fact-vectors.rows"}
HALVES = {"turns": 2, "facts": 1}


class RowVectors:
    """`path`: the rows file; `dim`: the vectors' dimension. Rows hold `[dense | fused]`
    (`halves` 2) or `[dense]` (1)."""

    def __init__(self, path: Path, dim: int, halves: int = 2) -> None:
        self.path = Path(path)
        self.dim = dim
        self.halves = halves
        self._row_bytes = halves * dim * 4
        self._lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        size = os.fstat(self._fd).st_size
        self._rows = size // self._row_bytes
        if size % self._row_bytes:  # a crash in the middle of an append: no point names it
            os.ftruncate(self._fd, self._rows * self._row_bytes)
        self._map: np.ndarray | None = None
        self._mapped = 0

    def __len__(self) -> int:
        return self._rows

    def _block(self, dense: np.ndarray, fused: np.ndarray | None) -> np.ndarray:
        parts = [dense] if self.halves == 1 or fused is None else [dense, fused]
        return np.ascontiguousarray(np.hstack(parts), dtype=np.float32)

    def append(self, dense: np.ndarray, fused: np.ndarray | None = None) -> range:
        """Write these rows at the end; returns their numbers."""
        block = self._block(dense, fused)
        with self._lock:
            start = self._rows
            os.pwrite(self._fd, block.tobytes(), start * self._row_bytes)
            self._rows = start + len(block)
        return range(start, start + len(block))

    def rewrite(self, rows: Sequence[int], dense: np.ndarray,
                fused: np.ndarray | None = None) -> None:
        """Write these existing rows anew (a point written again keeps its row)."""
        block = self._block(dense, fused)
        with self._lock:
            for row, values in zip(rows, block, strict=True):
                if 0 <= row < self._rows:
                    os.pwrite(self._fd, values.tobytes(), row * self._row_bytes)

    def write_half(self, rows: Sequence[int], vectors: np.ndarray, *, fused: bool) -> None:
        """Rewrite these rows' fused halves (a refined window), or their dense ones."""
        if fused and self.halves == 1:
            return
        at = self.dim * 4 if fused else 0
        with self._lock:
            for row, vector in zip(rows, vectors, strict=True):
                if 0 <= row < self._rows:
                    os.pwrite(self._fd, np.asarray(vector, dtype=np.float32).tobytes(),
                              row * self._row_bytes + at)

    def keep_only(self, live: set[int]) -> int:
        """Zero every row no live point names (rows a crash left between the row and its
        point; a vacuum's step). Returns how many were zeroed."""
        dead = [r for r in range(self._rows) if r not in live]
        self.erase(dead)
        return len(dead)

    def erase(self, rows: Sequence[int]) -> None:
        """Zero these rows (their points were deleted)."""
        zeros = bytes(self._row_bytes)
        with self._lock:
            for row in rows:
                if 0 <= row < self._rows:
                    os.pwrite(self._fd, zeros, row * self._row_bytes)

    def read(self, rows: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """The dense and fused vectors of these rows (copies, `len(rows)` x dim each; with
        one half, the dense ones twice)."""
        if not rows:
            empty = np.zeros((0, self.dim), dtype=np.float32)
            return empty, empty
        table = self._table(max(rows) + 1)
        block = table[np.asarray(rows, dtype=np.intp)]
        if self.halves == 1:
            return block, block
        return block[:, : self.dim], block[:, self.dim:]

    def _table(self, needed: int) -> np.ndarray:
        """The file as a (rows, halves x dim) array, mapped again when it has grown past the
        map (appends since)."""
        table = self._map
        if table is None or self._mapped < needed:
            with self._lock:
                if self._map is None or self._mapped < needed:
                    if needed > self._rows:
                        raise IndexError(f"row {needed - 1} of {self._rows}")
                    # A plain array over the map (`np.memmap`'s indexing costs ~5 us more).
                    mapped = mmap.mmap(self._fd, self._rows * self._row_bytes,
                                       access=mmap.ACCESS_READ)
                    self._map = np.frombuffer(mapped, dtype=np.float32).reshape(
                        self._rows, self.halves * self.dim)
                    self._mapped = self._rows
                table = self._map
        assert table is not None
        return table

    def has(self, row: object) -> bool:
        return isinstance(row, int) and 0 <= row < self._rows

    def close(self) -> None:
        with self._lock:
            self._map = None
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
