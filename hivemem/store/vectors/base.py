"""The vector-store interface, with two backends: a Qdrant server and embedded Qdrant Edge.

Qdrant is the system of record for turns: the payload holds the whole turn, so Redis state
can be rebuilt from it. Point ids derive from (session, turn id): a redelivery overwrites.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from hivemem.domain.fact import Fact
from hivemem.domain.models import Role, Turn
from hivemem.domain.scope import Scope
from hivemem.pipeline.messages import turn_fields
from hivemem.providers.lexical import SparseVector

TURNS = "turns"
FACTS = "facts"
COLLECTIONS = (TURNS, FACTS)
DENSE = "dense"
# BM25 term weights; the collection's IDF modifier supplies the IDF (see providers/lexical.py).
LEXICAL = "lexical"
# Fields recall and rebuild filter or order on: each gets a payload index.
KEYWORD_FIELDS = (
    "session_id", "agent_id", "role", "markers", "status", "subject", "kind",
    "namespace", "visibility",
)
INTEGER_FIELDS = ("seq",)

_POINT_NAMESPACE = uuid.UUID("7d1c6f4e-8f0b-4c52-9a61-3f0c2b9e8a11")

Vector = npt.NDArray[np.float32]


def turn_point_id(session_id: str, turn_id: str) -> str:
    return str(uuid.uuid5(_POINT_NAMESPACE, f"turn/{session_id}/{turn_id}"))


def turn_payload(turn: Turn) -> dict[str, Any]:
    return {"kind": "turn", **turn_fields(turn), "ts": turn.timestamp.timestamp(),
            "seq": turn.seq}


def turn_from_payload(payload: dict[str, Any]) -> Turn:
    # Payloads are written by `turn_payload` from validated turns: constructing without
    # validation again is ~10x cheaper, and recall reads up to a hundred per call.
    return Turn.model_construct(
        turn_id=payload["turn_id"],
        session_id=payload["session_id"],
        agent_id=payload.get("agent_id"),
        role=Role(payload["role"]),
        content=payload["content"],
        markers=tuple(payload.get("markers") or ()),
        metadata=payload.get("metadata") or {},
        timestamp=datetime.fromisoformat(payload["timestamp"]),
        seq=int(payload["seq"]),
        token_count=int(payload.get("token_count", 0)),
        namespace=payload.get("namespace") or "default",
        visibility=payload.get("visibility") or "shared",
        duplicate=False,
    )


class TurnHit:
    """A turn the store returned. The `Turn` is built from the payload only when asked for:
    recall reads a hundred hits a call and keeps about twenty."""

    __slots__ = ("_turn", "payload", "score", "vector")

    def __init__(self, payload: dict[str, Any], score: float, vector: Vector | None) -> None:
        self.payload = payload
        self.score = score
        self.vector = vector
        self._turn: Turn | None = None

    @property
    def turn(self) -> Turn:
        if self._turn is None:
            self._turn = turn_from_payload(self.payload)
        return self._turn

    @property
    def turn_id(self) -> str:
        return str(self.payload["turn_id"])

    @property
    def session_id(self) -> str:
        return str(self.payload["session_id"])

    @property
    def seq(self) -> int:
        return int(self.payload["seq"])

    @property
    def markers(self) -> tuple[str, ...]:
        return tuple(self.payload.get("markers") or ())

    @property
    def content(self) -> str:
        return str(self.payload["content"])

    @property
    def token_count(self) -> int:
        return int(self.payload.get("token_count", 0))


@dataclass(frozen=True, slots=True)
class Point:
    id: str
    vector: Vector
    payload: dict[str, Any]
    sparse: SparseVector | None = None


@dataclass(frozen=True, slots=True)
class Hit:
    id: str
    score: float
    payload: dict[str, Any]
    vector: Vector | None


# Payload conditions, all of which must hold: field -> value, or field -> list (any of);
# under SCOPE, a `Scope`: what that agent may see (backends turn it into a filter).
Where = Mapping[str, str | int | bool | Sequence[str] | Sequence[int] | Scope]
SCOPE = "$scope"


def scoped(scope: Scope | None) -> dict[str, Scope]:
    """The `Where` entry that limits a read to what `scope` may see (none: no limit)."""
    return {} if scope is None else {SCOPE: scope}


class VectorStore(ABC):
    """Qdrant as hivemem uses it: turns and facts, each in its own collection.

    Backends implement the collection primitives; the turn and fact operations are shared.
    """

    dim: int

    # -- backend primitives ----------------------------------------------------------------

    @abstractmethod
    def upsert(self, collection: str, points: Sequence[Point]) -> None: ...

    @abstractmethod
    def search(
        self, collection: str, vector: Vector, limit: int, where: Where | None
    ) -> list[Hit]: ...

    @abstractmethod
    def search_sparse(
        self, collection: str, sparse: SparseVector, limit: int, where: Where | None
    ) -> list[Hit]:
        """BM25 ranking (IDF over the collection); hits carry their dense vector."""

    @abstractmethod
    def retrieve(self, collection: str, ids: Sequence[str]) -> list[Hit]: ...

    @abstractmethod
    def scroll(
        self, collection: str, where: Where | None, *, with_vectors: bool = False
    ) -> Iterator[Hit]: ...

    @abstractmethod
    def count(self, collection: str, where: Where | None) -> int: ...

    @abstractmethod
    def delete(self, collection: str, where: Where) -> None:
        """Remove the points that match (only `import --mode replace` does this)."""

    @abstractmethod
    def close(self) -> None: ...

    # -- turns -----------------------------------------------------------------------------

    def upsert_turns(
        self,
        turns: Sequence[Turn],
        vectors: Vector,
        sparse: Sequence[SparseVector] | None = None,
    ) -> None:
        points = [
            Point(
                turn_point_id(t.session_id, t.turn_id),
                vectors[i],
                turn_payload(t),
                None if sparse is None else sparse[i],
            )
            for i, t in enumerate(turns)
        ]
        if points:
            self.upsert(TURNS, points)

    def search_turns(
        self, sessions: str | Sequence[str], vector: Vector, limit: int,
        scope: Scope | None = None,
    ) -> list[TurnHit]:
        hits = self.search(TURNS, vector, limit, {**_sessions(sessions), **scoped(scope)})
        return [TurnHit(h.payload, h.score, h.vector) for h in hits]

    def search_turns_lexical(
        self, sessions: str | Sequence[str], sparse: SparseVector, limit: int,
        scope: Scope | None = None,
    ) -> list[TurnHit]:
        if not sparse:
            return []
        hits = self.search_sparse(
            TURNS, sparse, limit, {**_sessions(sessions), **scoped(scope)}
        )
        return [TurnHit(h.payload, h.score, h.vector) for h in hits]

    def turns_by_seq(
        self, session_id: str, seqs: Sequence[int], scope: Scope | None = None
    ) -> list[TurnHit]:
        """The session's turns with these sequence numbers (those that are embedded)."""
        if not seqs:
            return []
        where: Where = {"session_id": session_id, "seq": sorted(set(seqs)), **scoped(scope)}
        return [
            TurnHit(h.payload, 0.0, h.vector)
            for h in self.scroll(TURNS, where, with_vectors=True)
        ]

    def get_turns(
        self, session_id: str, turn_ids: Sequence[str], scope: Scope | None = None
    ) -> list[TurnHit]:
        if not turn_ids:
            return []
        hits = self.retrieve(TURNS, [turn_point_id(session_id, t) for t in turn_ids])
        return [
            TurnHit(h.payload, 0.0, h.vector)
            for h in hits if scope is None or scope.allows(h.payload)
        ]

    def iter_turns(
        self, session_id: str | None = None, scope: Scope | None = None
    ) -> Iterator[Turn]:
        where: dict[str, Any] = {**scoped(scope)}
        if session_id is not None:
            where["session_id"] = session_id
        for hit in self.scroll(TURNS, where or None):
            yield turn_from_payload(hit.payload)

    def count_turns(self, session_id: str | None = None) -> int:
        return self.count(TURNS, None if session_id is None else {"session_id": session_id})

    # -- facts -----------------------------------------------------------------------------

    def upsert_facts(
        self,
        facts: Sequence[Fact],
        vectors: Vector,
        sparse: Sequence[SparseVector] | None = None,
    ) -> None:
        points = [
            Point(
                f.fact_id,
                vectors[i],
                f.model_dump(mode="json"),
                None if sparse is None else sparse[i],
            )
            for i, f in enumerate(facts)
        ]
        if points:
            self.upsert(FACTS, points)

    def search_facts(
        self,
        sessions: str | Sequence[str],
        vector: Vector,
        limit: int,
        statuses: Sequence[str],
        scope: Scope | None = None,
    ) -> list[FactHit]:
        where: dict[str, Any] = {
            **_sessions(sessions), "status": list(statuses), **scoped(scope)
        }
        hits = self.search(FACTS, vector, limit, where)
        return [FactHit(Fact.model_validate(h.payload), h.score, h.vector) for h in hits]

    def search_facts_lexical(
        self,
        sessions: str | Sequence[str],
        sparse: SparseVector,
        limit: int,
        statuses: Sequence[str],
        scope: Scope | None = None,
    ) -> list[FactHit]:
        if not sparse:
            return []
        where: dict[str, Any] = {
            **_sessions(sessions), "status": list(statuses), **scoped(scope)
        }
        hits = self.search_sparse(FACTS, sparse, limit, where)
        return [FactHit(Fact.model_validate(h.payload), h.score, h.vector) for h in hits]

    def get_facts(
        self, fact_ids: Sequence[str], scope: Scope | None = None
    ) -> list[FactHit]:
        # A fact id is a point id, a UUID: anything else names no fact (and would be refused
        # by the engine as a malformed request, not answered as missing).
        fact_ids = [f for f in fact_ids if _is_uuid(f)]
        if not fact_ids:
            return []
        hits = self.retrieve(FACTS, list(fact_ids))
        return [FactHit(Fact.model_validate(h.payload), 0.0, h.vector)
                for h in hits if scope is None or scope.allows(h.payload)]

    def list_facts(
        self, session_id: str, statuses: Sequence[str] | None = None,
        scope: Scope | None = None,
    ) -> list[Fact]:
        where: dict[str, Any] = {"session_id": session_id, **scoped(scope)}
        if statuses is not None:
            where["status"] = list(statuses)
        facts = [Fact.model_validate(h.payload) for h in self.scroll(FACTS, where)]
        return sorted(facts, key=lambda f: (f.created_at, f.fact_id))


@dataclass(frozen=True, slots=True)
class FactHit:
    fact: Fact
    score: float
    vector: Vector | None


def _sessions(sessions: str | Sequence[str]) -> dict[str, Any]:
    if isinstance(sessions, str):
        return {"session_id": sessions}
    return {"session_id": list(sessions)}


def as_vector(values: Any) -> Vector | None:
    if values is None:
        return None
    if isinstance(values, dict):
        values = values.get(DENSE)
        if values is None:
            return None
    return np.asarray(values, dtype=np.float32)


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except (ValueError, TypeError, AttributeError):
        return False
    return True
