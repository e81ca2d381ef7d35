"""Do a write at most once, keyed by a marker: WATCH the marker, and in one MULTI set it and
queue the caller's commands; a second attempt finds the marker and writes nothing.

The outbox dispatcher enqueues each episode's rq job through it (rq's enqueue accepts the
pipeline, so the job lands in the same MULTI as the marker).
"""

from __future__ import annotations

from collections.abc import Callable

import redis
from redis.client import Pipeline

from hivemem.store.redis import Redis, redis_errors

__all__ = ["write_once"]


def write_once(client: Redis, marker: str, ttl_s: int, write: Callable[[Pipeline], None],
               *, what: str) -> bool:
    """True: written now; False: the marker was already set (written before)."""
    with redis_errors(what), client.pipeline(transaction=True) as pipe:
        while True:
            try:
                pipe.watch(marker)  # type: ignore[no-untyped-call]
                if pipe.exists(marker):
                    return False
                pipe.multi()
                pipe.set(marker, 1, ex=ttl_s)
                write(pipe)
                pipe.execute()
                return True
            except redis.WatchError:
                continue  # another writer raced us: look at the marker again
