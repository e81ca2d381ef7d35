"""Redis state of the boundary stage: per-session buffer, lease, pointer, closed episodes.

Ordering with any number of boundary workers: the embed stage finishes turns out of order,
so each turn first lands in its session's buffer (a hash keyed by seq). Whoever holds the
session's lease (SET NX PX with a random token) advances the session's pointer through the
buffer in seq order, and commits the new pointer, the open episode and the closed episodes in
one MULTI/EXEC that is WATCHed on the lease: if the lease expired and another worker took
over, the commit fails and changes nothing, and the new holder replays from the last commit
(episode ids are deterministic, so a replay names the same episodes). A worker that cannot get
the lease just buffers; the holder re-checks the buffer after releasing, so no turn waits.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from typing import Any

import redis

from hivemem.domain.episode import Episode, OpenEpisode, SessionEpisodes
from hivemem.domain.scope import Scope
from hivemem.pipeline.topology import Keys
from hivemem.store.redis import Redis, redis_errors

# Buffer only what the pointer has not passed yet (a redelivery after a commit is a no-op).
_BUFFER = """
local nxt = tonumber(redis.call('HGET', KEYS[1], 'next_seq') or '1')
local added = 0
for i = 1, #ARGV, 3 do
  local seq = tonumber(ARGV[i + 1])
  if seq >= nxt then
    redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 2])
    added = added + 1
  end
end
return added
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

Enqueue = Callable[[Any, Episode], None]


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


class EpisodeStore:
    def __init__(self, client: Redis, keys: Keys, lease_ms: int) -> None:
        self._r = client
        self.keys = keys
        self.lease_ms = lease_ms
        self._buffer = client.register_script(_BUFFER)
        self._release = client.register_script(_RELEASE)

    # -- buffer and lease ------------------------------------------------------------------

    def buffer(self, session_id: str, items: Sequence[tuple[str, int, str]]) -> int:
        """items: (field, seq it belongs at or after, JSON). Returns how many were kept."""
        if not items:
            return 0
        args: list[str | int] = []
        for field, seq, payload in items:
            args.extend((field, seq, payload))
        k = self.keys
        with redis_errors("buffer for boundary"):
            added = self._buffer(
                keys=[k.boundary_state(session_id), k.boundary_buffer(session_id)], args=args
            )
        return int(added)

    def acquire(self, session_id: str) -> str | None:
        token = secrets.token_hex(8)
        with redis_errors("acquire session lease"):
            ok = self._r.set(self.keys.boundary_lease(session_id), token, nx=True, px=self.lease_ms)
        return token if ok else None

    def release(self, session_id: str, token: str) -> None:
        with redis_errors("release session lease"):
            self._release(keys=[self.keys.boundary_lease(session_id)], args=[token])

    def has_ready(self, session_id: str) -> bool:
        """Is there buffered work the pointer can take right now?"""
        k = self.keys
        with redis_errors("check boundary buffer"):
            nxt = int(self._r.hget(k.boundary_state(session_id), "next_seq") or 1)
            return bool(self._r.hexists(k.boundary_buffer(session_id), str(nxt)))

    # -- state -----------------------------------------------------------------------------

    def load(self, session_id: str) -> tuple[int, SessionEpisodes, dict[str, str]]:
        """(next seq, the session's episode state, the buffer)."""
        k = self.keys
        with redis_errors("load boundary state"):
            pipe = self._r.pipeline(transaction=False)
            pipe.hgetall(k.boundary_state(session_id))
            pipe.hgetall(k.boundary_buffer(session_id))
            raw_state, raw_buffer = pipe.execute()
        state = {_text(a): _text(b) for a, b in raw_state.items()}
        buffer = {_text(a): _text(b) for a, b in raw_buffer.items()}
        episodes = SessionEpisodes(
            session_id=session_id,
            closed_count=int(state.get("closed_count", 0)),
            open=OpenEpisode.model_validate_json(state["open"]) if state.get("open") else None,
        )
        return int(state.get("next_seq", 1)), episodes, buffer

    def commit(
        self,
        session_id: str,
        token: str,
        *,
        next_seq: int,
        state: SessionEpisodes,
        consumed: Sequence[str],
        closed: Sequence[Episode],
        marker_counts: dict[str, int],
        enqueue: Enqueue | None = None,
    ) -> bool:
        """Apply one advance atomically, only if this worker still holds the lease."""
        k = self.keys
        lease = k.boundary_lease(session_id)
        with redis_errors("commit boundary state"), self._r.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(lease)  # type: ignore[no-untyped-call]
                if _text(pipe.get(lease) or b"") != token:
                    return False
                pipe.multi()
                mapping: dict[str, str | int] = {
                    "next_seq": next_seq,
                    "closed_count": state.closed_count,
                    "open": state.open.model_dump_json() if state.open else "",
                }
                pipe.hset(k.boundary_state(session_id), mapping=mapping)  # type: ignore[arg-type]
                for marker, count in marker_counts.items():
                    pipe.hincrby(k.boundary_state(session_id), f"marker:{marker}", count)
                if consumed:
                    pipe.hdel(k.boundary_buffer(session_id), *consumed)
                for episode in closed:
                    body = episode.model_dump_json()
                    pipe.set(k.episode(episode.episode_id), body)
                    pipe.rpush(k.session_episodes(session_id), episode.episode_id)
                    if enqueue is not None:
                        enqueue(pipe, episode)
                pipe.execute()
            except redis.WatchError:
                return False
        return True

    # -- reads -----------------------------------------------------------------------------

    def progress(self, session_id: str) -> tuple[int, int, OpenEpisode | None, dict[str, int]]:
        """(turns assigned, episodes closed, the open episode, marker counts)."""
        with redis_errors("read boundary state"):
            raw = self._r.hgetall(self.keys.boundary_state(session_id))
        state = {_text(a): _text(b) for a, b in raw.items()}
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
            bodies = self._r.mget([self.keys.episode(_text(i)) for i in ids])
        found = [Episode.model_validate_json(b) for b in bodies if b is not None]
        if scope is None:
            return found
        return [e for e in found if scope.admits(e.namespace, e.visibility, e.agent_id)]

    def episode(self, episode_id: str) -> Episode | None:
        with redis_errors("read episode"):
            body = self._r.get(self.keys.episode(episode_id))
        return None if body is None else Episode.model_validate_json(body)
