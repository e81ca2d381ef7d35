"""Redis state of the boundary stage: per-session buffer, lease, pointer, closed episodes,
and the partition's episode outbox.

Ordering with any number of boundary workers: the embed stage may finish turns out of
order, so a turn that arrives before its predecessors waits in its session's buffer (a hash
keyed by seq). Whoever holds the session's lease (a random token with an expiry) advances
the session's pointer in seq order over the entries in hand and the buffer. Two scripts per
advance (three when entries must be buffered), every key in the session's slot:

- `begin`: take or renew the lease and return the session's state and the contiguous run
  of entries from the pointer on: the ones the caller handed in (named, not sent back: it
  has them, vectors included) and the ones others buffered. Entries handed in that are not
  in the run (a gap before them, another holder) are buffered, and only those travel to
  Redis in full; what the pointer has passed is ignored (a redelivery after a commit is a
  no-op).
- `commit`: only if the caller still holds the lease, write the new pointer, the open
  episode, marker counts and the closed episodes, append each closed episode to the
  partition's outbox (the dispatcher enqueues its reflect job), drop the consumed entries
  that came from the buffer, and then either keep the lease (more is ready: the caller goes
  on) or release it.

A lease that expired mid-advance makes the commit change nothing; the caller then offers
its entries again (they were never buffered: the next `begin` buffers them, or takes the
lease back), and whoever holds the lease replays from the last commit (episode ids are
deterministic, so a replay names the same episodes).
A worker that cannot get the lease just buffers: the holder's commit sees the new entry and
goes on, so no turn waits.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hivemem.domain.episode import Episode, OpenEpisode, SessionEpisodes
from hivemem.domain.scope import Scope
from hivemem.pipeline.messages import OutboxEntry
from hivemem.pipeline.topology import Keys
from hivemem.store.redis import Redis, as_text, redis_errors

# KEYS: state, buffer, lease. ARGV: token, lease ms, max run, then (field, seq, JSON)
# triples, JSON '' when the caller has not sent it (the light call, see `begin`).
# The entries handed in that the run takes now are never written to the buffer (the caller
# has them, and they are consumed in this advance); only the others are buffered, and a
# light call that would have to buffer one returns {2} having written nothing: the caller
# sends the JSON then. Returns {0} when another worker holds the lease or nothing is ready
# (the lease is then neither taken nor kept), else {1, next_seq, closed_count, open,
# field1, json1 or '', field2, ...} for the ready run ('' = the caller handed it in).
_BEGIN = """
local nxt = tonumber(redis.call('HGET', KEYS[1], 'next_seq') or '1')
local given = {}
for i = 4, #ARGV, 3 do
  if tonumber(ARGV[i + 1]) >= nxt then given[ARGV[i]] = i end
