"""A Qdrant server through qdrant-client (also `:memory:` for unit tests)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from qdrant_client import QdrantClient
from qdrant_client import models as qm
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from hivemem.config import QdrantSettings
from hivemem.errors import StoreUnavailable
from hivemem.models import Turn
from hivemem.store.vectors import (
    DENSE,
    INTEGER_FIELDS,
    KEYWORD_FIELDS,
    TURNS,
    TurnHit,
    Vector,
    as_vector,
    turn_from_payload,
    turn_payload,
    turn_point_id,
)

_ERRORS = (ResponseHandlingException, UnexpectedResponse, ConnectionError, TimeoutError, OSError)


class ServerVectorStore:
    def __init__(self, settings: QdrantSettings, dim: int, *, location: str | None = None) -> None:
        self.dim = dim
        self.collection = f"{settings.collection_prefix}{TURNS}"
        target = location or settings.url
        # Local mode (`:memory:`, unit tests) filters in Python and ignores payload indexes.
        self._local = location is not None
        try:
            if location is not None:
                self._client = QdrantClient(location=location)
            else:
                self._client = QdrantClient(
                    url=settings.url,
                    api_key=settings.api_key.get_secret_value() if settings.api_key else None,
                    timeout=int(settings.timeout),
                )
            self._ensure_collection()
        except _ERRORS as exc:
            raise StoreUnavailable("qdrant", f"{target}: {exc}") from None

    def _ensure_collection(self) -> None:
        if self._client.collection_exists(self.collection):
            info = self._client.get_collection(self.collection)
            vectors = info.config.params.vectors
            size = vectors[DENSE].size if isinstance(vectors, dict) else None
            if size is not None and size != self.dim:
                raise StoreUnavailable(
                    "qdrant", f"{self.collection} holds {size}-d vectors, embedder makes {self.dim}"
                )
            return
        self._client.create_collection(
            self.collection,
            vectors_config={DENSE: qm.VectorParams(size=self.dim, distance=qm.Distance.COSINE)},
        )
        if self._local:
            return
        for name in KEYWORD_FIELDS:
            self._client.create_payload_index(
                self.collection, name, qm.PayloadSchemaType.KEYWORD, wait=True
            )
        for name in INTEGER_FIELDS:
            self._client.create_payload_index(
                self.collection, name, qm.PayloadSchemaType.INTEGER, wait=True
            )

    @staticmethod
    def _session_filter(session_id: str | None) -> qm.Filter | None:
        if session_id is None:
            return None
        return qm.Filter(
            must=[qm.FieldCondition(key="session_id", match=qm.MatchValue(value=session_id))]
        )

    def _call(self, action: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except _ERRORS as exc:
            raise StoreUnavailable("qdrant", f"{action}: {exc}") from None

    def upsert_turns(self, turns: Sequence[Turn], vectors: Vector) -> None:
        if not turns:
            return
        points = [
            qm.PointStruct(
                id=turn_point_id(t.session_id, t.turn_id),
                vector={DENSE: vectors[i].tolist()},
                payload=turn_payload(t),
            )
            for i, t in enumerate(turns)
        ]
        # wait=True: the upsert is applied (and in the WAL) before the worker acks.
        self._call("upsert", self._client.upsert, self.collection, points=points, wait=True)

    def search_turns(self, session_id: str, vector: Vector, limit: int) -> list[TurnHit]:
        response = self._call(
            "search",
            self._client.query_points,
            self.collection,
            query=vector.tolist(),
            using=DENSE,
            query_filter=self._session_filter(session_id),
            limit=limit,
            with_payload=True,
            with_vectors=True,
        )
        return [
            TurnHit(turn_from_payload(p.payload or {}), float(p.score), as_vector(p.vector))
            for p in response.points
        ]

    def get_turns(self, session_id: str, turn_ids: Sequence[str]) -> list[TurnHit]:
        if not turn_ids:
            return []
        records = self._call(
            "retrieve",
            self._client.retrieve,
            self.collection,
            ids=[turn_point_id(session_id, t) for t in turn_ids],
            with_payload=True,
            with_vectors=True,
        )
        return [
            TurnHit(turn_from_payload(r.payload or {}), 0.0, as_vector(r.vector)) for r in records
        ]

    def iter_turns(self, session_id: str | None = None) -> Iterator[Turn]:
        offset: Any = None
        while True:
            records, offset = self._call(
                "scroll",
                self._client.scroll,
                self.collection,
                scroll_filter=self._session_filter(session_id),
                limit=512,
                offset=offset,
                with_payload=True,
                with_vectors=False,
            )
            for record in records:
                yield turn_from_payload(record.payload or {})
            if offset is None:
                return

    def count_turns(self, session_id: str | None = None) -> int:
        result = self._call(
            "count",
            self._client.count,
            self.collection,
            count_filter=self._session_filter(session_id),
            exact=True,
        )
        return int(result.count)

    def close(self) -> None:
        self._client.close()
