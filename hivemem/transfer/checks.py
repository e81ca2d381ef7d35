"""What an imported record must pass: the checks ingest runs, and the caller's scope.

An export file is input like any other: each turn goes through `TurnDraft` (ids, session ids,
content, markers, metadata depth, size and integer range, timestamps, visibility), each fact,
episode and audit event through the same id, content and timestamp checks, and each session
state through bounds on what it may claim. Values ingest derives are derived here too (a
turn's token count, its metadata as plain JSON, its timestamp in UTC); the session counters
are derived by the importer from the records themselves (`hivemem.transfer.importer`).

A refusal names the line and the field; the importer collects them all and refuses the file
with a summary (`ImportRefused`). A record of another namespace is refused like any other bad
record (422); a record of another agent, for an agent-bound key, is `NotPermitted` (403).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from hivemem.config import IngestSettings
from hivemem.domain.ids import check_id
from hivemem.domain.models import Turn
from hivemem.domain.scope import DEFAULT_NAMESPACE, check_namespace, check_visibility
from hivemem.domain.turn import TurnDraft, check_content, check_timestamp
from hivemem.errors import NotPermitted, ValidationError
from hivemem.transfer.format import (
    AuditRecord,
    EpisodeRecord,
    FactRecord,
    SessionRecord,
    TurnRecord,
)

STATE_KEYS = frozenset(
    {"meta", "info", "boundary", "seq", "processed", "dead", "reflected", "namespace"})
MAX_HASH_FIELDS = 256  # a session hash (meta, info, boundary state)
MAX_HASH_KEY_CHARS = 256
MAX_HASH_VALUE_CHARS = 8 * 1024
MAX_DEAD_BYTES = 1 << 20  # the dead-letter bitmap: 8M turns
MAX_REFERENCES = 10_000  # ids in one list of a fact, episode or event
MAX_SUBJECT_CHARS = 1024
MAX_SHOWN = 100  # refusals listed in a refused file's summary (all are counted)


@dataclass(frozen=True, slots=True)
class ImportScope:
    """Who imports: a namespace (None: the operator, any namespace) and, for an agent-bound
    key, the one agent whose data it may write."""

    namespace: str | None = None
    agent_id: str | None = None


@dataclass(frozen=True, slots=True)
class Refusal:
    line: int
    field: str
    message: str
    forbidden: bool = False  # outside the caller's scope (403), not malformed (422)

    def as_dict(self) -> dict[str, Any]:
        return {"line": self.line, "field": self.field, "detail": self.message}


class ImportRefused(ValidationError):
    """The file was refused whole (nothing written): `refusals` lists the first records
    refused (line, field, why), `total` counts them all."""

    def __init__(self, refusals: list[Refusal], total: int) -> None:
        first = refusals[0]
        more = f" ({total} records refused in all)" if total > 1 else ""
        super().__init__(f"line {first.line}: {first.field}", first.message + more)
        self.refusals = refusals
        self.total = total
        self.forbidden = any(r.forbidden for r in refusals)

    def summary(self) -> dict[str, Any]:
        return {"refused": self.total, "records": [r.as_dict() for r in self.refusals]}


class Refusals:
    """Collects refusals across a file (the first `MAX_SHOWN` kept, all counted)."""

    def __init__(self) -> None:
        self.kept: list[Refusal] = []
        self.total = 0

    def add(self, line: int, kind: str, exc: ValidationError) -> None:
        self.total += 1
        if len(self.kept) < MAX_SHOWN:
            field = exc.field if exc.field.startswith("line ") else f"{kind}.{exc.field}"
            self.kept.append(Refusal(line, _printable(field), _printable(exc.message),
                                     isinstance(exc, NotPermitted)))

    def raise_any(self) -> None:
        if self.total:
            # Scope refusals first: they decide the answer (403) and say the most.
            kept = sorted(self.kept, key=lambda r: (not r.forbidden, r.line))
            raise ImportRefused(kept, self.total)


def _printable(text: str) -> str:
    """`text` as valid UTF-8: a field or message may quote the file's own text, lone
    surrogates included, and the answer must still encode."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _ids(field: str, values: Iterable[object]) -> None:
    values = list(values)
    if len(values) > MAX_REFERENCES:
        raise ValidationError(field, f"holds more than {MAX_REFERENCES} ids")
    for value in values:
        check_id(field, value)


