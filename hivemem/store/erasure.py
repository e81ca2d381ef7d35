"""Forgetting in Redis: a session's (or some turns') copies in the stage streams and their
dead letters, the traces, the recent window and the turn-id index, the audit log's events;
forgets begun and not finished (`Keys.forget_pending`), the log of finished ones
(`Keys.erasures`), and the AOF rewrite that takes the deleted bytes off disk.

Which entries are a session's is decided by decoding them with their stage's codec; an
entry that no longer decodes (a dead letter of a malformed entry) is matched on its raw
field values, so nothing that names the session survives because it is malformed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection, Iterable
from typing import Any, Literal

import redis
import structlog

from hivemem.domain.audit import AuditEvent
from hivemem.domain.forget import ForgetReceipt, ForgetRequest
from hivemem.domain.models import Turn
from hivemem.errors import MalformedEntry
from hivemem.pipeline.messages import (
    AuditEntry,
    EmbeddedTurn,
    EmbeddedTurns,
    EpisodeControl,
    OutboxEntry,
    SkipEntry,
    TraceEntry,
    TurnEntry,
    decode_dead_letter,
)
from hivemem.pipeline.topology import (
    FORGOTTEN_EMBEDDED,
    FORGOTTEN_TURNS,
    Keys,
    SessionName,
    Stage,
    Topology,
    session_name,
)
from hivemem.pipeline.wire import turn_from_wire
from hivemem.store.redis import Redis, as_text, redis_errors
from hivemem.store.reflection import trace_session
from hivemem.store.scripts import lua
from hivemem.store.stream_entries import StreamEntry, decode_entries

log = structlog.get_logger(__name__)

_PAGE = 1000
# Which turns an erasure removes: a turn matches when this says so.
TurnMatch = Callable[[Turn], bool]
# The stages whose streams carry a session's turns: embed reads the turns stream; boundary
# and window (a second group, when window vectors are on) the embedded stream.
StreamStage = Literal["embed", "boundary", "window"]


class EntryMatch:
    """What to remove from the streams: the entries of the session named `name` (every one
    when `turns` is None; else only the turns `turns` matches, and no control or outbox
    entry). Turns name their session by (namespace, session id); controls, skips and the
    outbox by its internal name."""

    def __init__(self, name: SessionName, turns: TurnMatch | None = None) -> None:
        self.name = name
        self.turns = turns

    def turn(self, turn: Turn) -> bool:
        if session_name(turn.namespace, turn.session_id) != self.name:
            return False
        return self.turns is None or self.turns(turn)

    def entry(self, stage: Stage, fields: dict[str, str]) -> bool:
        """Whether an entry of `stage`'s stream is to go."""
        try:
            message = stage.decode(fields)
        except MalformedEntry:
            return self.raw(fields)
        if isinstance(message, TurnEntry):
            return self.turn(message.turn)
        if isinstance(message, EmbeddedTurns):
            # A several-turn entry goes with its session, or when every turn of it goes
            # (one that holds some: `touches`).
            return all(self.turn(t.turn) for t in message.turns)
        if isinstance(message, EmbeddedTurn):
            return self.turn(message.turn)
        if isinstance(message, EpisodeControl | SkipEntry | OutboxEntry):
            return self.turns is None and message.session_id == self.name
        return False

    def touches(self, stage: Stage, fields: dict[str, str]) -> bool:
        """Whether an entry of `stage`'s stream carries a turn to go among others (an
        embedded entry of several turns: it carries their text, for the currency keeper)."""
        try:
            message = stage.decode(fields)
        except MalformedEntry:
            return False
        return isinstance(message, EmbeddedTurns) and any(
            self.turn(t.turn) for t in message.turns)

    def raw(self, fields: dict[str, str]) -> bool:
        """An undecodable entry: it goes when any value names the session (whole-session
        forgets only: a turn forget cannot tell whose an undecodable entry is)."""
        return self.turns is None and any(self.name in v for v in fields.values())

    def letter(self, topology: Topology, stream: str, fields: dict[str, str]) -> bool:
        try:
            letter = decode_dead_letter(fields, stream)
        except (MalformedEntry, ValueError):
            return self.raw(fields)
        stage = topology.stage_of(letter.stream)
        if stage is None:
            return self.raw(letter.fields)
        return self.entry(stage, letter.fields)


