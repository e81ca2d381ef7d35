"""Redis state of the slot table (`hivemem.domain.slot_table`): the keeper's working state
and the replaced statements, per session, both in the session's slot.

The keeper reads its state, applies a run of turns and writes back with one script that
changes nothing unless the stored `applied` seq is still the one it read: a replay, or a
worker whose lease expired, never applies a turn twice. Recall sends its read ahead
(`send_view`) and parses only the entries it has not seen before.

The table holds every statement a session replaced: tens of thousands in a long session
(100k turns, a quarter of them changes: ~25k entries). Read whole on every recall it cost
what the session ever said (transfer, decode), so each session's decoded view is kept
between recalls and recall first reads only its version: the `applied` seq (every write
moves it: the keeper writes only when it applied a new turn) and the table's field count
(a reset deletes both). The whole table is read again only when the version moved.

The keeper's state is the same kind of thing on the write side: ~300 KB of JSON in a long
session (its newest 200 statements, their turns' vectors, the value lineage), ~6 ms to
parse. A keeper keeps the state it last wrote or read, under its version (the `applied` seq
and the state's `epoch`, set by its first write: a purge takes it, so a session started
again never matches), and reads only the version while it still matches: the usual case,
where one boundary worker holds a session's lease batch after batch.
"""

from __future__ import annotations

import json
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from hivemem.domain.slot_table import Replacement, SlotState, SlotView
from hivemem.pipeline.topology import FORGOTTEN_EMBEDDED, Keys, SessionName
from hivemem.store.redis import Redis, as_text, redis_errors, send_pipeline
from hivemem.store.scripts import lua

# What `SlotTableStore.write` did.
WRITTEN, LOST_RACE, FORGOTTEN = 1, 0, -1
_UNKNOWN_FIELDS = -2  # the script's answer when the stored state is not the one kept

_APPLIED = "applied"
_STATE = "state"
_EPOCH = "epoch"
_VECTOR = "v:"  # a state field: a current statement's turn vector
_PERSONAL = "p:"
_GONE = "g:"

# Parsed entries remembered across recalls (the raw JSON is the key: a changed entry is
# parsed again).
_PARSED = 50_000
# Sessions whose decoded view is kept between recalls.
_VIEWS = 256
# Sessions whose keeper state is kept between batches.
_STATES = 256


class _Kept(NamedTuple):
    """A session's keeper state as this process last wrote or read it."""

    version: tuple[int, str]  # the applied seq, the epoch
    state: SlotState
    stored: frozenset[str]  # the turns whose vectors are fields of the stored state


