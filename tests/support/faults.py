"""Fault injection for tests: a vector store that goes down on cue, and counts its calls."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from hivemem.errors import StoreUnavailable
from hivemem.providers.lexical import SparseVector
from hivemem.store.vectors.base import Hit, Point, Vector, VectorStore, Where


class FlakyVectors(VectorStore):
    """Delegates to `inner`; between `down()` and `up()` (or for `down(seconds)`) every call
    raises `StoreUnavailable`, as a stopped Qdrant would. `refuse(pred)` makes upserts of
    matching points fail for good (a poison payload)."""

    def __init__(self, inner: VectorStore) -> None:
        self.inner = inner
        self.dim = inner.dim
        self._down_until = 0.0
        self._lock = threading.Lock()
        self.calls = 0
        self.failed_calls = 0
        self.failed_at: list[float] = []
        self.upserted_points = 0
        self.refuse_point: Callable[[Point], bool] | None = None

    def down(self, seconds: float = 1e9) -> None:
        self._down_until = time.monotonic() + seconds

    def up(self) -> None:
        self._down_until = 0.0

    @property
    def is_down(self) -> bool:
        return time.monotonic() < self._down_until

    def _gate(self) -> None:
        with self._lock:
            self.calls += 1
            if self.is_down:
                self.failed_calls += 1
                self.failed_at.append(time.monotonic())
                raise StoreUnavailable("qdrant", "injected outage")

    def upsert(self, collection: str, points: Sequence[Point]) -> None:
        self._gate()
        if self.refuse_point is not None and any(self.refuse_point(p) for p in points):
            raise ValueError("injected: this payload is refused")
        self.inner.upsert(collection, points)
        self.upserted_points += len(points)

    def search(self, collection: str, vector: Vector, limit: int, where: Where | None) -> list[Hit]:
        self._gate()
        return self.inner.search(collection, vector, limit, where)

    def search_sparse(
        self, collection: str, sparse: SparseVector, limit: int, where: Where | None
    ) -> list[Hit]:
        self._gate()
        return self.inner.search_sparse(collection, sparse, limit, where)

    def retrieve(self, collection: str, ids: Sequence[str]) -> list[Hit]:
        self._gate()
        return self.inner.retrieve(collection, ids)

    def scroll(
        self, collection: str, where: Where | None, *, with_vectors: bool = False
    ) -> Iterator[Hit]:
        self._gate()
        return self.inner.scroll(collection, where, with_vectors=with_vectors)

    def count(self, collection: str, where: Where | None) -> int:
        self._gate()
        return self.inner.count(collection, where)

    def delete(self, collection: str, where: Where) -> None:
        self._gate()
        self.inner.delete(collection, where)

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