class ErasureStore:
    def __init__(self, client: Redis, keys: Keys) -> None:
        self._r = client
        self.keys = keys
        self._mark = client.register_script(lua("stream_id", "forget_mark"))

    # -- the mark --------------------------------------------------------------------------

    def mark_forgotten(self, name: SessionName, ttl_s: float) -> tuple[str, str]:
        """Write the session's forget mark before a whole-session forget's first pass
        (`Keys.session_forgotten`): every entry its partition's turns and embedded streams
        hold now is the forgotten session's, and the stages drop what they still hold of
        it instead of writing it back after the forget. Kept for `ttl_s` (0: for good).
        Returns (turns mark, embedded mark)."""
        k = self.keys
        p = k.partition(name)
        with redis_errors("mark a session forgotten"):
            reply = self._mark(
                keys=[k.session_forgotten(name), k.turns_stream(p), k.embedded_stream(p),
                      k.boundary_lease(name), k.boundary_buffer(name)],
                args=[FORGOTTEN_TURNS, FORGOTTEN_EMBEDDED, round(ttl_s * 1000)])
        return as_text(reply[0]), as_text(reply[1])

    # -- streams ---------------------------------------------------------------------------

    def erase_stream_entries(self, match: EntryMatch) -> dict[str, int]:
        """XDEL the matching entries from the session's partition's stage streams and their
        dead letters (and their delivery errors). Returns counts: ``stream_entries``,
        ``dead_letters``."""
        topology = Topology(self.keys)
        p = self.keys.partition(match.name)
        entries = letters = 0
        # The embedded stream is read by two groups (boundary, window): one scan.
        seen: set[str] = set()
        for stage in (topology.embed, topology.boundary, topology.window, topology.dispatch):
            stream = stage.stream_for(p)
            groups = [s.group for s in (topology.embed, topology.boundary, topology.window,
                                        topology.dispatch) if s.stream_for(p) == stream]
            if stream in seen:
                continue
            seen.add(stream)
            entries += self._erase(stream, groups,
                                   lambda f, s=stage: match.entry(s, f),  # type: ignore[misc]
                                   lambda f, s=stage: match.touches(s, f))  # type: ignore[misc]
            dead = stage.dead_letters_for(p)
            letters += self._erase(dead, [],
                                   lambda f, st=stream: match.letter(topology, st, f))  # type: ignore[misc]
        return {"stream_entries": entries, "dead_letters": letters}

    def _erase(self, stream: str, groups: Collection[str],
               matches: Callable[[dict[str, str]], bool],
               touches: Callable[[dict[str, str]], bool] | None = None) -> int:
        """XDEL the entries `matches` names; and those `touches` names (an entry that
        carries a forgotten turn beside others) once every group is done with them: the
        others' work is done, and the forgotten text must not stay behind."""
        removed = 0
        start = "-"
        settled = self._settled(stream, groups) if touches is not None else None
        while True:
            with redis_errors("read stream for a forget"):
                rows = decode_entries(self._r.xrange(stream, min=start, count=_PAGE))
            if not rows:
                return removed
            doomed = [row.entry_id for row in rows if matches(row.fields) or (
                touches is not None and settled is not None and settled(row.entry_id)
                and touches(row.fields))]
            if doomed:
                with redis_errors("forget stream entries"):
                    pipe = self._r.pipeline(transaction=True)
                    pipe.xdel(stream, *doomed)
                    for group in groups:
                        pipe.hdel(self.keys.delivery_errors(stream, group), *doomed)
                    removed += int(pipe.execute()[0])
            if len(rows) < _PAGE:
                return removed
            start = "(" + rows[-1].entry_id

    def _settled(self, stream: str, groups: Collection[str]) -> Callable[[str], bool]:
        """Whether every group of `stream` has read and acknowledged an entry (as of now).
        Asked per entry (only the entries a forget touches are): a group's pending list is
        read by the entry's id, never listed whole (it may hold more than one page)."""
        delivered: list[tuple[int, int]] = []
        busy: list[str] = []  # the groups with entries delivered and not acknowledged
        with redis_errors("read stream groups"):
            try:
                infos = self._r.xinfo_groups(stream)
            except redis.ResponseError:  # no stream (yet)
                infos = []
        for info in infos:
            name = as_text(info.get("name"))
            if name not in groups:
                continue
            delivered.append(_entry_id(as_text(info.get("last-delivered-id"))))
            if int(info.get("pending") or 0):
                busy.append(name)
        if len(delivered) < len(groups):
            return lambda entry_id: False  # a group not created yet reads it all later

        def settled(entry_id: str) -> bool:
            if not all(_entry_id(entry_id) <= last for last in delivered):
                return False
            if not busy:
                return True
            with redis_errors("read pending entries"):
                pipe = self._r.pipeline(transaction=False)
                for group in busy:
                    pipe.xpending_range(stream, group, min=entry_id, max=entry_id, count=1)
                replies = pipe.execute()
            return not any(replies)

        return settled

    def pending_before(self, name: SessionName, stage: StreamStage, entry_id: str) -> int:
        """How many entries up to `entry_id` of the session's partition's stream that
        `stage` consumes (turns: "embed"; embedded: "boundary", "window") are still being worked on
        (delivered, not acked): what a forget waits for before its second pass."""
        consumer = self._stage(stage)
        stream = consumer.stream_for(self.keys.partition(name))
        with redis_errors("read pending entries"):
            try:
                rows = self._r.xpending_range(stream, consumer.group, min="-", max=entry_id,
                                              count=_PAGE)
            except redis.ResponseError:  # no such group (yet)
                return 0
        return len(rows or [])

    def last_entry_id(self, name: SessionName, stage: StreamStage = "embed") -> str:
        """The newest entry id of the session's partition's stream that `stage` consumes
        ("0-0": none)."""
        stream = self._stage(stage).stream_for(self.keys.partition(name))
        with redis_errors("read stream tail"):
            rows = self._r.xrevrange(stream, count=1)
        return as_text(rows[0][0]) if rows else "0-0"

    def _stage(self, stage: StreamStage) -> Stage:
        topology = Topology(self.keys)
        return {"embed": topology.embed, "boundary": topology.boundary,
                "window": topology.window}[stage]

    # -- traces ----------------------------------------------------------------------------

    def erase_traces(self, name: SessionName, mentions: Collection[str] = ()) -> int:
        """XDEL the session's reflection traces (with `mentions`: only those whose JSON
        names one of these strings: turn or fact ids, or a forgotten fact's text)."""
        stream = self.keys.traces_stream

        def matches(fields: dict[str, str]) -> bool:
            try:
                trace = TraceEntry.from_fields(fields).trace
            except MalformedEntry:
                return any(name in v for v in fields.values())
            if trace_session(trace) != name:
                return False
            if not mentions:
                return True
            text = json.dumps(trace, ensure_ascii=False, default=str)
            return any(m and m in text for m in mentions)

        return self._erase(stream, [], matches)

    # -- a session's turns -----------------------------------------------------------------

    def erase_window_turns(self, name: SessionName, turns: Iterable[Turn]) -> int:
        """Remove these turns (their (seq, wire JSON) pairs) from the recent window, and
        their ids from the session's turn-id index. Returns how many window entries went."""
        k = self.keys
        window = k.session_recent(name)
        with redis_errors("read the recent window"):
            flat = [as_text(v) for v in self._r.lrange(window, 0, -1)]
        wanted = {t.turn_id for t in turns}
        pairs = [(flat[i], flat[i + 1]) for i in range(0, len(flat) - 1, 2)]
        doomed = [(seq, body) for seq, body in pairs if _turn_id(body) in wanted]
        with redis_errors("forget window turns"):
            pipe = self._r.pipeline(transaction=True)
            for seq, body in doomed:
                pipe.lrem(window, 1, body)
                pipe.lrem(window, 1, seq)
            if wanted:
                pipe.hdel(k.session_turn_ids(name), *wanted)
            pipe.execute()
        return len(doomed)

    def window_turns(self, name: SessionName) -> list[Turn]:
        """Every turn the recent window holds (whoever wrote it)."""
        with redis_errors("read the recent window"):
            flat = [as_text(v) for v in self._r.lrange(self.keys.session_recent(name),
                                                       0, -1)]
        out: list[Turn] = []
        for i in range(0, len(flat) - 1, 2):
            try:
                out.append(turn_from_wire(flat[i + 1], int(flat[i])))
            except (MalformedEntry, ValueError):
                continue
        return out

    def stream_turns(self, name: SessionName) -> list[Turn]:
        """The session's turns still on its partition's turns stream or its dead letters
        (not embedded yet, or never): what the vectors do not know of."""
        topology = Topology(self.keys)
        p = self.keys.partition(name)
        found: list[Turn] = []
        for stream in (topology.embed.stream_for(p), topology.embed.dead_letters_for(p)):
            start = "-"
            while True:
                with redis_errors("read stream for a forget"):
                    rows = decode_entries(self._r.xrange(stream, min=start, count=_PAGE))
                for row in rows:
                    turn = _turn_of(topology, stream, row)
                    if turn is not None and session_name(turn.namespace,
                                                         turn.session_id) == name:
                        found.append(turn)
                if len(rows) < _PAGE:
                    break
                start = "(" + rows[-1].entry_id
        return found

    # -- the audit log ---------------------------------------------------------------------

    def rewrite_audit(
        self, name: SessionName, change: Callable[[AuditEvent], AuditEvent | None],
    ) -> tuple[int, int]:
        """Rewrite the session's audit stream through `change` (None: drop the event; an
        event changed: its new body, at the same entry id and seq). Returns (dropped,
        changed). Retried when an append lands meanwhile (WATCH)."""
        key = self.keys.session_audit(name)
        while True:
            with redis_errors("rewrite the audit log"), self._r.pipeline() as pipe:
                try:
                    pipe.watch(key)  # type: ignore[no-untyped-call]
                    rows = decode_entries(pipe.xrange(key))
                    kept: list[tuple[str, dict[str, str]]] = []
                    dropped = changed = 0
                    for row in rows:
                        body = row.fields.get(AuditEntry.EVENT_FIELD)
                        if body is None:
                            kept.append((row.entry_id, row.fields))
                            continue
                        event = AuditEntry.from_fields(row.fields).event
                        after = change(event)
                        if after is None:
                            dropped += 1
                        elif after != event:
                            changed += 1
                            kept.append((row.entry_id, {**row.fields,
                                                        AuditEntry.EVENT_FIELD:
                                                        AuditEntry.body(after)}))
                        else:
                            kept.append((row.entry_id, row.fields))
                    if not dropped and not changed:
                        pipe.unwatch()
                        return 0, 0
                    pipe.multi()
                    pipe.delete(key)
                    for entry_id, fields in kept:
                        pipe.xadd(key, fields, id=entry_id)  # type: ignore[arg-type]
                    pipe.execute()
                    return dropped, changed
                except redis.WatchError:
                    continue

    # -- forgets in progress and done ------------------------------------------------------

    def begin(self, request: ForgetRequest) -> None:
        with redis_errors("record a forget"):
            self._r.hset(self.keys.forget_pending, request.forget_id,
                         request.model_dump_json())

    def pending(self) -> list[ForgetRequest]:
        """Forgets begun and not finished (a process died mid-way), oldest first."""
        with redis_errors("read pending forgets"):
            raw = self._r.hgetall(self.keys.forget_pending)
        out: list[ForgetRequest] = []
        for body in (raw or {}).values():
            try:
                out.append(ForgetRequest.model_validate_json(body))
            except ValueError:
                continue
        return sorted(out, key=lambda r: r.requested_at)

    def finish(self, request: ForgetRequest, receipt: ForgetReceipt) -> None:
        """Log that the forget happened (who, when, what kind, counts: never content) and
        drop its pending record, in one MULTI (the two keys share a slot)."""
        record = {
            "forget_id": receipt.forget_id, "target": receipt.target,
            "requested_by": request.requested_by,
            "requested_at": request.requested_at.isoformat(),
            "finished_at": receipt.finished_at.isoformat(),
            "sessions": str(len(receipt.session_ids)),
            "removed": json.dumps(receipt.removed, sort_keys=True),
            "redacted_facts": str(receipt.redacted_facts),
            "disk": receipt.disk.model_dump_json(),
        }
        with redis_errors("log a forget"):
            pipe = self._r.pipeline(transaction=True)
            pipe.xadd(self.keys.erasures, record)  # type: ignore[arg-type]
            pipe.hdel(self.keys.forget_pending, request.forget_id)
            pipe.execute()

    def take_retention_round(self, owner: str, ms: int) -> bool:
        """Whether this process runs the retention sweep this round (a lease that lapses
        by itself: one sweep per round across every process)."""
        with redis_errors("take the retention round"):
            return bool(self._r.set(self.keys.retention_lease, owner, nx=True, px=ms))

    def erasures(self, count: int = 20) -> list[dict[str, Any]]:
        """The newest finished forgets, newest first (as `finish` logged them)."""
        with redis_errors("read the erasure log"):
            rows = self._r.xrevrange(self.keys.erasures, count=count)
        out: list[dict[str, Any]] = []
        for row in decode_entries(rows):
            record: dict[str, Any] = dict(row.fields)
            for name in ("removed", "disk"):
                if name in record:
                    record[name] = json.loads(record[name])
            out.append(record)
        return out

    # -- the append-only file --------------------------------------------------------------

    def rewrite_aof(self, timeout_s: float) -> bool:
        """Rewrite the server's AOF so that deleted data leaves its files (BGREWRITEAOF;
        the old base and increment files are removed once the new ones are in place).
        Stream entries deleted with XDEL stay inside their node in memory until it is
        freed, and an RDB preamble would copy them as they are: the preamble is turned
        off (a plain AOF writes only the live entries). False when the server keeps no
        AOF, refuses (a managed server), or the rewrite did not finish in time."""
        try:
            with redis_errors("rewrite the AOF"):
                info = self._r.info("persistence")
                if not int(info.get("aof_enabled", 0)):
                    return False
                self._r.config_set("aof-use-rdb-preamble", "no")
                self._r.bgrewriteaof()
                deadline = time.monotonic() + timeout_s
                time.sleep(0.01)
                while time.monotonic() < deadline:
                    info = self._r.info("persistence")
                    if (not int(info.get("aof_rewrite_in_progress", 0))
                            and not int(info.get("aof_rewrite_scheduled", 0))):
                        return as_text(info.get("aof_last_bgrewrite_status", "ok")) == "ok"
                    time.sleep(0.05)
        except (redis.ResponseError, AttributeError) as exc:
            log.warning("forget.aof_rewrite_refused", error=str(exc)[:200])
            return False
        except Exception as exc:
            log.warning("forget.aof_rewrite_failed", error=str(exc)[:200])
            return False
        log.warning("forget.aof_rewrite_slow", timeout_s=timeout_s)
        return False


def _turn_id(body: str) -> str | None:
    try:
        data = json.loads(body)
    except ValueError:
        return None
    value = data.get("turn_id") if isinstance(data, dict) else None
    return value if isinstance(value, str) else None


def _turn_of(topology: Topology, stream: str, row: StreamEntry) -> Turn | None:
    fields = row.fields
    if stream.endswith(":dead"):
        try:
            fields = decode_dead_letter(fields, stream).fields
        except (MalformedEntry, ValueError):
            return None
    try:
        return TurnEntry.from_fields(fields).turn
    except MalformedEntry:
        return None


__all__ = ["EntryMatch", "ErasureStore", "TurnMatch"]


def _entry_id(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms or 0), int(seq or 0)
