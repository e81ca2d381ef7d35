"""A Qdrant server through qdrant-client (also `:memory:` for unit tests)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import structlog
from qdrant_client import QdrantClient
from qdrant_client import models as qm
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from hivemem.config import QdrantSettings
from hivemem.domain.scope import DEFAULT_NAMESPACE, Scope
from hivemem.errors import StoreUnavailable
from hivemem.providers.lexical import SparseVector
from hivemem.store.vectors.base import (
    COLLECTIONS,
    DENSE,
    INTEGER_FIELDS,
    KEYWORD_FIELDS,
    LEXICAL,
    SCOPE,
    Hit,
    Point,
    Vector,
    VectorStore,
    Where,
    as_vector,
)

log = structlog.get_logger(__name__)

_ERRORS = (ResponseHandlingException, UnexpectedResponse, ConnectionError, TimeoutError, OSError)


class ServerVectorStore(VectorStore):
    def __init__(self, settings: QdrantSettings, dim: int, *, location: str | None = None) -> None:
        self.dim = dim
        self.prefix = settings.collection_prefix
        target = location or settings.url
        # Local mode (`:memory:`, unit tests) filters in Python and ignores payload indexes.
        self._local = location is not None
        self._without_lexical: set[str] = set()
        try:
            if location is not None:
                self._client = QdrantClient(location=location)
            else:
                self._client = QdrantClient(
                    url=settings.url,
                    api_key=settings.api_key.get_secret_value() if settings.api_key else None,
                    https=settings.https,
                    timeout=int(settings.timeout),
                )
            for name in COLLECTIONS:
                self._ensure_collection(self.prefix + name)
        except _ERRORS as exc:
            raise StoreUnavailable("qdrant", f"{target}: {exc}") from None

    def _ensure_collection(self, collection: str) -> None:
        if self._client.collection_exists(collection):
            info = self._client.get_collection(collection)
            vectors = info.config.params.vectors
            size = vectors[DENSE].size if isinstance(vectors, dict) else None
            if size is not None and size != self.dim:
                raise StoreUnavailable(
                    "qdrant", f"{collection} holds {size}-d vectors, embedder makes {self.dim}"
                )
            sparse = info.config.params.sparse_vectors or {}
            if LEXICAL not in sparse:
                # Made before keyword search: recall there stays dense-only until the
                # collection is rebuilt (its points carry no BM25 vectors).
                self._without_lexical.add(collection)
                log.warning("store.no_lexical", collection=collection,
                            fix="re-create the collection and re-ingest to get keyword search")
            if not self._local:
                indexed = set(info.payload_schema or {})
                for name in KEYWORD_FIELDS:
                    if name not in indexed:  # fields added since (namespace, visibility)
                        self._client.create_payload_index(
                            collection, name, qm.PayloadSchemaType.KEYWORD, wait=True
                        )
            return
        self._client.create_collection(
            collection,
            vectors_config={DENSE: qm.VectorParams(size=self.dim, distance=qm.Distance.COSINE)},
            sparse_vectors_config={LEXICAL: qm.SparseVectorParams(modifier=qm.Modifier.IDF)},
        )
        if self._local:
            return
        for name in KEYWORD_FIELDS:
            self._client.create_payload_index(
                collection, name, qm.PayloadSchemaType.KEYWORD, wait=True
            )
        for name in INTEGER_FIELDS:
            self._client.create_payload_index(
                collection, name, qm.PayloadSchemaType.INTEGER, wait=True
            )

    @staticmethod
    def _filter(where: Where | None) -> qm.Filter | None:
        if not where:
            return None
        must: list[qm.Condition] = []
        must_not: list[qm.Condition] = []
        for field, value in where.items():
            if isinstance(value, Scope):
                if field != SCOPE:
                    raise ValueError(f"a Scope goes under {SCOPE!r}, not {field!r}")
                must.append(_in_namespace(value.namespace))
                must_not.append(_others_private(value.agent_id))
            elif isinstance(value, str | int | bool):
                must.append(qm.FieldCondition(key=field, match=qm.MatchValue(value=value)))
            else:
                values: list[Any] = list(value)
                must.append(qm.FieldCondition(key=field, match=qm.MatchAny(any=values)))
        return qm.Filter(must=must, must_not=must_not or None)

    def _call(self, action: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except _ERRORS as exc:
            raise StoreUnavailable("qdrant", f"{action}: {exc}") from None

    def upsert(self, collection: str, points: Sequence[Point]) -> None:
        if not points:
            return
        lexical = self.prefix + collection not in self._without_lexical
        batch = [
            qm.PointStruct(id=p.id, vector=_vectors(p, lexical), payload=p.payload)
            for p in points
        ]
        # wait=True: the upsert is applied (and in the WAL) before the worker acks.
        self._call("upsert", self._client.upsert, self.prefix + collection, points=batch,
                   wait=True)

    def search(
        self, collection: str, vector: Vector, limit: int, where: Where | None
    ) -> list[Hit]:
        return self._query("search", collection, vector.tolist(), DENSE, limit, where)

    def search_sparse(
        self, collection: str, sparse: SparseVector, limit: int, where: Where | None
    ) -> list[Hit]:
        if self.prefix + collection in self._without_lexical:
            return []
        query = qm.SparseVector(indices=sparse.indices, values=sparse.values)
        return self._query("search_sparse", collection, query, LEXICAL, limit, where)

    def _query(
        self, action: str, collection: str, query: Any, using: str, limit: int,
        where: Where | None,
    ) -> list[Hit]:
        response = self._call(
            action,
            self._client.query_points,
            self.prefix + collection,
            query=query,
            using=using,
            query_filter=self._filter(where),
            limit=limit,
            with_payload=True,
            with_vectors=[DENSE],
        )
        return [
            Hit(str(p.id), float(p.score), p.payload or {}, as_vector(p.vector))
            for p in response.points
        ]

    def retrieve(self, collection: str, ids: Sequence[str]) -> list[Hit]:
        if not ids:
            return []
        records = self._call(
            "retrieve", self._client.retrieve, self.prefix + collection, ids=list(ids),
            with_payload=True, with_vectors=[DENSE],
        )
        return [Hit(str(r.id), 0.0, r.payload or {}, as_vector(r.vector)) for r in records]

    def scroll(
        self, collection: str, where: Where | None, *, with_vectors: bool = False
    ) -> Iterator[Hit]:
        offset: Any = None
        while True:
            records, offset = self._call(
                "scroll",
                self._client.scroll,
                self.prefix + collection,
                scroll_filter=self._filter(where),
                limit=512,
                offset=offset,
                with_payload=True,
                with_vectors=[DENSE] if with_vectors else False,
            )
            for record in records:
                vector = as_vector(record.vector) if with_vectors else None
                yield Hit(str(record.id), 0.0, record.payload or {}, vector)
            if offset is None:
                return

    def count(self, collection: str, where: Where | None) -> int:
        result = self._call(
            "count", self._client.count, self.prefix + collection,
            count_filter=self._filter(where), exact=True,
        )
        return int(result.count)

    def delete(self, collection: str, where: Where) -> None:
        self._call("delete", self._client.delete, self.prefix + collection,
                   points_selector=qm.FilterSelector(filter=self._filter(where) or qm.Filter()),
                   wait=True)

    def close(self) -> None:
        self._client.close()


def _in_namespace(namespace: str) -> qm.Condition:
    match = qm.FieldCondition(key="namespace", match=qm.MatchValue(value=namespace))
    if namespace != DEFAULT_NAMESPACE:
        return match
    # Points written before namespaces carry none: they are the default namespace's.
    return qm.Filter(should=[
        match, qm.IsEmptyCondition(is_empty=qm.PayloadField(key="namespace"))
    ])


def _others_private(agent_id: str | None) -> qm.Condition:
    """Private points of any other agent (excluded: `must_not`)."""
    private = qm.FieldCondition(key="visibility", match=qm.MatchValue(value="private"))
    if agent_id is None:
        return private
    return qm.Filter(
        must=[private],
        must_not=[qm.FieldCondition(key="agent_id", match=qm.MatchValue(value=agent_id))],
    )


def _vectors(point: Point, lexical: bool = True) -> dict[str, Any]:
    vectors: dict[str, Any] = {DENSE: point.vector.tolist()}
    if point.sparse and lexical:
        vectors[LEXICAL] = qm.SparseVector(
            indices=point.sparse.indices, values=point.sparse.values
        )
    return vectors
