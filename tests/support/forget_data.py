"""What the forget tests write: a session whose unique secret goes everywhere a turn goes
(embedded, reflected into a fact that is then superseded, dead-lettered once, traced), and a
bystander session that must come through a forget unchanged; and where to look for the
secret afterwards (every byte under a folder, every Redis key, every Qdrant payload)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import redis

from hivemem.providers.embedders import HashingEmbedder, Matrix
from hivemem.store.vectors.base import COLLECTIONS, VectorStore

POISON = "unembeddable"
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def new_secret() -> str:
    return "zq" + uuid.uuid4().hex[:14]


class PoisonEmbedder(HashingEmbedder):
    """Refuses any text with `POISON` in it, quoting it (so the error, kept with the dead
    letter and the delivery errors, carries the text too)."""

    def embed_documents(self, texts: Sequence[str]) -> Matrix:
        for text in texts:
            if POISON in text:
                raise ValueError(f"cannot embed {text!r}")
        return super().embed_documents(texts)


def write_secret_session(handle: Any, session: str, secret: str, *, agent: str | None = None
                         ) -> None:
    """Turns with the secret: a decision (a fact), its replacement (the fact superseded),
    a turn the embedder refuses (dead-lettered), an episode close (a reflection, traced)."""
    handle.ingest(session, "user", f"We decided to use PostgreSQL, the password is {secret}",
                  markers=["decision"], timestamp=T0, turn_id="t-pg")
    handle.ingest(session, "user", f"Remember the vault code {secret} for the deploy",
                  timestamp=T0 + timedelta(minutes=1), turn_id="t-vault")
    handle.ingest(session, "user", f"{POISON} payload {secret}",
                  timestamp=T0 + timedelta(minutes=2), turn_id="t-poison")
    handle.ingest(session, "user",
                  f"Change of plan: we switch the database to MySQL, not {secret}",
                  timestamp=T0 + timedelta(minutes=3), turn_id="t-mysql")
    handle.close_episode(session)


def write_bystander(handle: Any, session: str) -> None:
    handle.ingest(session, "user", "We decided to deploy with Kubernetes on Fridays",
                  markers=["decision"], timestamp=T0, turn_id="b-1")
    handle.ingest(session, "user", "The API must stay under 200 ms p95",
                  markers=["constraint"], timestamp=T0 + timedelta(minutes=1), turn_id="b-2")
    handle.close_episode(session)


def wait_for(check: Any, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def files_with(folder: Path, needle: str) -> list[str]:
    """Every file under `folder` whose bytes hold `needle`."""
    raw = needle.encode()
    found = []
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            try:
                if raw in path.read_bytes():
                    found.append(str(path.relative_to(folder)))
            except OSError:
                continue
    return found


def redis_keys_with(client: redis.Redis, needle: str) -> list[str]:
    """Every key whose name or value (read as data: strings, hashes, lists, sets, sorted
    sets, streams) holds `needle`."""
    raw = needle.encode()
    found = []
    for key in client.scan_iter(count=1000):
        kind = client.type(key)
        kind = kind.decode() if isinstance(kind, bytes) else kind
        parts: list[Any] = [key]
        if kind == "string":
            parts.append(client.get(key))
        elif kind == "hash":
            parts += [x for kv in client.hgetall(key).items() for x in kv]
        elif kind == "list":
            parts += client.lrange(key, 0, -1)
        elif kind == "set":
            parts += list(client.smembers(key))
        elif kind == "zset":
            parts += [m for m, _ in client.zrange(key, 0, -1, withscores=True)]
        elif kind == "stream":
            for _id, fields in client.xrange(key):
                parts += [x for kv in fields.items() for x in kv]
        if any(raw in (p if isinstance(p, bytes) else str(p).encode()) for p in parts
               if p is not None):
            found.append(key.decode() if isinstance(key, bytes) else str(key))
    return found


def payloads_with(vectors: VectorStore, needle: str) -> list[str]:
    found = []
    for collection in COLLECTIONS:
        for hit in vectors.scroll(collection, None):
            if needle in json.dumps(hit.payload, default=str):
                found.append(f"{collection}/{hit.id}")
    return found
