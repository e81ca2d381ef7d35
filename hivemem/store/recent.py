"""A session's recent window in Redis: its newest turns (wire JSON), including the ones not
yet embedded, for recall and chat.

Layout (`Keys.session_recent`): a list, oldest first, of (seq, wire JSON) pairs, two
elements per turn. The ingest script (`hivemem.store.state`) appends to it with one RPUSH
and trims it with LTRIM to the newest `window` turns once it holds `slack(window)` more
(a trim moves the rest of a list node, so it is done once per several calls, not on each);
readers never ask for more than `window`, so they see what an exact trim would leave. A
list append copies the turn once and hashes nothing (a sorted set of JSON members scored by
seq hashed every member into its dict and into a skiplist, and removed the trimmed ones
from both).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from hivemem.domain.models import Turn
from hivemem.pipeline.topology import Keys, SessionName
from hivemem.pipeline.wire import turn_timestamp, wire_json
from hivemem.store.redis import Redis, as_text, redis_errors
from hivemem.store.scripts import lua


def slack(window: int) -> int:
    """How many turns past `window` the list may hold before the ingest script trims it."""
    return max(1, window // 4)


def read(client: Redis, keys: Keys, name: SessionName, limit: int) -> list[tuple[bytes, int]]:
    """The newest `limit` (wire JSON, seq) of the window, newest first."""
    if limit <= 0:
        return []
    with redis_errors("read recent turns"):
        pipe = client.pipeline(transaction=False)
        queue_read(pipe, keys, name, limit)
        return decode_read(pipe.execute())


# Replies `queue_read` adds to a pipeline (`decode_read` takes them in order).
READ_REPLIES = 1


def queue_read(pipe: Any, keys: Keys, name: SessionName, limit: int) -> None:
    """Queue, on `pipe`, the reads of `read` (`limit` > 0): `READ_REPLIES` replies."""
    pipe.lrange(keys.session_recent(name), -2 * limit, -1)


def decode_read(replies: Sequence[Any]) -> list[tuple[bytes, int]]:
    """`queue_read`'s replies as `read` returns them."""
    flat = cast(list[bytes], replies[0])
    return [(flat[i + 1], int(flat[i])) for i in range(len(flat) - 2, -1, -2)]


def queue_write(pipe: Any, keys: Keys, name: SessionName, turns: Sequence[Turn],
                window: int) -> None:
    """Queue, on `pipe`, the merge of the newest `window` of `turns` into the session's
    window (each replacing what it holds for that seq): part of the caller's MULTI."""
    if window <= 0 or not turns:
        return
    newest = sorted(turns, key=lambda t: t.seq)[-window:]
    args: list[str | int] = [window]
    for turn in newest:
        args += (turn.seq, wire_json(turn))
    pipe.eval(lua("window_write"), 1, keys.session_recent(name), *args)


def queue_activity(pipe: Any, keys: Keys, name: SessionName) -> None:
    """Queue the two reads `activity` combines: the meta hash and the window's last entry."""
    pipe.hgetall(keys.session_meta(name))
    pipe.lrange(keys.session_recent(name), -1, -1)


def activity(meta: dict[Any, Any], tail: list[bytes]) -> dict[str, str]:
    """The session's activity hash (first_ts, last_ts, controls) with last_ts its newest
    turn's: the ingest script leaves last_ts in the hash to the window's last entry (the
    later of the two is taken: the hash is the newer one in a session whose window was
    turned off since)."""
    out = {as_text(k): as_text(v) for k, v in meta.items()}
    newest = turn_timestamp(tail[0]) if tail else None
    if newest is not None:
        stored = out.get("last_ts")
        if stored is None or datetime.fromisoformat(stored) < datetime.fromisoformat(newest):
            out["last_ts"] = newest
    return out
