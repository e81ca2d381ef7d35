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
goes on, so no turn waits. A holder that never commits (killed, or cut off by an outage
between its `begin` and its `commit`, whose retry then took a new token and only buffered)
leaves a buffer that no commit will drain: every session with buffered entries is in its
partition's waiting set, and the boundary workers sweep their partitions' sets
(`waiting`, `sweep_check`), advancing a session whose lease has lapsed. So a session's last
entries never wait for traffic that may not come.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hivemem.domain.episode import Episode, OpenEpisode, SessionEpisodes
from hivemem.domain.scope import Scope
from hivemem.pipeline.messages import OutboxEntry
from hivemem.pipeline.topology import FORGOTTEN_EMBEDDED, Keys, SessionName
from hivemem.store.redis import Redis, as_text, redis_errors
from hivemem.store.scripts import lua

# Longest run one advance takes (a backlog is then committed in steps of this size).
_MAX_RUN = 500
# Waiting sessions one sweep of a partition looks at (the longest waiting first).
_SWEEP_BATCH = 200

# (turns assigned, episodes closed, the open episode, marker counts).
Progress = tuple[int, int, OpenEpisode | None, dict[str, int]]


@dataclass(frozen=True, slots=True)
class Advance:
    """A session's state and the run of entries ready for the pointer, under the lease."""

    token: str
    next_seq: int
    state: SessionEpisodes
    ready: list[tuple[str, str | None]]  # (field, JSON; None = the caller handed it in)
    # The session's forget mark as the run was read ('': none): a write derived from the
    # run checks it is still the same (`SlotTableStore.write`).
    forgotten: str = ""



