"""What export and import read and write: the Redis and Qdrant stores of one installation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from hivemem.config import IngestSettings
from hivemem.pipeline.topology import Keys
from hivemem.pipeline.vectors import decode_vector, encode_vector
from hivemem.providers.embedders import Embedder
from hivemem.store.audit import AuditLog
from hivemem.store.episodes import EpisodeStore
from hivemem.store.redis import Redis
from hivemem.store.sessions import SessionStore
from hivemem.store.state import TurnLog
from hivemem.store.vectors.base import Vector, VectorStore

Progress = Callable[[int], None]  # called with how many more records are done


@dataclass
class Stores:
    """Built by `hivemem.runtime.wiring.Wiring.stores`."""

    redis: Redis
    keys: Keys
    vectors: VectorStore
    state: TurnLog
    episodes: EpisodeStore
    sessions: SessionStore
    audit: AuditLog
    recent_window: int = 50
    embedder: Embedder | None = None  # needed only to import a file without vectors
    # What ingest accepts: import checks every turn against the same limits.
    ingest: IngestSettings = field(default_factory=IngestSettings)


def settle(vector: Vector, rounds: int = 8) -> Vector:
    """The vector at its float32 unit-length fixed point. Qdrant normalises cosine vectors on
    every write, and normalising an already-unit float32 vector can move its last bits: a
    settled vector comes back out of a write as it went in, so export -> import -> export
    gives the same bytes."""
    v = np.asarray(vector, dtype=np.float32)
    for _ in range(rounds):
        norm = np.float32(np.linalg.norm(v))
        if norm == 0:
            return v
        nxt = (v / norm).astype(np.float32)
        if np.array_equal(nxt, v):
            return v
        v = nxt
    return v


def encode(vector: Vector) -> str:
    return encode_vector(settle(vector))


def decode(text: str) -> Vector:
    return decode_vector(text)
