"""What the Redis server can promise about a write reaching its disk.

Read by ingest's guard (`service/guard.py`), which decides what an acknowledged write
waits for (`store/acked.py` runs the wait).
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from hivemem.errors import StoreUnavailable
from hivemem.store.redis import Redis, as_text, redis_errors

__all__ = ["Persistence", "persistence"]


@dataclass(frozen=True, slots=True)
class Persistence:
    appendonly: bool
    appendfsync: str  # "always" | "everysec" | "no"
    version: tuple[int, int]  # the server's (major, minor)


def persistence(client: Redis) -> Persistence:
    """The server's AOF settings and version; `StoreUnavailable` when it will not say (a
    server or proxy without CONFIG)."""
    with redis_errors("probe durability"):
        try:
            fsync = client.config_get("appendfsync").get("appendfsync")
            aof = client.config_get("appendonly").get("appendonly")
            version = as_text(client.info("server").get("redis_version", "0"))
        except redis.ResponseError as exc:
            raise StoreUnavailable(
                "redis", f"durable ingest: cannot read the server's persistence settings"
                f" ({exc}); not supported by this store") from None
    major, minor = ([*version.split("."), "0", "0"])[:2]
    return Persistence(
        appendonly=as_text(aof) == "yes",
        appendfsync=as_text(fsync),
        version=(_number(major), _number(minor)),
    )


def _number(part: str) -> int:
    digits = "".join(ch for ch in part if ch.isdigit())
    return int(digits) if digits else 0