def _maybe_id(field: str, value: object) -> None:
    if value is not None:
        check_id(field, value)


def _when(field: str, value: datetime | None) -> None:
    if value is not None:
        try:
            check_timestamp(value)
        except ValidationError as exc:
            raise ValidationError(field, exc.message) from None


def _owner(agent_id: str | None, visibility: str) -> None:
    check_visibility(visibility)
    if visibility == "private" and agent_id is None:
        raise ValidationError("visibility", "a private record needs an agent_id (its owner)")


def _flat_hash(field: str, value: object) -> None:
    if value is None:
        return
    if not isinstance(value, Mapping):
        raise ValidationError(field, f"must be a mapping, got {type(value).__name__}")
    if len(value) > MAX_HASH_FIELDS:
        raise ValidationError(field, f"has more than {MAX_HASH_FIELDS} fields")
    for key, item in value.items():
        if not isinstance(key, str) or not 0 < len(key) <= MAX_HASH_KEY_CHARS:
            raise ValidationError(field, f"keys must be strings of 1-{MAX_HASH_KEY_CHARS}"
                                         " characters")
        if isinstance(item, bool) or not isinstance(item, str | int | float):
            raise ValidationError(f"{field}.{key}", "must be a string or a number")
        if isinstance(item, str) and len(item) > MAX_HASH_VALUE_CHARS:
            raise ValidationError(f"{field}.{key}", f"is over {MAX_HASH_VALUE_CHARS}"
                                                    " characters")


def dead_count(state: Mapping[str, Any]) -> int:
    """How many turns the session's dead-letter bitmap marks (checked by `check_state`)."""
    blob = state.get("dead") or ""
    return sum(bin(b).count("1") for b in base64.b64decode(blob)) if blob else 0


def check_state(record: SessionRecord) -> str:
    """The session record's id and state; returns its namespace."""
    check_id("session_id", record.session_id)
    state = record.state
    unknown = sorted(set(state) - STATE_KEYS)
    if unknown:
        raise ValidationError(f"state.{unknown[0]}", "is not part of a session's state")
    namespace = check_namespace(state.get("namespace") or DEFAULT_NAMESPACE)
    for name in ("meta", "info", "boundary"):
        _flat_hash(f"state.{name}", state.get(name))
    for name in ("seq", "reflected"):
        value = state.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 0):
            raise ValidationError(f"state.{name}", "must be an integer >= 0")
    for name in ("processed", "dead"):
        blob = state.get(name)
        if blob in (None, ""):
            continue
        if not isinstance(blob, str) or len(blob) > MAX_DEAD_BYTES * 4 // 3 + 4:
            raise ValidationError(f"state.{name}", "must be a base64 bitmap of at most"
                                                   f" {MAX_DEAD_BYTES} bytes")
        try:
            base64.b64decode(blob, validate=True)
        except (binascii.Error, ValueError):
            raise ValidationError(f"state.{name}", "is not valid base64") from None
    return namespace


def check_turn(record: TurnRecord, settings: IngestSettings) -> TurnRecord:
    """The turn as ingest would have stored it (or the `ValidationError` ingest raises)."""
    t = record.turn
    draft = TurnDraft(
        t.session_id, t.role, t.content, settings=settings, agent_id=t.agent_id,
        markers=t.markers, metadata=t.metadata, timestamp=t.timestamp, turn_id=t.turn_id,
        namespace=t.namespace, visibility=t.visibility,
    )
    turn = Turn.model_construct(
        turn_id=draft.turn_id, session_id=draft.session_id, agent_id=draft.agent_id,
        role=draft.role, content=draft.content, markers=draft.markers,
        metadata=draft.metadata, timestamp=draft.timestamp, namespace=draft.namespace,
        visibility=draft.visibility, seq=t.seq, token_count=draft.token_count,
        duplicate=False)
    return record.model_copy(update={"turn": turn})


