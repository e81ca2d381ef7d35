"""A session's recent window in Redis: its newest turns (wire JSON), including the ones not
yet embedded, for recall and chat.

Layout (`Keys.session_window`): a list, oldest first, of (seq, wire JSON) pairs, two
elements per turn. The ingest script (`hivemem.store.state`) appends to it with one RPUSH
and trims it with LTRIM to the newest `window` turns once it holds `slack(window)` more
(a trim moves the rest of a list node, so it is done once per several calls, not on each);
readers never ask for more than `window`, so they see what an exact trim would leave. A
list append copies the turn once and hashes nothing, where the sorted set it replaces
(`Keys.session_recent`, members the turn's JSON, scored by seq) hashed every member into
its dict and into a skiplist, and removed the trimmed ones from both.

Sessions written before the list existed keep their sorted set until their next turn: the
ingest script then moves its members in front of the new ones and drops it (`MIGRATE_LUA`).
Until then the readers here fall back to it, and a rewrite (`write`) merges it in.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from hivemem.domain.models import Turn
from hivemem.pipeline.topology import Keys
from hivemem.pipeline.wire import turn_timestamp, wire_json
from hivemem.store.redis import Redis, as_text, redis_errors

# A Lua function for the ingest script: move the older sorted-set window (`old`) in front of
# the list (`win`), oldest first, then drop it. LPUSH puts each argument at the head in turn,
# so the newest old pair goes first and the oldest ends up at the head.
MIGRATE_LUA = """
local function migrate_window(win, old, length)
  local rows = redis.call('ZRANGE', old, 0, -1, 'WITHSCORES')
  if #rows == 0 then return length end
  local pushed = {}
  for i = #rows - 1, 1, -2 do
    pushed[#pushed + 1] = rows[i]
    pushed[#pushed + 1] = rows[i + 1]
  end
  for i = 1, #pushed, 512 do
    length = redis.call('LPUSH', win, unpack(pushed, i, math.min(i + 511, #pushed)))
  end
  redis.call('DEL', old)
  return length
end
"""

# Rewrite the window from stored turns (restore, import): one entry per seq, the given
# version replacing what the list or the older sorted set holds for that seq, the newest
# `window` kept. KEYS: the list, the older sorted set. ARGV: the window, then (seq, JSON)
# pairs.
_WRITE = """
local window = tonumber(ARGV[1])
local by_seq = {}
local rows = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
for i = 1, #rows, 2 do by_seq[tonumber(rows[i + 1])] = rows[i] end
local cur = redis.call('LRANGE', KEYS[1], 0, -1)
for i = 1, #cur, 2 do by_seq[tonumber(cur[i])] = cur[i + 1] end
for i = 2, #ARGV, 2 do by_seq[tonumber(ARGV[i])] = ARGV[i + 1] end
local seqs = {}
for seq in pairs(by_seq) do seqs[#seqs + 1] = seq end
table.sort(seqs)
local out = {}
for i = math.max(1, #seqs - window + 1), #seqs do
  out[#out + 1] = string.format('%d', seqs[i])
  out[#out + 1] = by_seq[seqs[i]]
end
redis.call('DEL', KEYS[1], KEYS[2])
for i = 1, #out, 512 do
  redis.call('RPUSH', KEYS[1], unpack(out, i, math.min(i + 511, #out)))
end
return #out / 2
"""


def slack(window: int) -> int:
    """How many turns past `window` the list may hold before the ingest script trims it."""
    return max(1, window // 4)


def read(client: Redis, keys: Keys, session_id: str, limit: int) -> list[tuple[bytes, int]]:
    """The newest `limit` (wire JSON, seq) of the window, newest first."""
    if limit <= 0:
        return []
    with redis_errors("read recent turns"):
        pipe = client.pipeline(transaction=False)
        queue_read(pipe, keys, session_id, limit)
        return decode_read(pipe.execute())


# Replies `queue_read` adds to a pipeline (`decode_read` takes them in order).
READ_REPLIES = 2


def queue_read(pipe: Any, keys: Keys, session_id: str, limit: int) -> None:
    """Queue, on `pipe`, the reads of `read` (`limit` > 0): `READ_REPLIES` replies."""
    pipe.lrange(keys.session_window(session_id), -2 * limit, -1)
    pipe.zrevrange(keys.session_recent(session_id), 0, limit - 1, withscores=True)


def decode_read(replies: Sequence[Any]) -> list[tuple[bytes, int]]:
    """`queue_read`'s replies as `read` returns them."""
    flat, older = cast(tuple[list[bytes], list[tuple[bytes, float]]], tuple(replies))
    if flat:
        return [(flat[i + 1], int(flat[i])) for i in range(len(flat) - 2, -1, -2)]
    return [(member, int(score)) for member, score in older]


def queue_write(pipe: Any, keys: Keys, session_id: str, turns: Sequence[Turn],
                window: int) -> None:
    """Queue, on `pipe`, the merge of the newest `window` of `turns` into the session's
    window (each replacing what it holds for that seq): part of the caller's MULTI."""
    if window <= 0 or not turns:
        return
    newest = sorted(turns, key=lambda t: t.seq)[-window:]
    args: list[str | int] = [window]
    for turn in newest:
        args += (turn.seq, wire_json(turn))
    pipe.eval(_WRITE, 2, keys.session_window(session_id), keys.session_recent(session_id),
              *args)


def queue_activity(pipe: Any, keys: Keys, session_id: str) -> None:
    """Queue the two reads `activity` combines: the meta hash and the window's last entry."""
    pipe.hgetall(keys.session_meta(session_id))
    pipe.lrange(keys.session_window(session_id), -1, -1)


def activity(meta: dict[Any, Any], tail: list[bytes]) -> dict[str, str]:
    """The session's activity hash (first_ts, last_ts, controls) with last_ts its newest
    turn's: the ingest script leaves last_ts in the hash to the window's last entry (the
    later of the two is taken: the hash is the newer one in a session whose window was
    turned off since, or that predates the list)."""
    out = {as_text(k): as_text(v) for k, v in meta.items()}
    newest = turn_timestamp(tail[0]) if tail else None
    if newest is not None:
        stored = out.get("last_ts")
        if stored is None or datetime.fromisoformat(stored) < datetime.fromisoformat(newest):
            out["last_ts"] = newest
    return out
