"""API keys in Redis: each maps to one namespace (and optionally one agent) and is stored as
a salted SHA-256 hash.

A namespace key is for a trusted orchestrator: it may act as any agent of its namespace. An
agent key (``agent_id`` set) acts as that agent only: private memory then separates agents
that do not trust each other.

A key reads ``hm_<key id>_<secret>``. Redis keeps the id, the namespace, a random salt and
``sha256(salt || secret)``, never the secret: whoever reads Redis cannot call the API. The
secret is shown once, when the key is created (`hivemem apikey create`).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping
from datetime import UTC, datetime

from pydantic import BaseModel

from hivemem.domain.ids import check_id
from hivemem.domain.scope import check_namespace
from hivemem.errors import ValidationError
from hivemem.pipeline.topology import Keys
from hivemem.store.redis import Redis, as_text, redis_errors

_FORMAT = re.compile(r"^hm_([0-9a-f]{12})_([A-Za-z0-9_-]{20,128})$")


class ApiKeyInfo(BaseModel):
    """What is known about a key (everything but its secret)."""

    key_id: str
    namespace: str
    agent_id: str | None = None  # set: the key acts as this agent only
    name: str = ""
    created_at: datetime

    @property
    def kind(self) -> str:
        return "namespace" if self.agent_id is None else "agent"


def presented_key(headers: Mapping[str, str]) -> str | None:
    """The key a request presents (lower-case header names), or None."""
    auth = headers.get("authorization", "")
    scheme, _, credentials = auth.partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        return credentials.strip()
    return headers.get("x-api-key") or None


def _digest(salt: bytes, secret: str) -> str:
    return hashlib.sha256(salt + secret.encode("utf-8")).hexdigest()



class ApiKeyStore:
    def __init__(self, client: Redis, keys: Keys) -> None:
        self._r = client
        self.keys = keys

    def create(
        self, namespace: str, name: str = "", *, agent_id: str | None = None
    ) -> tuple[str, ApiKeyInfo]:
        """A new key for `namespace` (with `agent_id`: bound to that agent): returns the key
        (shown once) and its record."""
        namespace = check_namespace(namespace)
        if agent_id is not None:
            agent_id = check_id("agent_id", agent_id)
        if len(name) > 200:
            raise ValidationError("name", "at most 200 characters")
        key_id = secrets.token_hex(6)
        secret = secrets.token_urlsafe(32)
        salt = secrets.token_bytes(16)
        info = ApiKeyInfo(key_id=key_id, namespace=namespace, agent_id=agent_id, name=name,
                          created_at=datetime.now(UTC))
        record: dict[str, str] = {
            "namespace": namespace, "name": name, "salt": salt.hex(),
            "hash": _digest(salt, secret), "created_at": info.created_at.isoformat(),
        }
        if agent_id is not None:
            record["agent_id"] = agent_id
        with redis_errors("create api key"):
            pipe = self._r.pipeline(transaction=True)
            pipe.hset(self.keys.api_key(key_id), mapping=record)  # type: ignore[arg-type]
            pipe.sadd(self.keys.api_keys, key_id)
            pipe.execute()
        return f"hm_{key_id}_{secret}", info

    def revoke(self, key_id: str) -> bool:
        """Remove a key (by its id, or the whole key); False when there was none."""
        match = _FORMAT.fullmatch(key_id)
        key_id = match.group(1) if match else key_id
        with redis_errors("revoke api key"):
            pipe = self._r.pipeline(transaction=True)
            pipe.delete(self.keys.api_key(key_id))
            pipe.srem(self.keys.api_keys, key_id)
            deleted, _ = pipe.execute()
        return bool(deleted)

    def list(self) -> list[ApiKeyInfo]:
        with redis_errors("list api keys"):
            ids = sorted(as_text(i) for i in self._r.smembers(self.keys.api_keys))
            pipe = self._r.pipeline(transaction=False)
            for key_id in ids:
                pipe.hgetall(self.keys.api_key(key_id))
            rows = pipe.execute()
        out: list[ApiKeyInfo] = []
        for key_id, row in zip(ids, rows, strict=True):
            record = {as_text(k): as_text(v) for k, v in row.items()}
            if record:
                out.append(_info(key_id, record))
        return sorted(out, key=lambda i: i.created_at)

    def authenticate(self, presented: str) -> ApiKeyInfo | None:
        """The key's record when `presented` is a valid, unrevoked key; else None."""
        match = _FORMAT.fullmatch(presented or "")
        if match is None:
            return None
        key_id, secret = match.groups()
        with redis_errors("read api key"):
            row = self._r.hgetall(self.keys.api_key(key_id))
        record = {as_text(k): as_text(v) for k, v in row.items()}
        if not record:
            return None
        expected = record.get("hash", "")
        actual = _digest(bytes.fromhex(record.get("salt", "")), secret)
        if not hmac.compare_digest(expected, actual):
            return None
        return _info(key_id, record)


def _info(key_id: str, record: dict[str, str]) -> ApiKeyInfo:
    return ApiKeyInfo(
        key_id=key_id, namespace=record["namespace"], agent_id=record.get("agent_id") or None,
        name=record.get("name", ""),
        created_at=datetime.fromisoformat(record["created_at"]),
    )