def check_fact(record: FactRecord, settings: IngestSettings) -> None:
    f = record.fact
    check_id("fact_id", f.fact_id)
    check_id("session_id", f.session_id)
    check_namespace(f.namespace)
    _maybe_id("agent_id", f.agent_id)
    _owner(f.agent_id, f.visibility)
    check_content(f.content, settings.max_content_bytes)
    if len(f.subject) > MAX_SUBJECT_CHARS:
        raise ValidationError("subject", f"is over {MAX_SUBJECT_CHARS} characters")
    for name in ("episode_id", "superseded_by", "supersedes"):
        _maybe_id(name, getattr(f, name))
    for name in ("source_turn_ids", "conflicts_with", "retracted_by", "considered_in",
                 "mentioned_in"):
        _ids(name, getattr(f, name))
    if len(f.considered_values) > MAX_REFERENCES:
        raise ValidationError("considered_values", f"holds more than {MAX_REFERENCES} values")
    for name in ("created_at", "valid_from", "valid_to"):
        _when(name, getattr(f, name))


def check_episode(record: EpisodeRecord) -> None:
    e = record.episode
    check_id("episode_id", e.episode_id)
    check_id("session_id", e.session_id)
    check_namespace(e.namespace)
    _maybe_id("agent_id", e.agent_id)
    _owner(e.agent_id, e.visibility)
    _ids("turn_ids", e.turn_ids)
    _ids("agent_ids", e.agent_ids)
    if e.index < 0 or e.seq_start < 0 or e.seq_end < e.seq_start:
        raise ValidationError("seq_end", "an episode's index and seqs must be >= 0, its"
                                         " seq_end >= seq_start")
    for name in ("started_at", "ended_at"):
        _when(name, getattr(e, name))


def check_event(record: AuditRecord) -> None:
    e = record.event
    check_id("event_id", e.event_id)
    check_id("session_id", e.session_id)
    check_id("fact_id", e.fact_id)
    _ids("related", e.related)
    _when("at", e.at)


def check_scope(record: Any, namespace: str, scope: ImportScope) -> None:
    """`NotPermitted` naming the field when the record is not the caller's to write."""
    if scope.namespace is not None and namespace != scope.namespace:
        # 422 as for any session of another namespace (its existence is not confirmed).
        raise ValidationError("namespace", f"a record of namespace {namespace!r}: this key may"
                                        f" import only into {scope.namespace!r}")
    if scope.agent_id is None:
        return
    agents: tuple[str | None, ...] = ()
    if isinstance(record, SessionRecord):
        info = record.state.get("info") or {}
        agents = (info.get("agent_id") if isinstance(info, Mapping) else None,)
    elif isinstance(record, TurnRecord):
        agents = (record.turn.agent_id,)
    elif isinstance(record, FactRecord):
        agents = (record.fact.agent_id,)
    elif isinstance(record, EpisodeRecord):
        agents = (record.episode.agent_id, *record.episode.agent_ids)
    for agent in agents:
        if agent is not None and agent != scope.agent_id:
            raise NotPermitted("agent_id", f"a record of agent {agent!r}: this key writes only"
                                           f" as {scope.agent_id!r}")


def namespace_of(record: Any) -> str:
    if isinstance(record, SessionRecord):
        return str(record.state.get("namespace") or DEFAULT_NAMESPACE)
    if isinstance(record, TurnRecord):
        return record.turn.namespace
    if isinstance(record, FactRecord):
        return record.fact.namespace
    if isinstance(record, EpisodeRecord):
        return record.episode.namespace
    raise TypeError(type(record).__name__)