class SlotTableStore:
    def __init__(self, client: Redis, keys: Keys) -> None:
        self._r = client
        self.keys = keys
        self._write = client.register_script(lua("slot_table_write"))
        self._parsed: OrderedDict[str, Replacement] = OrderedDict()
        # Session -> (its version: applied seq, field count; the view decoded at it).
        self._views: OrderedDict[SessionName, tuple[tuple[int, int], SlotView]] = OrderedDict()
        self._states: OrderedDict[SessionName, _Kept] = OrderedDict()
        self._lock = threading.Lock()

    def reset(self, name: SessionName) -> int:
        """Delete the session's slot table (its keeper state holds turn texts): after a
        forget of some of its turns. The keeper starts again from the next turn; what was
        current before stays known through the reflected facts. Returns the keys removed."""
        with redis_errors("reset the slot table"):
            deleted = int(self._r.delete(self.keys.slot_state(name),
                                         self.keys.slot_table(name)))
        self.drop_cache()
        return deleted

    def drop_cache(self) -> None:
        """Forget the entries parsed so far (after a forget: no replaced statement of an
        erased session stays in this process)."""
        with self._lock:
            self._parsed.clear()
            self._views.clear()
            self._states.clear()

    def state(self, name: SessionName) -> SlotState:
        """The keeper's state: the one kept here while the stored version is still its
        own, else read and parsed."""
        key = self.keys.slot_state(name)
        with self._lock:
            kept = self._states.get(name)
        if kept is not None:  # (nothing kept: read it whole at once, no version probe)
            with redis_errors("read slot state"):
                applied, epoch = self._r.hmget(key, _APPLIED, _EPOCH)
            version = (_seq(applied), as_text(epoch) if epoch else "")
            if version[1] and kept.version == version:
                with self._lock:
                    if name in self._states:
                        self._states.move_to_end(name)
                return kept.state
        with redis_errors("read slot state"):
            fields = {as_text(f): v for f, v in self._r.hgetall(key).items()}
        raw = fields.get(_STATE)
        state = SlotState.model_validate_json(raw) if raw else SlotState()
        stored = {f[len(_VECTOR):]: as_text(v) for f, v in fields.items()
                  if f.startswith(_VECTOR)}
        if stored:  # (a state written before vectors were fields has them in its JSON)
            state = state.model_copy(update={"vectors": {**state.vectors, **stored}})
        if fields.get(_EPOCH):
            self._keep(name, (_seq(fields.get(_APPLIED)), as_text(fields[_EPOCH])), state,
                       frozenset(stored))
        return state

    def _keep(self, name: SessionName, version: tuple[int, str], state: SlotState,
              stored: frozenset[str]) -> None:
        with self._lock:
            self._states[name] = _Kept(version, state, stored)
            self._states.move_to_end(name)
            while len(self._states) > _STATES:
                self._states.popitem(last=False)

    def write(self, name: SessionName, base: int, state: SlotState,
              replaced: Mapping[str, Replacement], personal: Mapping[str, str],
              restored: Iterable[str] = (),
              gone: Mapping[str, tuple[str, tuple[str, ...]] | None] | None = None,
              forgotten: str | None = None) -> int:
        """Store `state` and the new entries if the stored `applied` is still `base` and the
        session was given `state.applied` (its counter is not below it: a forget that
        purged the session since the state was read takes the counter with it);
        `restored`: turns that are current again (their entries go); `gone`: values moved
        on from (value key -> (turn, successors), None: current again); `forgotten`: the
        session's forget mark when the caller read its turns ('': none; None: not
        checked): `FORGOTTEN` once it has moved (a forget of the session began since).
        Returns `WRITTEN`, `LOST_RACE` or `FORGOTTEN`."""
        with self._lock:
            kept = self._states.get(name)
        # The vectors: each a field of its own, written once (a turn's vector never changes)
        # and deleted once its statement is no longer current. Which fields are there is
        # known when the kept state is the stored one (the script checks its epoch); else
        # every vector is written and the script deletes the fields not among them.
        known = kept if kept is not None and kept.version[0] == base else None
        reply = self._send(name, base, state, known, replaced, personal, restored, gone,
                           forgotten)
        if reply == _UNKNOWN_FIELDS:
            reply = self._send(name, base, state, None, replaced, personal, restored, gone,
                               forgotten)
        if isinstance(reply, int):
            with self._lock:
                self._states.pop(name, None)
            return reply
        self._keep(name, (state.applied, as_text(reply)), state, frozenset(state.vectors))
        return WRITTEN

    def _send(self, name: SessionName, base: int, state: SlotState, known: _Kept | None,
              replaced: Mapping[str, Replacement], personal: Mapping[str, str],
              restored: Iterable[str],
              gone: Mapping[str, tuple[str, tuple[str, ...]] | None] | None,
              forgotten: str | None = None) -> Any:
        stored = known.stored if known is not None else frozenset()
        put = [t for t in state.vectors if t not in stored]
        drop = [t for t in stored if t not in state.vectors]
        # (Defaults left out: a fact's empty lists and nulls are ~40% of the state's JSON.)
        body = state.model_dump_json(exclude={"vectors"}, exclude_defaults=True)
        args: list[Any] = [base, state.applied, body, secrets.token_hex(8), len(put), len(drop),
                           known.version[1] if known is not None else "",
                           "" if forgotten is None else "=" + forgotten, FORGOTTEN_EMBEDDED]
        for turn_id in put:
            args += [_VECTOR + turn_id, state.vectors[turn_id]]
        args += [_VECTOR + turn_id for turn_id in drop]
        for turn_id in restored:
            if turn_id not in replaced:
                args += [turn_id, ""]
        for turn_id, entry in replaced.items():
            args += [turn_id, entry.model_dump_json()]
        for turn_id, owner in personal.items():
            args += [_PERSONAL + turn_id, owner]
        for key, moved in (gone or {}).items():
            args += [_GONE + key, "" if moved is None else json.dumps([moved[0], moved[1]])]
        keys = [self.keys.slot_state(name), self.keys.slot_table(name),
                self.keys.session_turn_ids(name), self.keys.session_forgotten(name)]
        with redis_errors("write slot table"):
            return self._write(keys=keys, args=args)

    def view(self, name: SessionName) -> SlotView:
        return self.send_view(name)()

    @property
    def client(self) -> Redis:
        """The Redis client (a reader that shares it may queue `queue_version` on its own
        pipeline)."""
        return self._r

    def send_view(self, name: SessionName) -> Callable[[], SlotView]:
        """The session's `SlotView`: its version read now, the view returned by the call
        returned (which must be made: see `send_pipeline`); see `view_at`."""
        with redis_errors("read slot table"):
            pipe = self._r.pipeline(transaction=False)
            self.queue_version(pipe, name)
            replies = send_pipeline(pipe)

        def read() -> SlotView:
            with redis_errors("read slot table"):
                got = replies()
            return self.view_at(name, got)

        return read

    # Replies of `queue_version`.
    VERSION_REPLIES = 2

    def queue_version(self, pipe: Any, name: SessionName) -> None:
        """Queue, on `pipe`, the read of the table's version (`VERSION_REPLIES` replies, for
        `view_at`): recall's first Redis read carries it, no round trip of its own."""
        pipe.hget(self.keys.slot_state(name), _APPLIED)
        pipe.hlen(self.keys.slot_table(name))

    def view_at(self, name: SessionName, replies: Sequence[Any]) -> SlotView:
        """The view at the version `replies` read (`queue_version`): the one kept when the
        version is the same (the same object: callers may keep what they derive from it),
        else the table read whole and decoded."""
        applied, size = replies
        version = (_seq(applied), int(size))
        with self._lock:
            kept = self._views.get(name)
            if kept is not None and kept[0] == version:
                self._views.move_to_end(name)
                return kept[1]
        return self._read_whole(name)

    def _read_whole(self, name: SessionName) -> SlotView:
        with redis_errors("read slot table"):
            pipe = self._r.pipeline(transaction=True)  # the seq and the table it goes with
            pipe.hget(self.keys.slot_state(name), _APPLIED)
            pipe.hgetall(self.keys.slot_table(name))
            applied, table = pipe.execute()
        view = self._decode(applied, table)
        with self._lock:
            self._views[name] = ((view.applied, len(table)), view)
            self._views.move_to_end(name)
            while len(self._views) > _VIEWS:
                self._views.popitem(last=False)
        return view

    def _decode(self, applied: Any, table: dict[Any, Any]) -> SlotView:
        replaced: dict[str, Replacement] = {}
        personal: dict[str, str] = {}
        gone: dict[str, tuple[str, tuple[str, ...]]] = {}
        for raw_field, raw_value in table.items():
            name, value = as_text(raw_field), as_text(raw_value)
            if name.startswith(_PERSONAL):
                personal[name[len(_PERSONAL):]] = value
                continue
            if name.startswith(_GONE):
                turn_id, after = json.loads(value)
                gone[name[len(_GONE):]] = (str(turn_id), tuple(str(k) for k in after))
                continue
            replaced[name] = self._parse(value)
        return SlotView(applied=_seq(applied), replaced=replaced, personal=personal, gone=gone)

    def _parse(self, value: str) -> Replacement:
        with self._lock:
            known = self._parsed.get(value)
            if known is not None:
                return known
        entry = Replacement.model_validate(json.loads(value))
        with self._lock:
            self._parsed[value] = entry
            while len(self._parsed) > _PARSED:
                self._parsed.popitem(last=False)
        return entry


def _seq(raw: Any) -> int:
    return int(as_text(raw)) if raw else 0
