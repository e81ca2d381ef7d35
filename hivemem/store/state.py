"""Per-session state in Redis: sequence numbers, idempotency, the recent window, progress.

All of it can be rebuilt from Qdrant (`restore_session`), which is the system of record.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from hivemem.domain.models import SessionStats, Turn, TurnFields
from hivemem.domain.scope import DEFAULT_NAMESPACE, Scope
from hivemem.errors import OutOfScope
from hivemem.pipeline.messages import EpisodeControl, TurnEntry, turn_from_wire, wire_json
from hivemem.pipeline.topology import Keys, Topology
from hivemem.store.redis import Redis, redis_errors

# One atomic step per turn: a session belongs to the namespace of its first turn (a turn of
# another namespace gets -1, nothing written; sessions from before namespaces are
# "default"); a repeated turn id returns the seq it already had; otherwise the next seq is
# taken, the turn is appended to the stream and to the recent window. The entry's field names
# come from `TurnEntry` (ARGV[7], ARGV[8]).
_APPEND_TURN = """
local owner = redis.call('GET', KEYS[7])
if not owner then
  if redis.call('EXISTS', KEYS[1]) == 1 then owner = 'default' end
  if not owner or owner == ARGV[6] then redis.call('SET', KEYS[7], ARGV[6]) end
end
if owner and owner ~= ARGV[6] then return {-1, 0} end
local existing = redis.call('HGET', KEYS[2], ARGV[1])
if existing then return {tonumber(existing), 1} end
local seq = redis.call('INCR', KEYS[1])
redis.call('HSET', KEYS[2], ARGV[1], seq)
redis.call('XADD', KEYS[4], '*', ARGV[7], seq, ARGV[8], ARGV[2])
local window = tonumber(ARGV[3])
if window > 0 then
  redis.call('ZADD', KEYS[3], seq, ARGV[2])
  redis.call('ZREMRANGEBYRANK', KEYS[3], 0, -(window + 1))
end
redis.call('HSETNX', KEYS[5], 'first_ts', ARGV[4])
redis.call('HSET', KEYS[5], 'last_ts', ARGV[4])
redis.call('SADD', KEYS[6], ARGV[5])
return {seq, 0}
"""


# An explicit episode close takes the session's next seq, so the boundary stage meets it in
# order with the turns. It skips the embed stage: its processed bit is set here. The entry
# is `EpisodeControl`: ARGV[1] names the seq field, ARGV[2..7] are its other three pairs.
_APPEND_CONTROL = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local seq = redis.call('INCR', KEYS[1])
redis.call('SETBIT', KEYS[2], seq, 1)
redis.call('HINCRBY', KEYS[3], 'controls', 1)
redis.call('XADD', KEYS[4], '*', ARGV[1], seq, ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6],
           ARGV[7])
return seq
"""


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


