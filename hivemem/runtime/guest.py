"""A process that uses an embedded folder another process owns (a guest).

The CLI beside `hivemem serve`, or a second app on the same folder: Redis through the
owner's socket, vectors through the owner API (`hivemem.runtime.owner_api`) with the local
key from the folder. The guest loads its own query model (recall embeds the query here).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hivemem.config import Settings
from hivemem.runtime.owner import KEY_HEADER, OwnerRecord, owner_of, read_key
from hivemem.store.vectors.base import VectorStore
from hivemem.store.vectors.proxy import ProxyVectorStore


@dataclass(frozen=True)
class Guest:
    """What a guest client is built from: settings on the owner's Redis, its vectors."""

    settings: Settings
    vectors: VectorStore
    owner: OwnerRecord


def guest_of(store: Path, settings: Settings) -> Guest | None:
    """A guest's parts when another process owns `store`; None when nobody does (then the
    caller opens the folder itself). Raises `FolderBusy` for an owner that never publishes."""
    record = owner_of(store)
    if record is None:
        return None
    redis = settings.redis.model_copy(
        update={"url": record.redis_url, "username": None, "password": None})
    vectors = ProxyVectorStore(
        record.api_url, read_key(store), KEY_HEADER,
        unreachable=f"{store} is owned by process {record.pid}, which serves no owner API"
        " (install hivemem[api] there, or stop it)",
    )
    return Guest(settings.model_copy(update={"redis": redis}), vectors, record)
