"""Every stream entry as a typed message, with one codec each (to and from the Redis field
dict). The turn's wire form inside them is `hivemem.pipeline.wire`.

Messages are frozen and ignore unknown fields, so producers may upgrade before workers. A
field dict that cannot be decoded raises `MalformedEntry`: undecodable now is undecodable
forever, so the consume loop dead-letters it at once instead of retrying.

Entries and their fields:
- turns stream, `TurnEntry`: ``seq``, ``turn`` (the turn's wire JSON, `wire_json`); written
  by the ingest script in `hivemem.store.state`, which gets the field names from here.
- embedded stream (`EmbeddedEntry`), by ``kind``: ``turns`` (`EmbeddedTurns`: several turns
  of one session, what the embed stage publishes), ``turn`` (`EmbeddedTurn`: one turn without
  its content and metadata, `head_json`, and its vector ``vec`` as float16; the boundary
  buffer keeps these, and entries written before ``turns`` existed are of this kind),
  ``control`` (`EpisodeControl`: close_episode / close_session), ``skip``
  (`SkipEntry`: a turn the embed stage dead-lettered).
- An entry that carries turns names their session by the turns' (namespace, session id);
  one that carries none (control, skip, outbox) by the session's internal name
  (`hivemem.domain.names`) in ``session_id``. Each has `name`, the internal name.
- dead-letter streams: `encode_dead_letter` / `decode_dead_letter` (the original entry's
  fields ride along prefixed with ``f:``).
- outbox stream, `OutboxEntry`: ``episode_id``, ``session_id``, ``index`` (a closed episode
  whose reflect job is still to be enqueued).
- traces stream, `TraceEntry`: ``trace`` (JSON).
- a session's audit stream, `AuditEntry`: ``seq`` (assigned by the append script), ``event``
  (the event as JSON, without its seq).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any, ClassVar, Literal, TypeAlias

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field
from pydantic import ValidationError as PydanticValidationError

from hivemem.domain.audit import AuditEvent
from hivemem.domain.episode import ControlAction
from hivemem.domain.models import DeadLetter, Turn
from hivemem.domain.names import SessionName, session_name
from hivemem.errors import MalformedEntry
from hivemem.pipeline.vectors import VectorDecodeError, decode_vector, encode_vector_half
from hivemem.pipeline.wire import head_json, turn_from_data, turn_from_wire, wire_json

# Field names, spelled once.
SEQ = "seq"
TURN = "turn"
KIND = "kind"
VEC = "vec"
SESSION_ID = "session_id"
ACTION = "action"
TRACE = "trace"
EVENT = "event"
_ORIGINAL = "f:"  # prefix of the original entry's fields inside a dead letter


class Entry(BaseModel):
    """A stream entry. Subclasses define `to_fields` and `from_fields`."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    def to_fields(self) -> dict[str, str]:
        raise NotImplementedError

    def to_json(self) -> str:
        """The field dict as JSON: how a stage keeps an entry aside (the boundary buffer)."""
        return json.dumps(self.to_fields(), ensure_ascii=False, separators=(",", ":"))


def _field(fields: Mapping[str, str], name: str) -> str:
    try:
        return fields[name]
    except KeyError as exc:
        raise MalformedEntry(f"missing field {name!r}", cause=exc) from None


def _seq(fields: Mapping[str, str]) -> int:
    raw = _field(fields, SEQ)
    try:
        seq = int(raw)
    except ValueError as exc:
        raise MalformedEntry(f"bad seq {raw!r}", cause=exc) from None
    if seq < 1:
        raise MalformedEntry(f"bad seq {seq}")
    return seq


# -- turns stream ---------------------------------------------------------------------------


class TurnEntry(Entry):
    """A turn on the turns stream, for the embed stage."""

    turn: Turn

    @property
    def name(self) -> SessionName:
        return session_name(self.turn.namespace, self.turn.session_id)

    def to_fields(self) -> dict[str, str]:
        return {SEQ: str(self.turn.seq), TURN: wire_json(self.turn)}

    @classmethod
    def from_fields(cls, fields: Mapping[str, str]) -> TurnEntry:
        return cls(turn=turn_from_wire(_field(fields, TURN), _seq(fields)))

    # The ingest script assigns the seq itself, so it writes the entry from these names.
    SEQ_FIELD: ClassVar[str] = SEQ
    TURN_FIELD: ClassVar[str] = TURN


def decode_turn_entry(fields: Mapping[str, str]) -> TurnEntry:
    return TurnEntry.from_fields(fields)


