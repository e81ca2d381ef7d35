"""The vector-store interface, with two backends: a Qdrant server and embedded Qdrant Edge.

Qdrant is the system of record for turns: the payload holds the whole turn, so Redis state
can be rebuilt from it. Point ids derive from (session, turn id): a redelivery overwrites.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from hivemem.models import Turn

TURNS = "turns"
DENSE = "dense"
# Fields recall and rebuild filter or order on: each gets a payload index.
KEYWORD_FIELDS = ("session_id", "agent_id", "role", "markers")
INTEGER_FIELDS = ("seq",)

_POINT_NAMESPACE = uuid.UUID("7d1c6f4e-8f0b-4c52-9a61-3f0c2b9e8a11")

Vector = npt.NDArray[np.float32]


def turn_point_id(session_id: str, turn_id: str) -> str:
    return str(uuid.uuid5(_POINT_NAMESPACE, f"turn/{session_id}/{turn_id}"))


def turn_payload(turn: Turn) -> dict[str, Any]:
    return {
        "kind": "turn",
        "turn_id": turn.turn_id,
        "session_id": turn.session_id,
        "agent_id": turn.agent_id,
        "role": turn.role.value,
        "content": turn.content,
        "markers": list(turn.markers),
        "metadata": turn.metadata,
        "timestamp": turn.timestamp.isoformat(),
        "ts": turn.timestamp.timestamp(),
        "seq": turn.seq,
        "token_count": turn.token_count,
    }


def turn_from_payload(payload: dict[str, Any]) -> Turn:
    return Turn(
        turn_id=payload["turn_id"],
        session_id=payload["session_id"],
        agent_id=payload.get("agent_id"),
        role=payload["role"],
        content=payload["content"],
        markers=tuple(payload.get("markers") or ()),
        metadata=payload.get("metadata") or {},
        timestamp=datetime.fromisoformat(payload["timestamp"]),
        seq=int(payload["seq"]),
        token_count=int(payload.get("token_count", 0)),
    )


@dataclass(frozen=True, slots=True)
class TurnHit:
    turn: Turn
    score: float
    vector: Vector | None


class VectorStore(Protocol):
    """What the workers and recall need from Qdrant."""

    dim: int

    def upsert_turns(self, turns: Sequence[Turn], vectors: Vector) -> None: ...

    def search_turns(self, session_id: str, vector: Vector, limit: int) -> list[TurnHit]: ...

    def get_turns(self, session_id: str, turn_ids: Sequence[str]) -> list[TurnHit]: ...

    def iter_turns(self, session_id: str | None = None) -> Iterator[Turn]: ...

    def count_turns(self, session_id: str | None = None) -> int: ...

    def close(self) -> None: ...


def as_vector(values: Any) -> Vector | None:
    if values is None:
        return None
    if isinstance(values, dict):
        values = values.get(DENSE)
        if values is None:
            return None
    return np.asarray(values, dtype=np.float32)
