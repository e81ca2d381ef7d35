"""The export format, version 1: JSON Lines.

Line 1 is the header ``{"format": "hivemem.export", "version": 1, ...}``. Then, per session
in order: its ``session`` record (its Redis state: metadata, counters, the boundary stage's
state), its ``turn`` records (by seq), ``episode`` records (by index), ``fact`` records (by
creation) and ``audit`` records (by position in its log). The last line is ``end`` with the
number of records of each type, so a truncated file is caught. Turns and facts carry their
dense vector (base64 of little-endian float32: exact and compact) when the export was made
with vectors; without them, import embeds the text again.

Serialisation is deterministic (field order of the models, no whitespace), so exporting the
same data twice gives the same bytes.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from pydantic import ValidationError as PydanticError

from hivemem.domain.audit import AuditEvent
from hivemem.domain.episode import Episode
from hivemem.domain.fact import Fact
from hivemem.domain.models import Turn
from hivemem.errors import ValidationError

FORMAT = "hivemem.export"
VERSION = 1
RECORD_TYPES = ("session", "turn", "episode", "fact", "audit")


class Header(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    format: Literal["hivemem.export"] = "hivemem.export"
    version: Literal[1] = 1
    sessions: list[str]
    vectors: bool = False
    dim: int | None = None  # of the vectors, when there are any


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SessionRecord(_Record):
    type: Literal["session"] = "session"
    session_id: str
    state: dict[str, Any]


class TurnRecord(_Record):
    type: Literal["turn"] = "turn"
    turn: Turn
    vector: str | None = None  # base64 of the float32 vector (little-endian), exact


class EpisodeRecord(_Record):
    type: Literal["episode"] = "episode"
    episode: Episode


class FactRecord(_Record):
    type: Literal["fact"] = "fact"
    fact: Fact
    vector: str | None = None


class AuditRecord(_Record):
    type: Literal["audit"] = "audit"
    event: AuditEvent


class EndRecord(_Record):
    type: Literal["end"] = "end"
    counts: dict[str, int]


Record = Annotated[
    SessionRecord | TurnRecord | EpisodeRecord | FactRecord | AuditRecord | EndRecord,
    Field(discriminator="type"),
]
_RECORD: TypeAdapter[Any] = TypeAdapter(Record)
_EXCLUDE: dict[str, Any] = {"turn": {"turn": {"duplicate"}}}


def dump(record: BaseModel) -> str:
    """One line (without the newline)."""
    kind = getattr(record, "type", "header")
    data = record.model_dump(mode="json", exclude=_EXCLUDE.get(kind))
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def _where(line_no: int) -> str:
    return f"line {line_no}"


def _problem(exc: PydanticError) -> str:
    first = exc.errors()[0]
    loc = ".".join(str(p) for p in first.get("loc", ()))
    return f"{loc}: {first.get('msg')}" if loc else str(first.get("msg"))


def parse_header(text: str) -> Header:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValidationError(_where(1), f"not a hivemem export (bad JSON: {exc.msg})") from None
    except RecursionError:
        raise ValidationError(_where(1), "not a hivemem export (nested too deep)") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        got = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ValidationError(_where(1), f"unknown format {got!r}; expected {FORMAT!r}")
    if data.get("version") != VERSION:
        raise ValidationError(
            _where(1), f"unsupported {FORMAT} version {data.get('version')!r}; this hivemem"
            f" reads version {VERSION}")
    try:
        return Header.model_validate(data)
    except PydanticError as exc:
        raise ValidationError(_where(1), f"bad header: {_problem(exc)}") from None


def parse_record(line_no: int, text: str) -> Any:
    """One record line -> its model; a corrupt line is a `ValidationError` naming it."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValidationError(_where(line_no), f"corrupt line (bad JSON: {exc.msg})") from None
    except RecursionError:
        raise ValidationError(_where(line_no), "corrupt line (nested too deep to read)"
                              ) from None
    if not isinstance(data, dict) or data.get("type") not in (*RECORD_TYPES, "end"):
        kind = data.get("type") if isinstance(data, dict) else type(data).__name__
        raise ValidationError(_where(line_no), f"unknown record type {kind!r}")
    try:
        return _RECORD.validate_python(data)
    except PydanticError as exc:
        raise ValidationError(_where(line_no), f"bad {data['type']} record: {_problem(exc)}"
                              ) from None