# -- embedded stream ------------------------------------------------------------------------


class EmbeddedTurn(Entry):
    """A turn durable in Qdrant, for the boundary stage: the turn without its metadata (the
    stage never reads it; the content feeds its currency keeper) and its dense vector as
    float16 (it only feeds a cosine
    against the episode's centroid; see `pipeline.vectors`). Entries written before this
    form (the whole turn, a float32 vector) decode the same way."""

    kind: Literal["turn"] = "turn"
    turn: Turn
    vec: str | None = None

    @classmethod
    def of(cls, turn: Turn, vector: npt.ArrayLike | None) -> EmbeddedTurn:
        if turn.metadata:
            turn = turn.model_copy(update={"metadata": {}})
        return cls(turn=turn, vec=None if vector is None else encode_vector_half(vector))

    @property
    def session_id(self) -> str:
        return self.turn.session_id

    @property
    def name(self) -> SessionName:
        return session_name(self.turn.namespace, self.turn.session_id)

    @property
    def seq(self) -> int:
        return self.turn.seq

    @property
    def vector(self) -> npt.NDArray[np.float32] | None:
        return None if not self.vec else decode_vector(self.vec)

    def to_fields(self) -> dict[str, str]:
        fields = {KIND: self.kind, SEQ: str(self.turn.seq), TURN: head_json(self.turn)}
        if self.vec:
            fields[VEC] = self.vec
        return fields

    @classmethod
    def from_fields(cls, fields: Mapping[str, str]) -> EmbeddedTurn:
        return cls(turn=turn_from_wire(_field(fields, TURN), _seq(fields), head=True),
                   vec=_checked_vector(fields.get(VEC) or None))


def _checked_vector(vec: str | None) -> str | None:
    if vec is not None:
        try:
            decode_vector(vec)
        except VectorDecodeError as exc:
            raise MalformedEntry(f"bad vector: {exc}", cause=exc) from None
    return vec


class EpisodeControl(Entry):
    """An explicit episode close, ordered with the session's turns by its own seq
    (``session_id``: the session's internal name)."""

    kind: Literal["control"] = "control"
    session_id: str = Field(min_length=1)
    seq: int = Field(ge=1)
    action: ControlAction

    def to_fields(self) -> dict[str, str]:
        return {KIND: self.kind, SEQ: str(self.seq), SESSION_ID: self.session_id,
                ACTION: self.action}

    @classmethod
    def from_fields(cls, fields: Mapping[str, str]) -> EpisodeControl:
        try:
            return cls(session_id=_field(fields, SESSION_ID), seq=_seq(fields),
                       action=_field(fields, ACTION))  # type: ignore[arg-type]
        except PydanticValidationError as exc:
            raise MalformedEntry(f"bad control: {exc}", cause=exc) from None

    @property
    def name(self) -> SessionName:
        return SessionName(self.session_id)

    @staticmethod
    def script_fields(session_id: SessionName, action: str) -> list[str]:
        """The three field/value pairs besides the seq, for a script that assigns the seq
        itself (`hivemem.store.state`): it writes ``SEQ_FIELD, seq, *these``."""
        if action not in ("close_episode", "close_session"):
            raise ValueError(f"unknown control action {action!r}")
        return [KIND, "control", SESSION_ID, session_id, ACTION, action]

    SEQ_FIELD: ClassVar[str] = SEQ


class SkipEntry(Entry):
    """A turn the embed stage dead-lettered: the boundary stage's order moves past its seq
    (``session_id``: the session's internal name)."""

    kind: Literal["skip"] = "skip"
    session_id: str = Field(min_length=1)
    seq: int = Field(ge=1)

    @property
    def name(self) -> SessionName:
        return SessionName(self.session_id)

    def to_fields(self) -> dict[str, str]:
        return {KIND: self.kind, SEQ: str(self.seq), SESSION_ID: self.session_id}

    @classmethod
    def from_fields(cls, fields: Mapping[str, str]) -> SkipEntry:
        try:
            return cls(session_id=_field(fields, SESSION_ID), seq=_seq(fields))
        except PydanticValidationError as exc:
            raise MalformedEntry(f"bad skip: {exc}", cause=exc) from None


SEQS = "seqs"
TURNS = "turns"
VECS = "vecs"