class EpisodeStore:
    def __init__(self, client: Redis, keys: Keys, lease_ms: int) -> None:
        self._r = client
        self.keys = keys
        self.lease_ms = lease_ms
        self._begin = client.register_script(lua("stream_id", "boundary_begin"))
        self._commit = client.register_script(lua("boundary_commit"))
        self._sweep = client.register_script(lua("boundary_sweep"))

    @property
    def client(self) -> Redis:
        """The Redis client (a reader that shares it may queue `queue_progress` on its own
        pipeline)."""
        return self._r

    def _session_keys(self, name: SessionName) -> list[str]:
        k = self.keys
        return [k.boundary_state(name), k.boundary_buffer(name),
                k.boundary_lease(name)]

    def _waiting(self, name: SessionName) -> str:
        return self.keys.boundary_waiting(self.keys.partition(name))

    def begin(
        self,
        name: SessionName,
        items: Sequence[tuple[str, int]],
        payload: Callable[[str], str],
        token: str | None = None,
        sources: Mapping[str, str] | None = None,
    ) -> Advance | None:
        """Offer `items` ((field, seq it belongs at or after)), take the session's lease (or
        renew `token`) and read what is ready. None: another worker holds it, or the entry
        the pointer waits for is not in yet.

        The first call sends no entry bodies: in the usual case (the entries arrive in
        order, this worker holds the lease) they are consumed at once and never touch the
        buffer. Only when some must wait in the buffer (a gap before them, another holder,
        a run longer than `_MAX_RUN`) does a second call send their JSON (`payload(field)`).

        `sources`: each item's embedded-stream entry id (by field); an item at or before
        the session's forget mark is dropped (read before a forget of the session began:
        nothing of it may be written back). Items without one are not checked."""
        token = token or secrets.token_hex(8)
        head: list[str | int] = [token, self.lease_ms, _MAX_RUN, name, FORGOTTEN_EMBEDDED]
        keys = [*self._session_keys(name), self._waiting(name),
                self.keys.session_forgotten(name)]
        ids = sources or {}
        light = list(head)
        for field, seq in items:
            light += (field, seq, ids.get(field, ""), "")
        with redis_errors("begin boundary advance"):
            reply = self._begin(keys=keys, args=light)
            if int(reply[0]) == 2:
                full = list(head)
                for field, seq in items:
                    full += (field, seq, ids.get(field, ""), payload(field))
                reply = self._begin(keys=keys, args=full)
        if int(reply[0]) == 0:
            return None
        open_raw = as_text(reply[3])
        state = SessionEpisodes(
            session_id=name,
            closed_count=int(reply[2]),
            open=OpenEpisode.model_validate_json(open_raw) if open_raw else None,
        )
        rest = reply[5:]
        ready = [
            (as_text(rest[i]), as_text(rest[i + 1]) or None) for i in range(0, len(rest), 2)
        ]
        return Advance(token=token, next_seq=int(reply[1]), state=state, ready=ready,
                       forgotten=as_text(reply[4]))

    def commit(
        self,
        name: SessionName,
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
        p = k.partition(name)
        keys = [*self._session_keys(name), k.session_episodes(name),
                k.outbox_stream(p), k.boundary_waiting(p),
                *(k.episode(name, e.episode_id) for e in closed)]
        args: list[str | int] = [
            token, self.lease_ms, next_seq, state.closed_count,
            state.open.model_dump_json() if state.open else "", name,
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

    def release(self, name: SessionName, token: str) -> None:
        """Give the lease up without a commit (an advance that failed half-way)."""
        with redis_errors("release session lease"):
            self._r.eval(lua("release_lease"), 1, self.keys.boundary_lease(name), token)

    # -- the sweep: buffers no lease will drain ---------------------------------------------

    def waiting(self, partition: int, count: int = _SWEEP_BATCH) -> list[SessionName]:
        """Sessions (internal names) of `partition` with buffered entries, longest waiting
        first."""
        with redis_errors("read waiting boundary sessions"):
            ids = self._r.zrange(self.keys.boundary_waiting(partition), 0, count - 1)
        return [SessionName(as_text(i)) for i in ids]

    def sweep_check(self, name: SessionName) -> bool:
        """Whether the session's buffer waits with no lease held and its next entry in
        (the caller then advances it); a session whose buffer is empty leaves the waiting
        set, entries the pointer has passed are dropped."""
        keys = [*self._session_keys(name), self._waiting(name)]
        with redis_errors("sweep boundary session"):
            return int(self._sweep(keys=keys, args=[name])) == 2

    def waiting_since(self, partition: int) -> tuple[int, int | None]:
        """(sessions with buffered entries, the oldest one's wait in ms) of `partition`."""
        key = self.keys.boundary_waiting(partition)
        with redis_errors("read waiting boundary sessions"):
            pipe = self._r.pipeline(transaction=False)
            pipe.zcard(key)
            pipe.zrange(key, 0, 0, withscores=True)
            count, oldest = pipe.execute()
            now = self._r.time()  # apart: a cluster's pipelines refuse TIME (no key)
        if not oldest:
            return int(count), None
        now_ms = int(now[0]) * 1000 + int(now[1]) // 1000
        return int(count), max(0, now_ms - int(oldest[0][1]))

    # -- reads -----------------------------------------------------------------------------

    def progress(self, name: SessionName) -> Progress:
        """(turns assigned, episodes closed, the open episode, marker counts)."""
        with redis_errors("read boundary state"):
            raw = self._r.hgetall(self.keys.boundary_state(name))
        return self.decode_progress(raw)

    def queue_progress(self, pipe: Any, name: SessionName) -> None:
        """Queue, on `pipe`, the read of `progress` (one reply, for `decode_progress`)."""
        pipe.hgetall(self.keys.boundary_state(name))

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
        self, name: SessionName, start: int = 0, end: int = -1, *, scope: Scope | None = None
    ) -> list[Episode]:
        """The session's closed episodes; with a scope, only those it may see."""
        with redis_errors("list episodes"):
            ids = self._r.lrange(self.keys.session_episodes(name), start, end)
            if not ids:
                return []
            bodies = self._r.mget([self.keys.episode(name, as_text(i)) for i in ids])
        found = [Episode.model_validate_json(b) for b in bodies if b is not None]
        if scope is None:
            return found
        return [e for e in found if scope.admits(e.namespace, e.visibility, e.agent_id)]

    def episode(self, episode_id: str, name: SessionName) -> Episode | None:
        with redis_errors("read episode"):
            body = self._r.get(self.keys.episode(name, episode_id))
        return None if body is None else Episode.model_validate_json(body)
