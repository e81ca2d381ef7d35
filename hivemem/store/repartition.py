"""Changing a deployment's partition count: every session's keys move to the hash tag of
its new partition.

Every key of a session carries its partition's tag (`hivemem.pipeline.topology`), so a new
count P' renames them all. Keys move with DUMP + RESTORE + DEL (a RENAME cannot cross
slots on a Redis Cluster), session by session; the session sets follow. The streams hold
only processed entries once the pipeline is drained (checked first), so the old ones are
dropped and the workers create the new partitions' streams and groups when they start.

Crash-safe and resumable: a marker (`Keys.repartition_marker`) is written before the first
key moves and removed after the count is recorded; while it exists every process refuses
to start (`check_partitions`), and running the migration again finishes it. A session is
moved key by key, each RESTORE ... REPLACE before the DEL, so a rerun after a crash at any
point moves what is left and never loses a key.

Refused while workers run (a lease or a live member of a stage), while any stage holds
entries not yet handled, or while dead letters wait (replay or purge them first: their
delivery errors are keyed by entry ids that a move would change).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import redis

from hivemem.errors import ConfigurationError, StoreUnavailable
from hivemem.pipeline.topology import DISPATCH, STAGE_NAMES, WINDOW, Keys, SessionName, Topology
from hivemem.store import head
from hivemem.store.partitions import live_members
from hivemem.store.redis import Redis, as_text, set_union

Progress = Callable[[int, int], None]  # sessions just done, sessions in all

_PROBE = SessionName("probe-session")


@dataclass
class RepartitionSummary:
    old: int
    new: int
    sessions: int = 0
    sessions_moved: int = 0
    keys_moved: int = 0
    streams_dropped: int = 0
    resumed: bool = False
    per_partition: dict[int, int] = field(default_factory=dict)


def session_key_names(keys: Keys) -> list[Callable[[SessionName], str]]:
    """Every `Keys` method that names one of a session's own keys (found by what it
    returns, so a key added to `Keys` later moves too)."""
    base = keys.session_root(_PROBE) + ":"
    found: list[Callable[[SessionName], str]] = []
    for name, member in inspect.getmembers(type(keys), inspect.isfunction):
        if name.startswith("_"):
            continue
        params = list(inspect.signature(member).parameters)
        if params != ["self", "name"]:
            continue
        value = member(keys, _PROBE)
        if isinstance(value, str) and value.startswith(base):
            found.append(getattr(keys, name))
    return found



def _recorded(client: Redis, keys: Keys) -> int | None:
    raw = client.get(keys.partition_count)
    return int(raw) if raw is not None else None


def _marker(client: Redis, keys: Keys) -> dict[str, int] | None:
    raw = client.get(keys.repartition_marker)
    if raw is None:
        return None
    loaded = json.loads(as_text(raw))
    return {"old": int(loaded["old"]), "new": int(loaded["new"])}


def written_count(client: Redis, prefix: str, fallback: int) -> int:
    """The partition count the data is written with: an unfinished move's old count, else
    the recorded one, else `fallback` (nothing recorded yet: the settings' count)."""
    keys = Keys(prefix, 1)  # the count's and the marker's names carry no partition
    marker = _marker(client, keys)
    if marker is not None:
        return marker["old"]
    return _recorded(client, keys) or fallback


def _entry_id(value: bytes | str) -> tuple[int, int]:
    ms, _, seq = as_text(value).partition("-")
    return int(ms), int(seq or 0)


class Repartition:
    """Moves a deployment's keys from `old` to `new` (same prefix, other partition count)."""

    def __init__(self, client: Redis, old: Keys, new: Keys, *, ttl_ms: int = 30_000) -> None:
        """`ttl_ms`: the workers' `worker.claim_idle_ms`, after which a killed worker's
        heartbeat and leases count as gone."""
        if old.prefix != new.prefix:
            raise ConfigurationError("repartition keeps the key prefix")
        self.r = client
        self.old = old
        self.new = new
        self.ttl_ms = ttl_ms

    # -- what is there ---------------------------------------------------------------------

    def recorded(self) -> int | None:
        return _recorded(self.r, self.old)

    def marker(self) -> dict[str, int] | None:
        return _marker(self.r, self.old)

    def sessions(self, keys: Keys) -> set[SessionName]:
        """Every session's internal name (bare ``default`` ones and qualified ones alike:
        a name is what its keys are derived from)."""
        return {SessionName(n) for n in set_union(self.r, keys.all_sessions())}

    # -- preconditions ---------------------------------------------------------------------

    def refusal(self) -> str | None:
        """Why the move may not start now (None: it may)."""
        for name in (*STAGE_NAMES, DISPATCH, WINDOW):
            live = live_members(self.r, self.old, name, self.ttl_ms)
            if live:
                return (f"{live} {name} worker(s) are running: stop every worker (and "
                        "`hivemem serve`) first; a killed worker counts as gone after "
                        "worker.claim_idle_ms")
            for p in range(self.old.partitions):
                if self.r.exists(self.old.partition_lease(name, p)):
                    return (f"a {name} worker still holds partition {p}'s lease: stop "
                            "every worker first")
        for stage in Topology(self.old).all_stages:
            for stream in stage.streams():
                why = self._undrained(stream, stage.group)
                if why is not None:
                    return (f"{stream} {why}: let the workers drain the pipeline (`hivemem "
                            "status`), then stop them")
            for dead in stage.all_dead_letters():
                if self.r.xlen(dead):
                    return (f"{dead} holds dead letters: replay or purge them first "
                            "(`hivemem dlq`)")
        return None

    def _undrained(self, stream: str, group: str) -> str | None:
        """What of `stream` its stage has not handled yet (None: everything)."""
        if not self.r.exists(stream):
            return None
        info = self.r.xinfo_stream(stream)
        last = _entry_id(info["last-generated-id"])
        mine = [g for g in self.r.xinfo_groups(stream) if as_text(g["name"]) == group]
        if not mine:
            return "holds entries no worker has read" if int(info["length"]) else None
        if int(mine[0]["pending"]):
            return f"holds {int(mine[0]['pending'])} entries read but not acknowledged"
        if _entry_id(mine[0]["last-delivered-id"]) < last:
            return "holds entries not yet delivered"
        return None

    # -- the move --------------------------------------------------------------------------

    def run(self, progress: Progress | None = None) -> RepartitionSummary:
        try:
            return self._run(progress)
        except redis.RedisError as exc:
            raise StoreUnavailable("redis", f"repartition: {exc}") from None

    def _run(self, progress: Progress | None) -> RepartitionSummary:
        old, new = self.old, self.new
        summary = RepartitionSummary(old.partitions, new.partitions)
        marker = self.marker()
        if marker is not None:
            if marker != {"old": old.partitions, "new": new.partitions}:
                raise ConfigurationError(
                    f"redis.partitions: a repartition from {marker['old']} to {marker['new']}"
                    " is under way: finish it with those counts")
            summary.resumed = True
        else:
            recorded = self.recorded()
            if recorded is not None and recorded != old.partitions:
                raise ConfigurationError(
                    f"redis.partitions: the data is written with {recorded} partitions, not "
                    f"{old.partitions}")
            if old.partitions == new.partitions:
                return summary
            why = self.refusal()
            if why is not None:
                raise ConfigurationError(f"repartition refused: {why}")
            self.r.set(old.repartition_marker,
                       json.dumps({"old": old.partitions, "new": new.partitions}))
        sessions = sorted(self.sessions(old) | self.sessions(new))
        summary.sessions = len(sessions)
        names_old = session_key_names(old)
        names_new = session_key_names(new)
        for sid in sessions:
            moved = self._move_session(sid, names_old, names_new)
            summary.keys_moved += moved
            summary.sessions_moved += moved > 0
            q = new.partition(sid)
            summary.per_partition[q] = summary.per_partition.get(q, 0) + 1
            if progress is not None:
                progress(1, len(sessions))
        summary.streams_dropped = self._drop_old_streams()
        for stage in (*STAGE_NAMES, DISPATCH):
            self.r.delete(old.stage_members(stage))
        self.r.set(new.partition_count, new.partitions)
        self.r.delete(old.repartition_marker)
        return summary

    def _move(self, source: str, target: str) -> bool:
        if source == target:
            return False
        dumped = self.r.dump(source)
        if dumped is None:
            return False
        ttl = self.r.pttl(source)
        self.r.restore(target, max(int(ttl), 0), dumped, replace=True)
        self.r.delete(source)
        return True

    def _move_session(self, sid: SessionName,
                      names_old: Iterable[Callable[[SessionName], str]],
                      names_new: Iterable[Callable[[SessionName], str]]) -> int:
        old, new = self.old, self.new
        moved = 0
        # Episodes first: their ids are read from the session's list, which moves below.
        listed = self.r.lrange(old.session_episodes(sid), 0, -1) or self.r.lrange(
            new.session_episodes(sid), 0, -1)
        for raw in listed:
            eid = as_text(raw)
            moved += self._move(old.episode(sid, eid), new.episode(sid, eid))
        for name_old, name_new in zip(names_old, names_new, strict=True):
            moved += self._move(name_old(sid), name_new(sid))
        if old.session_set(sid) != new.session_set(sid):
            self.r.sadd(new.session_set(sid), sid)
            self.r.srem(old.session_set(sid), sid)
        # So does its entry in its namespace's index (its owner: in the ids hash, moved).
        owner = head.decode(self.r.hmget(new.session_turn_ids(sid), head.SEQ_FIELD,
                                         head.NS_FIELD))[1]
        if owner is not None and (old.namespace_session_set(sid)
                                  != new.namespace_session_set(sid)):
            bare = Keys.split_name(sid)[1]
            self.r.sadd(new.namespace_session_set(sid), bare)
            self.r.srem(old.namespace_session_set(sid), bare)
        # A buffer left waiting (the boundary sweep's index) moves with its session.
        waiting_old = old.boundary_waiting(old.partition(sid))
        waiting_new = new.boundary_waiting(new.partition(sid))
        since = self.r.zscore(waiting_old, sid)
        if since is not None and waiting_old != waiting_new:
            self.r.zadd(waiting_new, {sid: since})
            self.r.zrem(waiting_old, sid)
        return moved

    def _drop_old_streams(self) -> int:
        dropped = 0
        new_streams = {s for stage in Topology(self.new).all_stages for s in stage.streams()}
        for stage in Topology(self.old).all_stages:
            for p, stream in enumerate(stage.streams()):
                if stream in new_streams:
                    continue
                related = [stream, stage.dead_letters_for(p),
                           self.old.delivery_errors(stream, stage.group)]
                if stage.name == Topology(self.old).boundary.name:
                    # The window stage's group reads the same stream (its windows not yet
                    # refined stay means: refinement is optional).
                    related.append(self.old.delivery_errors(stream, WINDOW))
                dropped += int(self.r.delete(*related) > 0)
        for p in range(self.old.partitions):
            for stage_name in (*STAGE_NAMES, DISPATCH, WINDOW):
                self.r.delete(self.old.partition_lease(stage_name, p))
        return dropped
