"""Embedded Qdrant (qdrant-edge-py): the Qdrant engine in-process, on a folder.

One process may open a shard at a time (the WAL is locked); threads in that process share it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

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


class EdgeVectorStore:
    def __init__(self, path: Path, dim: int) -> None:
        import qdrant_edge as qe

        self._qe = qe
        self.dim = dim
        self.path = Path(path)
        shard_path = self.path / TURNS
        self._lock = threading.RLock()
        self._closed = False
        try:
            if (shard_path / "wal").exists() or (shard_path / "segments").exists():
                self._shard = qe.EdgeShard.load(str(shard_path))
            else:
                shard_path.mkdir(parents=True, exist_ok=True)
                config = qe.EdgeConfig(
                    vectors={DENSE: qe.EdgeVectorParams(size=dim, distance=qe.Distance.Cosine)}
                )
                self._shard = qe.EdgeShard.create(str(shard_path), config)
                for name in KEYWORD_FIELDS:
                    self._shard.update(
                        qe.UpdateOperation.create_field_index(name, qe.PayloadSchemaType.Keyword)
                    )
                for name in INTEGER_FIELDS:
                    self._shard.update(
                        qe.UpdateOperation.create_field_index(name, qe.PayloadSchemaType.Integer)
                    )
        except Exception as exc:
            if "WAL" in str(exc) or "WouldBlock" in str(exc):
                raise StoreUnavailable(
                    "qdrant-edge",
                    f"{shard_path} is open in another process (one process per embedded store;"
                    " use a Qdrant server to share it)",
                ) from None
            raise StoreUnavailable("qdrant-edge", f"{shard_path}: {exc}") from None
        stored = self._stored_dim()
        if stored is not None and stored != dim:
            raise StoreUnavailable(
                "qdrant-edge", f"{shard_path} holds {stored}-d vectors, the embedder makes {dim}-d"
            )

    def _stored_dim(self) -> int | None:
        try:
            # EdgeShard.load without a config keeps the persisted one; probe a point instead.
            records, _ = self._shard.scroll(
                self._qe.ScrollRequest(limit=1, with_payload=False, with_vector=True)
            )
        except Exception:
            return None
        if not records:
            return None
        vec = as_vector(records[0].vector)
        return None if vec is None else int(vec.shape[0])

    def _session_filter(self, session_id: str | None) -> Any:
        qe = self._qe
        if session_id is None:
            return None
        return qe.Filter(
            must=[qe.FieldCondition(key="session_id", match=qe.MatchValue(session_id))]
        )

    def _call(self, action: str, fn: Any, *args: Any) -> Any:
        with self._lock:
            try:
                return fn(*args)
            except Exception as exc:
                raise StoreUnavailable("qdrant-edge", f"{action}: {exc}") from None

    def upsert_turns(self, turns: Sequence[Turn], vectors: Vector) -> None:
        qe = self._qe
        points = [
            qe.Point(
                id=turn_point_id(t.session_id, t.turn_id),
                vector={DENSE: vectors[i].tolist()},
                payload=turn_payload(t),
            )
            for i, t in enumerate(turns)
        ]
        if points:
            self._call("upsert", self._shard.update, qe.UpdateOperation.upsert_points(points))

    def search_turns(self, session_id: str, vector: Vector, limit: int) -> list[TurnHit]:
        qe = self._qe
        request = qe.QueryRequest(
            limit=limit,
            query=qe.Query.Nearest(vector.tolist(), using=DENSE),
            filter=self._session_filter(session_id),
            with_payload=True,
            with_vector=True,
        )
        points = self._call("search", self._shard.query, request)
        return [
            TurnHit(turn_from_payload(p.payload), float(p.score), as_vector(p.vector))
            for p in points
        ]

    def get_turns(self, session_id: str, turn_ids: Sequence[str]) -> list[TurnHit]:
        if not turn_ids:
            return []
        ids = [turn_point_id(session_id, t) for t in turn_ids]
        records = self._call("retrieve", self._shard.retrieve, ids, True, True)
        return [
            TurnHit(turn_from_payload(r.payload), 0.0, as_vector(r.vector)) for r in records
        ]

    def iter_turns(self, session_id: str | None = None) -> Iterator[Turn]:
        qe = self._qe
        offset: Any = None
        while True:
            request = qe.ScrollRequest(
                offset=offset,
                limit=512,
                filter=self._session_filter(session_id),
                with_payload=True,
                with_vector=False,
            )
            records, offset = self._call("scroll", self._shard.scroll, request)
            for record in records:
                yield turn_from_payload(record.payload)
            if offset is None:
                return

    def count_turns(self, session_id: str | None = None) -> int:
        qe = self._qe
        request = qe.CountRequest(filter=self._session_filter(session_id), exact=True)
        return int(self._call("count", self._shard.count, request))

    def flush(self) -> None:
        self._call("flush", self._shard.flush)

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._shard.flush()
                self._shard.close()
                self._closed = True
