"""Per-session state in Redis: sequence numbers, idempotency, the recent window, progress.

All of it can be rebuilt from Qdrant (`restore_session`), which is the system of record.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from hivemem.domain.models import SessionStats, Turn, TurnFields
from hivemem.domain.scope import Scope
from hivemem.domain.slot_table import SlotView
from hivemem.errors import AckTimeout, OutOfScope
from hivemem.pipeline.messages import (
    EmbeddedTurn,
    EmbeddedTurns,
    EpisodeControl,
    SkipEntry,
    TurnEntry,
)
from hivemem.pipeline.topology import (
    FORGOTTEN_TURNS,
    Keys,
    SessionName,
    Topology,
    session_name,
)
from hivemem.pipeline.wire import turn_from_wire, wire_parts
from hivemem.store import head, recent
from hivemem.store.acked import AckWait, run_acked
from hivemem.store.currency import SlotTableStore
from hivemem.store.episodes import EpisodeStore, Progress
from hivemem.store.redis import (
    Redis,
    as_text,
    redis_errors,
    run_scripts,
    send_pipeline,
    set_union,
)
from hivemem.store.scripts import lua
from hivemem.store.stream_entries import id_order

# Turns of one session in one published entry at most (a BITFIELD's arguments stay well
# inside what a script may unpack).
_ENTRY_TURNS = 1000


_IN_SCOPE_MAX = 100_000  # pairs remembered by `check_scopes` before it starts over


class RecentReads(NamedTuple):
    """What a recall's first Redis read returns (`send_recent_turns_and_progress`)."""

    turns: list[Turn]  # the newest turns, newest first
    progress: Progress  # the session's episode progress
    table: SlotView | None  # the session's slot table, when asked for


@dataclass(frozen=True, slots=True)
class Publication:
    """What `TurnLog.publish` did: how many turns it published, and the turns it refused
    because a forget of their session began after they were read (their turns-stream
    entry is at or before the session's forget mark): the caller takes back what it wrote
    of them."""

    published: int
    forgotten: tuple[EmbeddedTurn, ...] = ()