class SessionState:
    def __init__(self, client: Redis, keys: Keys, recent_window: int) -> None:
        self._r = client
        self.keys = keys
        self.topology = Topology(keys)
        self.recent_window = recent_window
        self._append = client.register_script(_APPEND_TURN)
        self._control = client.register_script(_APPEND_CONTROL)

    def _append_args(self, draft: TurnFields) -> tuple[list[str], list[str | int]]:
        k, sid = self.keys, draft.session_id
        keys = [
            k.session_seq(sid),
            k.session_turn_ids(sid),
            k.session_recent(sid),
            self.topology.embed.stream,
            k.session_meta(sid),
            k.sessions,
            k.session_namespace(sid),
        ]
        args: list[str | int] = [
            draft.turn_id,
            wire_json(draft),
            self.recent_window,
            draft.timestamp.isoformat(),
            sid,
            draft.namespace,
            TurnEntry.SEQ_FIELD,
            TurnEntry.TURN_FIELD,
        ]
        return keys, args

    def append_turn(self, draft: TurnFields) -> tuple[int, bool]:
        """Returns (seq, duplicate). `OutOfScope` if the session is another namespace's."""
        keys, args = self._append_args(draft)
        with redis_errors("append turn"):
            seq, dup = self._append(keys=keys, args=args)
        if int(seq) < 0:
            raise OutOfScope()
        return int(seq), bool(dup)

    def append_turns(self, drafts: Sequence[TurnFields]) -> list[tuple[int, bool]]:
        """Pipelined: one round trip for the batch, each turn still atomic on its own.

        Callers check the sessions' namespaces first (`check_scope`): a turn refused here
        (a session claimed by another namespace in between) raises `OutOfScope` after the
        others were written."""
        if not drafts:
            return []
        with redis_errors("append turns"):
            pipe = self._r.pipeline(transaction=False)
            for draft in drafts:
                keys, args = self._append_args(draft)
                self._append(keys=keys, args=args, client=pipe)
            replies = pipe.execute()
        if any(int(seq) < 0 for seq, _dup in replies):
            raise OutOfScope()
        return [(int(seq), bool(dup)) for seq, dup in replies]

    def append_control(self, session_id: str, action: str) -> int | None:
        """Enqueue an episode control after the session's turns so far; None: no session."""
        k = self.keys
        with redis_errors("append control"):
            seq = self._control(
                keys=[
                    k.session_seq(session_id),
                    k.session_processed(session_id),
                    k.session_meta(session_id),
                    self.topology.boundary.stream,
                ],
                args=[EpisodeControl.SEQ_FIELD,
                      *EpisodeControl.script_fields(session_id, action)],
            )
        return None if int(seq) < 0 else int(seq)

    def mark_processed(self, turns: Sequence[Turn]) -> None:
        """Record that these turns are durable in Qdrant. Idempotent (bits)."""
        if not turns:
            return
        with redis_errors("mark processed"):
            pipe = self._r.pipeline(transaction=False)
            for turn in turns:
                pipe.setbit(self.keys.session_processed(turn.session_id), turn.seq, 1)
            pipe.execute()

    def mark_dead(self, session_id: str, seq: int) -> None:
        with redis_errors("mark dead-lettered"):
            self._r.setbit(self.keys.session_dead(session_id), seq, 1)

    def last_seq(self, session_id: str) -> int:
        with redis_errors("read sequence"):
            raw = self._r.get(self.keys.session_seq(session_id))
        return 0 if raw is None else int(raw)

    def progress(self, session_id: str) -> tuple[int, int, int]:
        """(last seq, processed, dead-lettered) in one round trip."""
        k = self.keys
        with redis_errors("read progress"):
            pipe = self._r.pipeline(transaction=False)
            pipe.get(k.session_seq(session_id))
            pipe.bitcount(k.session_processed(session_id))
            pipe.bitcount(k.session_dead(session_id))
            seq, done, dead = pipe.execute()
        return (0 if seq is None else int(seq)), int(done), int(dead)

    def namespace_of(self, session_id: str) -> str | None:
        """The namespace that owns the session; None for a session with no turns yet."""
        k = self.keys
        with redis_errors("read session namespace"):
            pipe = self._r.pipeline(transaction=False)
            pipe.get(k.session_namespace(session_id))
            pipe.exists(k.session_seq(session_id))
            owner, exists = pipe.execute()
        if owner is not None:
            return _text(owner)
        return DEFAULT_NAMESPACE if exists else None

    def check_scope(self, session_id: str, namespace: str, *, must_exist: bool = False) -> None:
        """`OutOfScope` when the session is another namespace's (or, with `must_exist`,
        unknown): the two look the same to the caller."""
        owner = self.namespace_of(session_id)
        if (owner is None and must_exist) or (owner is not None and owner != namespace):
            raise OutOfScope()

    def recent_turns(
        self, session_id: str, limit: int, scope: Scope | None = None
    ) -> list[Turn]:
        """The newest `limit` turns, newest first, including ones not yet embedded; with a
        scope, only those it may see (another agent's private turns are left out)."""
        if limit <= 0:
            return []
        with redis_errors("read recent turns"):
            rows = cast(
                list[tuple[bytes, float]],
                self._r.zrevrange(
                    self.keys.session_recent(session_id), 0, limit - 1, withscores=True
                ),
            )
        turns = [turn_from_wire(member, int(score)) for member, score in rows]
        if scope is None:
            return turns
        return [t for t in turns if scope.admits(t.namespace, t.visibility, t.agent_id)]

    def stats(self, session_id: str) -> SessionStats:
        last, done, dead = self.progress(session_id)
        with redis_errors("read session meta"):
            meta = self._r.hgetall(self.keys.session_meta(session_id))
        decoded = {_text(k): _text(v) for k, v in meta.items()}
        first = decoded.get("first_ts")
        latest = decoded.get("last_ts")
        controls = int(decoded.get("controls", 0))
        return SessionStats(
            session_id=session_id,
            turns_enqueued=last - controls,
            turns_processed=done - controls,
            turns_dead_lettered=dead,
            last_seq=last,
            first_activity=datetime.fromisoformat(first) if first else None,
            last_activity=datetime.fromisoformat(latest) if latest else None,
        )

    def session_ids(self) -> list[str]:
        with redis_errors("list sessions"):
            return sorted(_text(s) for s in self._r.smembers(self.keys.sessions))

    def restore_session(self, session_id: str, turns: Sequence[Turn]) -> None:
        """Rebuild this session's state from its turns as stored in Qdrant."""
        if not turns:
            return
        k = self.keys
        ordered = sorted(turns, key=lambda t: t.seq)
        with redis_errors("restore session"):
            pipe = self._r.pipeline(transaction=True)
            top = ordered[-1].seq
            # Never move a live counter backwards.
            pipe.eval(
                "local c = tonumber(redis.call('GET', KEYS[1]) or '0')"
                " if c < tonumber(ARGV[1]) then redis.call('SET', KEYS[1], ARGV[1]) end"
                " return 0",
                1,
                k.session_seq(session_id),
                top,
            )
            pipe.hset(
                k.session_turn_ids(session_id), mapping={t.turn_id: t.seq for t in ordered}
            )
            for turn in ordered:
                pipe.setbit(k.session_processed(session_id), turn.seq, 1)
            if self.recent_window > 0:
                window = ordered[-self.recent_window :]
                # One member per seq: the stored version (with its detected markers) replaces
                # the one written at ingest, instead of sitting beside it.
                for turn in window:
                    pipe.zremrangebyscore(k.session_recent(session_id), turn.seq, turn.seq)
                pipe.zadd(
                    k.session_recent(session_id),
                    {wire_json(t): t.seq for t in window},
                )
                pipe.zremrangebyrank(k.session_recent(session_id), 0, -(self.recent_window + 1))
            pipe.hsetnx(k.session_meta(session_id), "first_ts", ordered[0].timestamp.isoformat())
            pipe.hset(k.session_meta(session_id), "last_ts", ordered[-1].timestamp.isoformat())
            pipe.sadd(k.sessions, session_id)
            pipe.setnx(k.session_namespace(session_id), ordered[0].namespace)
            pipe.execute()