end
local holder = redis.call('GET', KEYS[3])
local mine = (not holder) or holder == ARGV[1]
local run = {}
local taken = {}
if mine then
  local limit = tonumber(ARGV[3])
  local seq = nxt
  while limit > 0 do
    local f = tostring(seq)
    if given[f] then
      run[#run + 1] = f
      run[#run + 1] = ''
      taken[f] = true
    else
      local v = redis.call('HGET', KEYS[2], f)
      if not v then break end
      run[#run + 1] = f
      run[#run + 1] = v
    end
    seq = seq + 1
    limit = limit - 1
  end
end
for f, i in pairs(given) do
  if not taken[f] then
    if ARGV[i + 2] == '' then return {2} end
  end
end
for f, i in pairs(given) do
  if not taken[f] then redis.call('HSET', KEYS[2], f, ARGV[i + 2]) end
end
if not mine then return {0} end
if #run == 0 then
  if holder then redis.call('DEL', KEYS[3]) end
  return {0}
end
redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[2])
local st = redis.call('HMGET', KEYS[1], 'closed_count', 'open')
local out = {1, nxt, st[1] or '0', st[2] or ''}
for j = 1, #run do out[#out + 1] = run[j] end
return out
"""

# KEYS: state, buffer, lease, episode list, outbox, then one key per closed episode.
# ARGV: token, lease ms, next_seq, closed_count, open, session id, the outbox's three field
# names, marker count m, m (name, n) pairs, count c and the c consumed fields that were read
# from the buffer (to drop them; the ones handed in were never written), then per episode
# (id, index, body). Returns -1 (lease lost, nothing written), 1 (more is ready, lease kept),
# 0 (done, lease released).
_COMMIT = """
if redis.call('GET', KEYS[3]) ~= ARGV[1] then return -1 end
redis.call('HSET', KEYS[1], 'next_seq', ARGV[3], 'closed_count', ARGV[4], 'open', ARGV[5])
local a = 10
local m = tonumber(ARGV[a])
for i = 1, m do
  redis.call('HINCRBY', KEYS[1], 'marker:' .. ARGV[a + 2 * i - 1], ARGV[a + 2 * i])
end
a = a + 2 * m + 1
local c = tonumber(ARGV[a])
if c > 0 then redis.call('HDEL', KEYS[2], unpack(ARGV, a + 1, a + c)) end
a = a + c + 1
for k = 6, #KEYS do
  redis.call('SET', KEYS[k], ARGV[a + 2])
  redis.call('RPUSH', KEYS[4], ARGV[a])
  redis.call('XADD', KEYS[5], '*', ARGV[7], ARGV[a], ARGV[8], ARGV[6], ARGV[9], ARGV[a + 1])
  a = a + 3
end
if redis.call('HEXISTS', KEYS[2], ARGV[3]) == 1 then
  redis.call('PEXPIRE', KEYS[3], ARGV[2])
  return 1
end
redis.call('DEL', KEYS[3])
return 0
"""

# Longest run one advance takes (a backlog is then committed in steps of this size).
_MAX_RUN = 500

# (turns assigned, episodes closed, the open episode, marker counts).
Progress = tuple[int, int, OpenEpisode | None, dict[str, int]]


@dataclass(frozen=True, slots=True)
class Advance:
    """A session's state and the run of entries ready for the pointer, under the lease."""

    token: str
    next_seq: int
    state: SessionEpisodes
    ready: list[tuple[str, str | None]]  # (field, JSON; None = the caller handed it in)



class EpisodeStore:
    def __init__(self, client: Redis, keys: Keys, lease_ms: int) -> None:
        self._r = client
        self.keys = keys
        self.lease_ms = lease_ms
        self._begin = client.register_script(_BEGIN)
        self._commit = client.register_script(_COMMIT)

    @property
    def client(self) -> Redis:
        """The Redis client (a reader that shares it may queue `queue_progress` on its own
        pipeline)."""
        return self._r

    def _session_keys(self, session_id: str) -> list[str]:
        k = self.keys
        return [k.boundary_state(session_id), k.boundary_buffer(session_id),
                k.boundary_lease(session_id)]

    def begin(
        self,
        session_id: str,
        items: Sequence[tuple[str, int]],
        payload: Callable[[str], str],
        token: str | None = None,
    ) -> Advance | None:
        """Offer `items` ((field, seq it belongs at or after)), take the session's lease (or
        renew `token`) and read what is ready. None: another worker holds it, or the entry
        the pointer waits for is not in yet.

        The first call sends no entry bodies: in the usual case (the entries arrive in
        order, this worker holds the lease) they are consumed at once and never touch the
        buffer. Only when some must wait in the buffer (a gap before them, another holder,
        a run longer than `_MAX_RUN`) does a second call send their JSON (`payload(field)`)."""
        token = token or secrets.token_hex(8)
        head: list[str | int] = [token, self.lease_ms, _MAX_RUN]
        light = list(head)
        for field, seq in items:
            light += (field, seq, "")
        with redis_errors("begin boundary advance"):
            reply = self._begin(keys=self._session_keys(session_id), args=light)
            if int(reply[0]) == 2:
                full = list(head)
                for field, seq in items:
                    full += (field, seq, payload(field))
                reply = self._begin(keys=self._session_keys(session_id), args=full)
        if int(reply[0]) == 0:
            return None
        open_raw = as_text(reply[3])
        state = SessionEpisodes(
            session_id=session_id,
            closed_count=int(reply[2]),
            open=OpenEpisode.model_validate_json(open_raw) if open_raw else None,
        )
        rest = reply[4:]
        ready = [
            (as_text(rest[i]), as_text(rest[i + 1]) or None) for i in range(0, len(rest), 2)
        ]
        return Advance(token=token, next_seq=int(reply[1]), state=state, ready=ready)

    def commit(
        self,
        session_id: str,
        token: str,
        *,
        next_seq: int,
        state: SessionEpisodes,
        from_buffer: Sequence[str],
        closed: Sequence[Episode],
        marker_counts: dict[str, int],
    ) -> int:
        """Apply one advance atomically, only if this worker still holds the lease; the
        closed episodes go to the partition's outbox in the same step, and the consumed
        entries read `from_buffer` leave it. Returns -1 (lease lost: nothing written; the
        entries handed in were not buffered, so the caller offers them again), 1 (more is
        ready: the lease is kept), 0 (lease released)."""
        k = self.keys
        p = k.partition(session_id)
        keys = [*self._session_keys(session_id), k.session_episodes(session_id),
                k.outbox_stream(p), *(k.episode(session_id, e.episode_id) for e in closed)]
        args: list[str | int] = [
            token, self.lease_ms, next_seq, state.closed_count,
            state.open.model_dump_json() if state.open else "", session_id,
            OutboxEntry.EPISODE_FIELD, OutboxEntry.SESSION_FIELD, OutboxEntry.INDEX_FIELD,
            len(marker_counts),
        ]
        for marker, count in marker_counts.items():
            args += (marker, count)
        args += (len(from_buffer), *from_buffer)
        for episode in closed:
            args += (episode.episode_id, episode.index, episode.model_dump_json())
        with redis_errors("commit boundary state"):
            return int(self._commit(keys=keys, args=args))

    def release(self, session_id: str, token: str) -> None:
        """Give the lease up without a commit (an advance that failed half-way)."""
        with redis_errors("release session lease"):
            self._r.eval(
                "if redis.call('GET', KEYS[1]) == ARGV[1] then"
                " return redis.call('DEL', KEYS[1]) end return 0",
                1, self.keys.boundary_lease(session_id), token)

    # -- reads -----------------------------------------------------------------------------

    def progress(self, session_id: str) -> Progress:
        """(turns assigned, episodes closed, the open episode, marker counts)."""
        with redis_errors("read boundary state"):
            raw = self._r.hgetall(self.keys.boundary_state(session_id))
        return self.decode_progress(raw)

    def queue_progress(self, pipe: Any, session_id: str) -> None:
        """Queue, on `pipe`, the read of `progress` (one reply, for `decode_progress`)."""
        pipe.hgetall(self.keys.boundary_state(session_id))

    @staticmethod
    def decode_progress(raw: dict[Any, Any]) -> Progress:
        state = {as_text(a): as_text(b) for a, b in raw.items()}
        open_ep = OpenEpisode.model_validate_json(state["open"]) if state.get("open") else None
        markers = {
            name.split(":", 1)[1]: int(value)
            for name, value in state.items()
            if name.startswith("marker:")
        }
        return (
            int(state.get("next_seq", 1)) - 1,
            int(state.get("closed_count", 0)),
            open_ep,
            markers,
        )

    def episodes(
        self, session_id: str, start: int = 0, end: int = -1, *, scope: Scope | None = None
    ) -> list[Episode]:
        """The session's closed episodes; with a scope, only those it may see."""
        with redis_errors("list episodes"):
            ids = self._r.lrange(self.keys.session_episodes(session_id), start, end)
            if not ids:
                return []
            bodies = self._r.mget([self.keys.episode(session_id, as_text(i)) for i in ids])
        found = [Episode.model_validate_json(b) for b in bodies if b is not None]
        if scope is None:
            return found
        return [e for e in found if scope.admits(e.namespace, e.visibility, e.agent_id)]

    def episode(self, episode_id: str, session_id: str) -> Episode | None:
        with redis_errors("read episode"):
            body = self._r.get(self.keys.episode(session_id, episode_id))
        return None if body is None else Episode.model_validate_json(body)