class EmbeddedTurns(Entry):
    """Several turns of one session in one entry: what the embed stage publishes, one entry
    per session and batch, so that a backlog costs the embedded stream (its XADD, the boundary
    stage's read and ack) one entry per session instead of one per turn. Fields: ``seqs``
    (comma-separated), ``turns`` (a JSON array of `head_json`), ``vecs`` (the vectors' texts,
    comma-separated, empty for a turn without one); the same order in all three."""

    kind: Literal["turns"] = "turns"
    session_id: str = Field(min_length=1)
    turns: tuple[EmbeddedTurn, ...] = Field(min_length=1)

    @property
    def seq(self) -> int:
        return self.turns[0].seq

    @property
    def name(self) -> SessionName:
        return self.turns[0].name

    def to_fields(self) -> dict[str, str]:
        return {KIND: self.kind, SESSION_ID: self.session_id,
                SEQS: ",".join(str(t.seq) for t in self.turns),
                TURNS: "[" + ",".join(head_json(t.turn) for t in self.turns) + "]",
                VECS: ",".join(t.vec or "" for t in self.turns)}

    @classmethod
    def from_fields(cls, fields: Mapping[str, str]) -> EmbeddedTurns:
        raw_seqs = _field(fields, SEQS).split(",")
        vecs = _field(fields, VECS).split(",")
        try:
            heads = json.loads(_field(fields, TURNS))
        except ValueError as exc:
            raise MalformedEntry(f"bad turns JSON: {exc}", cause=exc) from None
        if not isinstance(heads, list) or not len(heads) == len(raw_seqs) == len(vecs):
            raise MalformedEntry("seqs, turns and vecs differ in length")
        turns = [
            EmbeddedTurn(turn=turn_from_data(head, _seq({SEQ: raw_seq}), head=True),
                         vec=_checked_vector(vec or None))
            for raw_seq, head, vec in zip(raw_seqs, heads, vecs, strict=True)
        ]
        session_id = _field(fields, SESSION_ID)
        if any(t.turn.session_id != session_id for t in turns):
            raise MalformedEntry("a turn of another session")
        try:
            return cls(session_id=session_id, turns=tuple(turns))
        except PydanticValidationError as exc:
            raise MalformedEntry(f"bad turns entry: {exc}", cause=exc) from None

    @staticmethod
    def script_fields() -> list[str]:
        """For the script that writes the entry (`hivemem.store.state`): kind's name and
        value, then the names of session_id, seqs, turns and vecs, whose values are
        `script_values`."""
        return [KIND, "turns", SESSION_ID, SEQS, TURNS, VECS]

    def script_values(self) -> tuple[str, str, str, str]:
        fields = self.to_fields()
        return fields[SESSION_ID], fields[SEQS], fields[TURNS], fields[VECS]


EmbeddedEntry: TypeAlias = EmbeddedTurn | EmbeddedTurns | EpisodeControl | SkipEntry
EmbeddedItem: TypeAlias = EmbeddedTurn | EpisodeControl | SkipEntry

_EMBEDDED: dict[str, type[EmbeddedTurn] | type[EmbeddedTurns] | type[EpisodeControl]
                | type[SkipEntry]] = {
    "turn": EmbeddedTurn, "turns": EmbeddedTurns, "control": EpisodeControl, "skip": SkipEntry,
}


def embedded_items(entry: EmbeddedEntry) -> tuple[EmbeddedItem, ...]:
    """What one embedded-stream entry holds, one item per seq (an `EmbeddedTurns` holds
    several turns)."""
    return entry.turns if isinstance(entry, EmbeddedTurns) else (entry,)


def decode_embedded(fields: Mapping[str, str]) -> EmbeddedEntry:
    """An entry of the embedded stream, by its kind."""
    kind = _field(fields, KIND)
    message = _EMBEDDED.get(kind)
    if message is None:
        raise MalformedEntry(f"unknown entry kind {kind!r}")
    return message.from_fields(fields)


def embedded_from_json(raw: str | bytes) -> EmbeddedItem:
    """The inverse of `Entry.to_json` for one embedded item (what the boundary buffer
    keeps: a turn, a control or a skip, never a several-turn entry)."""
    try:
        fields = json.loads(raw)
    except ValueError as exc:
        raise MalformedEntry(f"bad JSON: {exc}", cause=exc) from None
    if not isinstance(fields, dict):
        raise MalformedEntry("entry JSON is not an object")
    entry = decode_embedded(fields)
    if isinstance(entry, EmbeddedTurns):
        raise MalformedEntry("a several-turn entry where one item was expected")
    return entry


# -- the episode outbox -----------------------------------------------------------------------