class TurnLog:
    """Each session's turns as Redis holds them: the append script (seq, idempotency, the
    turns stream), the recent window, embed progress and the session's namespace. (What a
    caller says about a session, its title and agent, is `SessionStore`'s.)"""

    def __init__(self, client: Redis, keys: Keys, recent_window: int) -> None:
        self._r = client
        self.keys = keys
        self.topology = Topology(keys)
        self.recent_window = recent_window
        self._append = client.register_script(lua("append_turns"))
        self._control = client.register_script(lua("append_control"))
        self._publish = client.register_script(lua("stream_id", "publish_embedded"))
        self._skip = client.register_script(lua("stream_id", "publish_skip"))
        # (session, namespace) pairs `check_scopes` has seen pass: see there.
        self._in_scope: dict[tuple[str, str], None] = {}
        # Per session read lately: its window's rows (entry, seq) as decoded at the last
        # read (`_turns_in`). Recall reads the window every call, and it changes by a turn
        # or two between calls: decoding its ~50 entries anew (JSON, then validation)
        # cost ~0.4 ms of a ~6 ms LoCoMo recall.
        self._decoded: OrderedDict[SessionName, dict[tuple[bytes, int], Turn]] = (
            OrderedDict())
        self._decoded_lock = threading.Lock()

    def _append_call(
        self, partition: int, drafts: Sequence[TurnFields]
    ) -> tuple[list[str], list[bytes | str | int], list[int]]:
        """The append script's keys and args for turns of one partition, grouped by
        (session, namespace) in the order of each group's first turn, and where each reply
        pair belongs: `order[i]` is the index in `drafts` of the i-th turn the script
        answers for."""
        k = self.keys
        groups: dict[tuple[str, str], list[int]] = {}
        for i, draft in enumerate(drafts):
            groups.setdefault((draft.session_id, draft.namespace), []).append(i)
        keys: list[str] = [k.turns_stream(partition), k.sessions(partition)]
        args: list[bytes | str | int] = [
            self.recent_window, TurnEntry.SEQ_FIELD, TurnEntry.TURN_FIELD, len(groups),
            recent.slack(self.recent_window)]
        order: list[int] = []
        for (sid, namespace), members in groups.items():
            name = session_name(namespace, sid)
            keys += (k.session_turn_ids(name), k.session_recent(name), k.session_meta(name),
                     k.namespace_session_set(name))
            args += (name, sid, namespace, len(members))
            for i in members:
                draft = drafts[i]
                args += (draft.turn_id, *wire_parts(draft))
            order += members
        return keys, args, order

    def append_turn(self, draft: TurnFields, wait: AckWait | None = None) -> tuple[int, bool]:
        """Returns (seq, duplicate). `OutOfScope` if its name has another owner (only a
        ``default`` name a turn from before namespaces gave another one can). With `wait`:
        the write and the wait for its acknowledgement on one connection to the session's
        master; `AckTimeout` when the wait falls short (the turn is written)."""
        if wait is not None:
            return self.append_turns([draft], wait)[0]
        keys, args, _ = self._append_call(
            self.keys.partition(session_name(draft.namespace, draft.session_id)), [draft])
        with redis_errors("append turn"):
            seq, dup = self._append(keys=keys, args=args)
        if int(seq) < 0:
            raise OutOfScope()
        return int(seq), bool(dup)

    def append_turns(
        self, drafts: Sequence[TurnFields], wait: AckWait | None = None,
    ) -> list[tuple[int, bool]]:
        """One script call per partition (each turn atomic on its own, in order within its
        session), all in one pipeline: one round trip for the batch.

        Callers check the sessions' namespaces first (`check_scope`): a turn refused here
        (a session claimed by another namespace in between) raises `OutOfScope` after the
        others were written."""
        if not drafts:
            return []
        by_partition: dict[int, list[int]] = {}
        for i, draft in enumerate(drafts):
            name = session_name(draft.namespace, draft.session_id)
            by_partition.setdefault(self.keys.partition(name), []).append(i)
        calls = [
            self._append_call(p, [drafts[i] for i in idx]) for p, idx in by_partition.items()
        ]
        short = None
        with redis_errors("append turns"):
            if wait is None:
                replies = run_scripts(self._r, self._append,
                                      [(ks, args) for ks, args, _ in calls])
            else:
                replies, short = run_acked(self._r, self._append,
                                           [(ks, args) for ks, args, _ in calls], wait)
        out: list[tuple[int, bool]] = [(0, False)] * len(drafts)
        refused = False
        for idx, (_, _, order), flat in zip(by_partition.values(), calls, replies, strict=True):
            for j, local in enumerate(order):
                seq, dup = int(flat[2 * j]), bool(int(flat[2 * j + 1]))
                refused |= seq < 0
                out[idx[local]] = (seq, dup)
        if refused:
            # A session claimed by another namespace meanwhile: forget what passed before.
            self._in_scope.clear()
            raise OutOfScope()
        if short is not None and wait is not None:
            raise AckTimeout(wait.level, short.wanted, short.got, wait.timeout_ms,
                             [d.turn_id for d in drafts])
        return out

    def publish_embedded(self, entries: Sequence[EmbeddedTurn]) -> int:
        """`publish` without the turns' stream entry ids (nothing checked against a forget
        mark). Returns how many turns were published."""
        return self.publish(entries).published

    def publish(self, entries: Sequence[EmbeddedTurn],
                sources: Sequence[str] | None = None) -> Publication:
        """Mark these turns processed and publish them on their partitions' embedded
        streams (one `EmbeddedTurns` entry per session), only the turns not marked before
        (a retry appends nothing twice). `sources`: each turn's turns-stream entry id; a
        turn at or before its session's forget mark is neither marked nor published (see
        `Publication`). One script per partition, one round trip (more when a session's
        turns were partly published before, or partly forgotten)."""
        if not entries:
            return Publication(0)
        if sources is not None and len(sources) != len(entries):
            raise ValueError("one source entry id per turn")
        k = self.keys
        by_partition: dict[int, dict[SessionName, list[tuple[EmbeddedTurn, str]]]] = {}
        for i, entry in enumerate(entries):
            name = entry.name
            by_partition.setdefault(k.partition(name), {}).setdefault(name, []).append(
                (entry, "" if sources is None else sources[i]))
        names = EmbeddedTurns.script_fields()
        calls: list[tuple[list[str], list[str | int]]] = []
        groups: list[list[list[tuple[EmbeddedTurn, str]]]] = []
        for p, sessions in by_partition.items():
            keys = [k.embedded_stream(p)]
            args: list[str | int] = [*names, FORGOTTEN_TURNS]
            chunks = [turns[i:i + _ENTRY_TURNS] for turns in sessions.values()
                      for i in range(0, len(turns), _ENTRY_TURNS)]
            for chunk in chunks:
                name = chunk[0][0].name
                keys += [k.session_processed(name), k.session_forgotten(name)]
                batch = EmbeddedTurns(session_id=chunk[0][0].session_id,
                                      turns=tuple(t for t, _ in chunk))
                known = [source for _, source in chunk if source]
                oldest = min(known, key=id_order) if len(known) == len(chunk) else ""
                args += (*batch.script_values(), len(chunk), oldest,
                         *(t.seq for t, _ in chunk))
            calls.append((keys, args))
            groups.append(chunks)
        with redis_errors("publish embedded turns"):
            replies = run_scripts(self._r, self._publish, calls)
        published = 0
        forgotten: list[EmbeddedTurn] = []
        rest: list[tuple[EmbeddedTurn, str]] = []
        for chunks, reply in zip(groups, replies, strict=True):
            published += int(reply[0])
            i = 1
            while i < len(reply):
                index = int(reply[i])
                chunk = chunks[abs(index) - 1]
                if index < 0:  # a forget began after some of these turns were read
                    mark = id_order(as_text(reply[i + 1]))
                    for turn, source in chunk:
                        if id_order(source) <= mark:
                            forgotten.append(turn)
                        else:  # ingested after the forget began: published on its own
                            rest.append((turn, source))
                    i += 2
                    continue
                bits = reply[i + 1:i + 1 + len(chunk)]
                rest += (t for t, bit in zip(chunk, bits, strict=True) if int(bit) == 0)
                i += 1 + len(chunk)
        if not rest:
            return Publication(published, tuple(forgotten))
        more = self.publish([t for t, _ in rest],
                            None if sources is None else [s for _, s in rest])
        return Publication(published + more.published, (*forgotten, *more.forgotten))

    def append_control(self, name: SessionName, action: str) -> int | None:
        """Enqueue an episode control after the session's turns so far; None: no session."""
        k = self.keys
        with redis_errors("append control"):
            seq = self._control(
                keys=[
                    k.session_turn_ids(name),
                    k.session_processed(name),
                    k.session_meta(name),
                    k.embedded_stream(k.partition(name)),
                ],
                args=[EpisodeControl.SEQ_FIELD,
                      *EpisodeControl.script_fields(name, action)],
            )
        return None if int(seq) < 0 else int(seq)

    def mark_processed(self, turns: Sequence[Turn]) -> None:
        """Record that these turns are durable in Qdrant. Idempotent (bits)."""
        if not turns:
            return
        with redis_errors("mark processed"):
            pipe = self._r.pipeline(transaction=False)
            for turn in turns:
                pipe.setbit(self.keys.session_processed(
                    session_name(turn.namespace, turn.session_id)), turn.seq, 1)
            pipe.execute()

    def forget_marks(self, names: Sequence[SessionName]) -> dict[SessionName, str]:
        """The turns-stream forget mark of each of these sessions that has one (one round
        trip): what the embed stage reads before it writes anything for a batch."""
        if not names:
            return {}
        with redis_errors("read forget marks"):
            pipe = self._r.pipeline(transaction=False)
            for name in names:
                pipe.hget(self.keys.session_forgotten(name), FORGOTTEN_TURNS)
            replies = pipe.execute()
        return {name: as_text(mark) for name, mark in zip(names, replies, strict=True)
                if mark is not None}

    def publish_skip(self, name: SessionName, seq: int, source: str = "") -> bool:
        """Mark the turn at `seq` dead-lettered and publish a skip for it on the embedded
        stream (the boundary stage's pointer moves past it), in one script; nothing when its
        turns-stream entry `source` is at or before the session's forget mark. Returns
        whether it was published."""
        k = self.keys
        fields = SkipEntry(session_id=name, seq=seq).to_fields()
        with redis_errors("publish a skip"):
            return bool(self._skip(
                keys=[k.session_dead(name), k.embedded_stream(k.partition(name)),
                      k.session_forgotten(name)],
                args=[seq, source, FORGOTTEN_TURNS,
                      *(x for kv in fields.items() for x in kv)]))

    def last_seq(self, name: SessionName) -> int:
        return self.progress(name)[0]

    def progress(self, name: SessionName) -> tuple[int, int, int]:
        """(last seq, processed, dead-lettered) in one round trip."""
        k = self.keys
        with redis_errors("read progress"):
            pipe = self._r.pipeline(transaction=False)
            head.queue_read(pipe, k, name)
            pipe.bitcount(k.session_processed(name))
            pipe.bitcount(k.session_dead(name))
            *read, done, dead = pipe.execute()
        return head.decode(*read)[0], int(done), int(dead)

    def namespace_of(self, name: SessionName) -> str | None:
        """The namespace that owns the session; None for a session with no turns yet."""
        with redis_errors("read session namespace"):
            pipe = self._r.pipeline(transaction=False)
            head.queue_read(pipe, self.keys, name)
            read = pipe.execute()
        return head.decode(*read)[1]

    def check_scopes(self, pairs: Sequence[tuple[str, str]]) -> None:
        """`check_scope` for many (session, namespace) pairs in one round trip, skipping
        pairs this client has seen pass before: a session's namespace is fixed by its first
        turn, so a pair that passed keeps passing (the append script checks every turn
        again anyway; this pre-check is what writes nothing of a batch with one bad turn)."""
        pairs = [pair for pair in pairs if pair not in self._in_scope]
        if not pairs:
            return
        with redis_errors("read session namespaces"):
            pipe = self._r.pipeline(transaction=False)
            for session_id, namespace in pairs:
                head.queue_read(pipe, self.keys, session_name(namespace, session_id))
            replies = pipe.execute()
        n = head.READS
        for i, (_sid, namespace) in enumerate(pairs):
            found = head.decode(*replies[n * i:n * i + n])[1]
            if found is not None and found != namespace:
                raise OutOfScope()
        if len(self._in_scope) + len(pairs) > _IN_SCOPE_MAX:
            self._in_scope.clear()
        self._in_scope.update(dict.fromkeys(pairs))

    def check_scope(self, name: SessionName, namespace: str, *,
                    must_exist: bool = False) -> None:
        """`OutOfScope` when the session named `name` is not `namespace`'s (a ``default``
        name a turn from before namespaces took for another one), or, with `must_exist`,
        unknown: the two look the same to the caller."""
        _require_owner(self.namespace_of(name), namespace, must_exist=must_exist)

    def recent_turns(
        self, name: SessionName, limit: int, scope: Scope | None = None
    ) -> list[Turn]:
        """The newest `limit` turns, newest first, including ones not yet embedded; with a
        scope, only those it may see (another agent's private turns are left out)."""
        # The list may hold a few more than the window (`recent.slack`): never more.
        rows = recent.read(self._r, self.keys, name, min(limit, self.recent_window))
        return self._turns_in(name, rows, scope)

    def recent_turns_and_progress(
        self, episodes: EpisodeStore, name: SessionName, limit: int, scope: Scope | None = None
    ) -> tuple[list[Turn], Progress]:
        """`recent_turns` and `episodes.progress` in one round trip (recall reads both every
        call; a round trip is ~0.1 ms here): the keys share the session's slot. Two when
        the stores use different clients."""
        got = self.send_recent_turns_and_progress(episodes, name, limit, scope)()
        return got.turns, got.progress

    def send_recent_turns_and_progress(
        self, episodes: EpisodeStore, name: SessionName, limit: int, scope: Scope | None = None,
        *, owned_by: str | None = None, slots: SlotTableStore | None = None,
    ) -> Callable[[], RecentReads]:
        """`recent_turns_and_progress`, sent now and read by the call returned (which must
        be made: see `send_pipeline`). `owned_by`: `check_scope(name, owned_by,
        must_exist=True)` in the same round trip; the call raises its `OutOfScope`.
        `slots`: the session's slot table too (`SlotTableStore.send_view`), its version in
        the same round trip (its keys are in the session's slot as well)."""
        limit = min(limit, self.recent_window)
        if episodes.client is not self._r or (slots is not None and slots.client is not self._r):
            if owned_by is not None:
                self.check_scope(name, owned_by, must_exist=True)
            read_view = slots.send_view(name) if slots is not None else None
            both = self.recent_turns(name, limit, scope), episodes.progress(name)
            table = read_view() if read_view is not None else None
            return lambda: RecentReads(*both, table)
        with redis_errors("read recent turns and boundary state"):
            pipe = self._r.pipeline(transaction=False)
            if owned_by is not None:
                head.queue_read(pipe, self.keys, name)
            if limit > 0:
                recent.queue_read(pipe, self.keys, name, limit)
            episodes.queue_progress(pipe, name)
            if slots is not None:
                slots.queue_version(pipe, name)
            replies = send_pipeline(pipe)

        def read() -> RecentReads:
            with redis_errors("read recent turns and boundary state"):
                got = replies()
            if owned_by is not None:
                _require_owner(head.decode(*got[:head.READS])[1], owned_by, must_exist=True)
                got = got[head.READS:]
            rows = recent.decode_read(got[: recent.READ_REPLIES]) if limit > 0 else []
            got = got[recent.READ_REPLIES:] if limit > 0 else got
            table = None
            if slots is not None:  # (after the owner check: nothing is kept before it)
                with redis_errors("read slot table"):
                    table = slots.view_at(name, got[1:1 + slots.VERSION_REPLIES])
            return RecentReads(self._turns_in(name, rows, scope),
                               episodes.decode_progress(got[0]), table)

        return read

    def stats(self, name: SessionName) -> SessionStats:
        last, done, dead = self.progress(name)
        with redis_errors("read session meta"):
            pipe = self._r.pipeline(transaction=False)
            recent.queue_activity(pipe, self.keys, name)
            decoded = recent.activity(*pipe.execute())
        first = decoded.get("first_ts")
        latest = decoded.get("last_ts")
        controls = int(decoded.get("controls", 0))
        return SessionStats(
            session_id=Keys.split_name(name)[1],
            turns_enqueued=last - controls,
            turns_processed=done - controls,
            turns_dead_lettered=dead,
            last_seq=last,
            first_activity=datetime.fromisoformat(first) if first else None,
            last_activity=datetime.fromisoformat(latest) if latest else None,
        )

    def session_names(self) -> list[SessionName]:
        """Every session's internal name (the operator's view), sorted."""
        with redis_errors("list sessions"):
            return sorted(SessionName(n) for n in set_union(self._r, self.keys.all_sessions()))

    def restore_session(self, name: SessionName, turns: Sequence[Turn]) -> None:
        """Rebuild this session's state from its turns as stored in Qdrant."""
        if not turns:
            return
        k = self.keys
        ordered = sorted(turns, key=lambda t: t.seq)
        with redis_errors("restore session"):
            pipe = self._r.pipeline(transaction=True)
            top = ordered[-1].seq
            # Never move a live counter backwards; the owner is the first turn's unless the
            # session has one.
            pipe.eval(lua("restore_head"), 2, k.session_turn_ids(name),
                      k.namespace_session_set(name), top,
                      ordered[0].namespace, ordered[0].session_id)
            ids = head.valid_ids(ordered)
            if ids:
                pipe.hset(k.session_turn_ids(name), mapping=ids)  # type: ignore[arg-type]
            for turn in ordered:
                pipe.setbit(k.session_processed(name), turn.seq, 1)
            # One entry per seq: the stored version (with its detected markers) replaces
            # the one written at ingest, instead of sitting beside it.
            recent.queue_write(pipe, k, name, ordered, self.recent_window)
            pipe.hsetnx(k.session_meta(name), "first_ts", ordered[0].timestamp.isoformat())
            pipe.hset(k.session_meta(name), "last_ts", ordered[-1].timestamp.isoformat())
            pipe.sadd(k.session_set(name), name)
            pipe.execute()


    def _turns_in(self, name: SessionName, rows: Sequence[tuple[bytes, int]],
                  scope: Scope | None) -> list[Turn]:
        """The window's rows as turns; with a scope, only those it may see (another
        agent's private turns are left out). A row read for the session before (the same
        bytes at the same seq) is not decoded again: each caller gets its own copy of
        the turn decoded then (`_copy`)."""
        with self._decoded_lock:
            before = self._decoded.get(name, {})
        now: dict[tuple[bytes, int], Turn] = {}
        turns: list[Turn] = []
        for row in rows:
            kept = before.get(row)
            if kept is None:
                kept = turn_from_wire(*row)
                if not _flat(kept.metadata):
                    turns.append(kept)  # nested metadata: not kept (a copy would share it)
                    continue
            now[row] = kept
            turns.append(_copy(kept))
        with self._decoded_lock:
            self._decoded[name] = now
            self._decoded.move_to_end(name)
            while len(self._decoded) > _DECODED_SESSIONS:
                self._decoded.popitem(last=False)
        if scope is None:
            return turns
        return [t for t in turns if scope.admits(t.namespace, t.visibility, t.agent_id)]


