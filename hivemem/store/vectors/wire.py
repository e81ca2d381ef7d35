"""The vector-store primitives as JSON: what an embedded folder's owner and its guests send.

A guest process (the CLI beside `hivemem serve`) cannot open the folder's Qdrant Edge shard
(one process per shard), so its `ProxyVectorStore` sends each primitive call to the owner's
API, which runs it on its own store. Vectors travel as base64 of little-endian float32.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from hivemem.domain.scope import Scope
from hivemem.providers.lexical import SparseVector
from hivemem.store.vectors.base import SCOPE, Between, Hit, Point, Vector, Where

# How a `Between` condition travels (a key no payload field has).
BETWEEN = "$between"

# The operations a guest may ask for (`VectorStore`'s backend primitives, except close).
# (`search_window` is not among them: a guest's recall asks for `search_fused`.)
OPERATIONS = ("info", "upsert", "search", "search_fused", "search_sparse", "retrieve",
              "scroll", "count", "delete", "vacuum")


def encode_vector(vector: Vector | None) -> str | None:
    if vector is None:
        return None
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


def decode_vector(text: str | None) -> Vector | None:
    if text is None:
        return None
    return np.frombuffer(base64.b64decode(text), dtype="<f4").astype(np.float32)


def encode_sparse(sparse: SparseVector | None) -> dict[str, list[Any]] | None:
    if sparse is None:
        return None
    return {"indices": list(sparse.indices), "values": list(sparse.values)}


def decode_sparse(data: Mapping[str, Any] | None) -> SparseVector | None:
    if data is None:
        return None
    return SparseVector([int(i) for i in data["indices"]], [float(v) for v in data["values"]])


def encode_where(where: Where | None) -> dict[str, Any] | None:
    if where is None:
        return None
    out: dict[str, Any] = {}
    for field, value in where.items():
        if isinstance(value, Scope):
            out[field] = {"namespace": value.namespace, "agent_id": value.agent_id}
        elif isinstance(value, Between):
            out[field] = {BETWEEN: [value.gte, value.lte]}
        elif isinstance(value, (str, int, bool)):
            out[field] = value
        else:
            out[field] = list(value)
    return out


def decode_where(data: Mapping[str, Any] | None) -> Where | None:
    if data is None:
        return None
    where: dict[str, Any] = dict(data)
    if SCOPE in where:
        scope = where[SCOPE]
        where[SCOPE] = Scope(namespace=scope["namespace"], agent_id=scope.get("agent_id"))
    for field, value in where.items():
        if isinstance(value, Mapping) and BETWEEN in value:
            first, last = value[BETWEEN]
            where[field] = Between(float(first), None if last is None else float(last))
    return where


def encode_points(points: Sequence[Point]) -> list[dict[str, Any]]:
    return [{"id": p.id, "vector": encode_vector(p.vector), "payload": p.payload,
             "sparse": encode_sparse(p.sparse), "window": encode_vector(p.window)}
            for p in points]


def decode_points(data: Sequence[Mapping[str, Any]]) -> list[Point]:
    points = []
    for p in data:
        vector = decode_vector(p["vector"])
        if vector is None:
            raise ValueError(f"point {p.get('id')!r} has no vector")
        sparse = decode_sparse(p.get("sparse"))
        points.append(Point(str(p["id"]), vector, dict(p["payload"]), sparse,
                            decode_vector(p.get("window"))))
    return points


def encode_hits(hits: Sequence[Hit]) -> list[dict[str, Any]]:
    return [{"id": h.id, "score": h.score, "payload": h.payload,
             "vector": encode_vector(h.vector), "window": encode_vector(h.window)}
            for h in hits]


def decode_hits(data: Sequence[Mapping[str, Any]]) -> list[Hit]:
    return [Hit(str(h["id"]), float(h["score"]), dict(h["payload"]), decode_vector(h["vector"]),
                decode_vector(h.get("window"))) for h in data]