class OutboxEntry(Entry):
    """A closed episode waiting for its reflect job (written by the boundary commit, in the
    same atomic step as the episode; the dispatcher turns it into one rq job).
    ``session_id``: the session's internal name."""

    EPISODE_FIELD: ClassVar[str] = "episode_id"
    SESSION_FIELD: ClassVar[str] = SESSION_ID
    INDEX_FIELD: ClassVar[str] = "index"

    episode_id: str
    session_id: str
    index: int

    @property
    def name(self) -> SessionName:
        return SessionName(self.session_id)

    def to_fields(self) -> dict[str, str]:
        return {self.EPISODE_FIELD: self.episode_id, self.SESSION_FIELD: self.session_id,
                self.INDEX_FIELD: str(self.index)}

    @classmethod
    def from_fields(cls, fields: Mapping[str, str]) -> OutboxEntry:
        raw_index = _field(fields, cls.INDEX_FIELD)
        try:
            index = int(raw_index)
        except ValueError as exc:
            raise MalformedEntry(f"bad index {raw_index!r}", cause=exc) from None
        return cls(episode_id=_field(fields, cls.EPISODE_FIELD),
                   session_id=_field(fields, cls.SESSION_FIELD), index=index)


def decode_outbox(fields: Mapping[str, str]) -> OutboxEntry:
    return OutboxEntry.from_fields(fields)


# -- dead letters ---------------------------------------------------------------------------


def encode_dead_letter(letter: DeadLetter) -> dict[str, str]:
    record = {
        "stream": letter.stream,
        "group": letter.group,
        "entry_id": letter.entry_id,
        "error": letter.error[:2000],
        "deliveries": str(letter.deliveries),
        "failed_at": letter.failed_at.isoformat(),
    }
    record.update({f"{_ORIGINAL}{k}": v for k, v in letter.fields.items()})
    return record


def decode_dead_letter(fields: Mapping[str, str], stream: str) -> DeadLetter:
    """A dead-letter record; `stream` (the stream it died on) when the record lacks it."""
    try:
        return DeadLetter(
            stream=fields.get("stream", stream),
            group=fields.get("group", ""),
            entry_id=fields.get("entry_id", ""),
            fields={k[len(_ORIGINAL):]: v for k, v in fields.items()
                    if k.startswith(_ORIGINAL)},
            error=fields.get("error", ""),
            deliveries=int(fields.get("deliveries", "0")),
            failed_at=datetime.fromisoformat(_field(fields, "failed_at")),
        )
    except (ValueError, PydanticValidationError) as exc:
        if isinstance(exc, MalformedEntry):
            raise
        raise MalformedEntry(f"bad dead letter: {exc}", cause=exc) from None


# -- traces ---------------------------------------------------------------------------------


class TraceEntry(Entry):
    """A reflection trace on the bounded traces stream."""

    trace: dict[str, Any]

    def to_fields(self) -> dict[str, str]:
        return {TRACE: json.dumps(self.trace, ensure_ascii=False, default=str)}

    @classmethod
    def from_fields(cls, fields: Mapping[str, str]) -> TraceEntry:
        try:
            trace = json.loads(_field(fields, TRACE))
        except ValueError as exc:
            raise MalformedEntry(f"bad trace JSON: {exc}", cause=exc) from None
        if not isinstance(trace, dict):
            raise MalformedEntry("trace is not a JSON object")
        return cls(trace=trace)


# -- audit ----------------------------------------------------------------------------------


class AuditEntry(Entry):
    """One event of a session's audit stream; its seq is its position in the stream."""

    event: AuditEvent

    # The append script assigns the seq, so it writes the entry from these names and `body`.
    SEQ_FIELD: ClassVar[str] = SEQ
    EVENT_FIELD: ClassVar[str] = EVENT

    @staticmethod
    def body(event: AuditEvent) -> str:
        return event.model_dump_json(exclude={"seq"})

    def to_fields(self) -> dict[str, str]:
        return {SEQ: str(self.event.seq), EVENT: self.body(self.event)}

    @classmethod
    def from_fields(cls, fields: Mapping[str, str]) -> AuditEntry:
        try:
            data = json.loads(_field(fields, EVENT))
            if not isinstance(data, dict):
                raise MalformedEntry("audit event is not a JSON object")
            data["seq"] = int(fields.get(SEQ, "0"))
            return cls(event=AuditEvent.model_validate(data))
        except (ValueError, PydanticValidationError) as exc:
            if isinstance(exc, MalformedEntry):
                raise
            raise MalformedEntry(f"bad audit event: {exc}", cause=exc) from None