# Sessions whose window rows a `TurnLog` keeps decoded (~50 turns each).
_DECODED_SESSIONS = 256
_SCALARS = (str, int, float, bool, type(None))


def _flat(metadata: dict[str, object]) -> bool:
    """Whether every value is a scalar: a shallow copy of it is then a whole copy."""
    return all(isinstance(v, _SCALARS) for v in metadata.values())


def _copy(turn: Turn) -> Turn:
    """A turn equal to `turn` (fields, fields set), with its own metadata dict: `Turn` is
    frozen, so only its metadata (flat: `_flat`) could be changed through a copy handed
    out; ~1 us where decoding the row again costs ~8 us."""
    out = Turn.__new__(Turn)
    _set(out, "__dict__", {**turn.__dict__, "metadata": dict(turn.metadata)})
    _set(out, "__pydantic_fields_set__", set(turn.__pydantic_fields_set__))
    _set(out, "__pydantic_extra__", turn.__pydantic_extra__)
    _set(out, "__pydantic_private__", turn.__pydantic_private__)
    return out


_set = object.__setattr__


def _require_owner(owner: str | None, namespace: str, *, must_exist: bool) -> None:
    """`OutOfScope` unless the session's owner (None: no turns yet) is `namespace`; an
    unknown session passes unless `must_exist`."""
    if (owner is None and must_exist) or (owner is not None and owner != namespace):
        raise OutOfScope()
