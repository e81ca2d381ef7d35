"""A `VectorStore` that runs every primitive on an embedded folder's owner, over its API.

Only the folder's owner may open its Qdrant Edge shard; another process on the machine (a
CLI command while `hivemem serve` runs) reads and writes vectors through this store. The
owner's address and local key are in the folder (`hivemem.runtime.owner`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import httpx

from hivemem.errors import StoreUnavailable
from hivemem.providers.lexical import SparseVector
from hivemem.store.vectors import wire
from hivemem.store.vectors.base import Hit, Point, Vector, VectorStore, Where

# The owner API's path of one primitive; the header carrying the owner's local key.
PATH = "/_owner/vectors/{op}"


class ProxyVectorStore(VectorStore):
    """`url`: the owner API (``unix:///path/owner.sock`` or ``http://host:port``); None
    when the owner serves none, and `unreachable` says why (every call raises it)."""

    def __init__(self, url: str | None, key: str | None, header: str, *,
                 unreachable: str = "", timeout: float = 60.0) -> None:
        self._url = url
        self._unreachable = unreachable
        self._dim: int | None = None
        self._has_windows: bool | None = None
        headers = {header: key or ""}
        if url is not None and url.startswith("unix://"):
            transport = httpx.HTTPTransport(uds=url.removeprefix("unix://"))
            self._http = httpx.Client(base_url="http://owner", headers=headers,
                                      timeout=timeout, transport=transport)
        else:
            self._http = httpx.Client(base_url=url or "http://owner", headers=headers,
                                      timeout=timeout)

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = int(self._call("info", {})["dim"])
        return self._dim

    @dim.setter
    def dim(self, value: int) -> None:
        self._dim = value

    @property
    def has_windows(self) -> bool:
        """Whether the owner's store holds window vectors (asked once)."""
        if self._has_windows is None:
            self._has_windows = bool(self._call("info", {}).get("has_windows", False))
        return self._has_windows

    def _call(self, op: str, body: dict[str, Any],
              timeout: httpx.Timeout | None = None) -> Any:
        if self._url is None:
            raise StoreUnavailable("vectors", self._unreachable)
        try:
            response = self._http.post(PATH.format(op=op), json=body,
                                       timeout=timeout or self._http.timeout)
        except httpx.HTTPError as exc:
            raise StoreUnavailable(
                "vectors", f"the folder's owner at {self._url}: {exc}") from None
        if response.status_code != 200:
            raise StoreUnavailable(
                "vectors", f"the folder's owner at {self._url} answered"
                f" {response.status_code}: {response.text[:200]}")
        return response.json()

    def upsert(self, collection: str, points: Sequence[Point]) -> None:
        self._call("upsert", {"collection": collection, "points": wire.encode_points(points)})

    def search(
        self, collection: str, vector: Vector, limit: int, where: Where | None
    ) -> list[Hit]:
        return self._nearest("search", collection, vector, limit, where)

    def search_fused(
        self, collection: str, vector: Vector, limit: int, where: Where | None
    ) -> list[Hit]:
        return self._nearest("search_fused", collection, vector, limit, where)

    def _nearest(
        self, op: str, collection: str, vector: Vector, limit: int, where: Where | None
    ) -> list[Hit]:
        return wire.decode_hits(self._call(op, {
            "collection": collection, "vector": wire.encode_vector(vector), "limit": limit,
            "where": wire.encode_where(where)}))

    def search_sparse(
        self, collection: str, sparse: SparseVector, limit: int, where: Where | None
    ) -> list[Hit]:
        return wire.decode_hits(self._call("search_sparse", {
            "collection": collection, "sparse": wire.encode_sparse(sparse), "limit": limit,
            "where": wire.encode_where(where)}))

    def retrieve(self, collection: str, ids: Sequence[str]) -> list[Hit]:
        return wire.decode_hits(self._call("retrieve", {"collection": collection,
                                                        "ids": list(ids)}))

    def scroll(
        self, collection: str, where: Where | None, *, with_vectors: bool = False
    ) -> Iterator[Hit]:
        yield from wire.decode_hits(self._call("scroll", {
            "collection": collection, "where": wire.encode_where(where),
            "with_vectors": with_vectors}))

    def count(self, collection: str, where: Where | None) -> int:
        return int(self._call("count", {"collection": collection,
                                        "where": wire.encode_where(where)}))

    def delete(self, collection: str, where: Where) -> None:
        self._call("delete", {"collection": collection, "where": wire.encode_where(where)})

    def vacuum(self) -> str:
        """The owner vacuums its store (`EdgeVectorStore.vacuum`)."""
        # Rebuilding a large store takes longer than any other call: no read timeout.
        return str(self._call("vacuum", {"collection": "turns"},
                              timeout=httpx.Timeout(60.0, read=None)))

    def close(self) -> None:
        self._http.close()
