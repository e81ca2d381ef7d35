"""The owner's vector store as its worker processes reach it: each primitive waits first
while a recall runs in the owner (`hivemem.recall.foreground`).

Embedded mode's reflection runs in a process of its own (`hivemem.runtime.reflect_process`)
but only the owner may open the folder's Qdrant Edge shard, so that process's vector calls
are served by a thread of the owner. Gating them keeps the promise the in-process workers
keep: a recall does not wait behind the pipeline's work in its own interpreter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from hivemem.providers.lexical import SparseVector
from hivemem.store.vectors.base import Hit, Point, Vector, VectorStore, Where

# A listing waits again for a recall after this many points: reflection lists a long
# session's facts (thousands, with vectors) on every episode, which kept the owner's
# interpreter busy for the listing's whole length once it had begun.
SCROLL_PAGE = 256


class GatedVectorStore(VectorStore):
    """`inner`'s primitives, each after `pause()` (closing it is its owner's job)."""

    def __init__(self, inner: VectorStore, pause: Callable[[], None]) -> None:
        self.inner = inner
        self.pause = pause
        self.dim = inner.dim

    @property
    def has_windows(self) -> bool:
        return self.inner.has_windows

    def upsert(self, collection: str, points: Sequence[Point]) -> None:
        self.pause()
        self.inner.upsert(collection, points)

    def search(self, collection: str, vector: Vector, limit: int, where: Where | None
               ) -> list[Hit]:
        self.pause()
        return self.inner.search(collection, vector, limit, where)

    def search_fused(self, collection: str, vector: Vector, limit: int, where: Where | None
                     ) -> list[Hit]:
        self.pause()
        return self.inner.search_fused(collection, vector, limit, where)

    def search_sparse(self, collection: str, sparse: SparseVector, limit: int,
                      where: Where | None) -> list[Hit]:
        self.pause()
        return self.inner.search_sparse(collection, sparse, limit, where)

    def retrieve(self, collection: str, ids: Sequence[str]) -> list[Hit]:
        self.pause()
        return self.inner.retrieve(collection, ids)

    def scroll(self, collection: str, where: Where | None, *, with_vectors: bool = False
               ) -> Iterator[Hit]:
        self.pause()
        return self._paged(self.inner.scroll(collection, where, with_vectors=with_vectors))

    def _paged(self, hits: Iterator[Hit]) -> Iterator[Hit]:
        for i, hit in enumerate(hits, 1):
            yield hit
            if i % SCROLL_PAGE == 0:
                self.pause()

    def count(self, collection: str, where: Where | None) -> int:
        self.pause()
        return self.inner.count(collection, where)

    def delete(self, collection: str, where: Where) -> None:
        self.pause()
        self.inner.delete(collection, where)

    def vacuum(self) -> str:
        return self.inner.vacuum()

    def close(self) -> None:
        """The inner store is the runtime's: it stays open."""
