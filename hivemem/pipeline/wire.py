"""The turn's one wire form: the JSON the turns stream and the recent window carry, its head
(without metadata) for the embedded stream, and the way back to a `Turn`.

Every byte of it is copied several times through Redis, so fields at their default are left
out and `Turn` fills them in again.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import orjson
from pydantic import ValidationError as PydanticValidationError

from hivemem.domain.models import Turn, TurnFields
from hivemem.errors import MalformedEntry

__all__ = ["head_json", "turn_fields", "turn_from_data", "turn_from_wire", "turn_timestamp",
           "wire_json", "wire_parts"]


def turn_fields(turn: TurnFields) -> dict[str, Any]:
    """The turn's fields as JSON-ready values, before and after it has a seq: the one
    mapping the wire form (`wire_json`) and the vector store's payload are built from."""
    return {
        "turn_id": turn.turn_id,
        "session_id": turn.session_id,
        "agent_id": turn.agent_id,
        "role": turn.role.value,
        "content": turn.content,
        "markers": list(turn.markers),
        "metadata": turn.metadata,
        "timestamp": turn.timestamp.isoformat(),
        "token_count": turn.token_count,
        "namespace": turn.namespace,
        "visibility": turn.visibility,
    }


# Fields the wire form leaves out when they hold the model's default (`Turn` fills them in
# again): most turns are shared, in the default namespace, without an agent, markers or
# metadata, and every byte of the wire form is copied several times through Redis (turns
# stream, recent window, the scripts' arguments).
_DEFAULTS: dict[str, Any] = {"agent_id": None, "markers": [], "metadata": {},
                             "namespace": Turn.model_fields["namespace"].default,
                             "visibility": Turn.model_fields["visibility"].default}


def _dumps(fields: dict[str, Any]) -> str:
    for name, default in _DEFAULTS.items():
        if name in fields and fields[name] == default:
            del fields[name]
    return json.dumps(fields, ensure_ascii=False, separators=(",", ":"))


_NAMESPACE = _DEFAULTS["namespace"]
_VISIBILITY = _DEFAULTS["visibility"]


def _utc(ts: datetime) -> bool:
    """orjson writes this timestamp exactly as ``isoformat()`` does."""
    return type(ts) is datetime and ts.tzinfo is UTC


def _encoded(turn: TurnFields, head: bool) -> bytes | None:
    """`_dumps(turn_fields(turn))` (without metadata with `head`) as UTF-8, the
    very same bytes, with orjson (~10x faster than json); None where the bytes could differ
    and json must write them: metadata (orjson writes some floats differently, 1e16 for
    1e+16) and what orjson refuses (a lone surrogate, an integer past 64 bits). orjson
    writes every string as json does with ``ensure_ascii=False`` (checked for every code
    point in tests/unit/test_wire_fast.py) and a UTC datetime as its ``isoformat()``."""
    if turn.metadata and not head:
        return None
    fields: dict[str, Any] = {"turn_id": turn.turn_id, "session_id": turn.session_id}
    if turn.agent_id is not None:
        fields["agent_id"] = turn.agent_id
    fields["role"] = turn.role  # a StrEnum: orjson writes its value
    fields["content"] = turn.content
    if turn.markers:
        fields["markers"] = list(turn.markers)
    ts = turn.timestamp
    fields["timestamp"] = ts if _utc(ts) else ts.isoformat()
    fields["token_count"] = turn.token_count
    if turn.namespace != _NAMESPACE:
        fields["namespace"] = turn.namespace
    if turn.visibility != _VISIBILITY:
        fields["visibility"] = turn.visibility
    try:
        return orjson.dumps(fields)
    except orjson.JSONEncodeError:
        return None


def wire_json(turn: TurnFields) -> str:
    """The turn as the turns stream and the recent window carry it (the seq travels beside
    it), without the fields that hold their default. The Qdrant payload adds its own fields
    to `turn_fields`."""
    raw = _encoded(turn, False)
    return _dumps(turn_fields(turn)) if raw is None else raw.decode()


def wire_parts(turn: TurnFields) -> tuple[bytes | str, bytes | str]:
    """`wire_json(turn)` and ``turn.timestamp.isoformat()`` as the append script takes them
    (UTF-8 bytes where that is cheaper: Redis stores the same bytes either way)."""
    raw = _encoded(turn, False)
    ts = turn.timestamp
    when = orjson.dumps(ts)[1:-1] if _utc(ts) else ts.isoformat()
    return (_dumps(turn_fields(turn)) if raw is None else raw), when


# What the boundary stage never reads: the embedded stream leaves it out (`head_json`).
# The content travels: the boundary stage's currency keeper applies the change rules to it.
_BODY = ("metadata",)


def head_json(turn: TurnFields) -> str:
    """The turn without its metadata: everything the boundary stage reads (ids, role, time,
    size, markers, scope, and the content its currency keeper reads), for the embedded
    stream, where every byte is copied
    into Redis, read back and, while it waits for its predecessors, kept in the buffer."""
    raw = _encoded(turn, True)
    if raw is not None:
        return raw.decode()
    fields = turn_fields(turn)
    for name in _BODY:
        del fields[name]
    return _dumps(fields)


def turn_from_wire(raw: str | bytes, seq: int, *, head: bool = False) -> Turn:
    """The inverse of `wire_json` (with `head`, of `head_json` too: the turn then has empty
    metadata, and empty content when written before heads carried it); `MalformedEntry`
    when it is not a valid turn."""
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise MalformedEntry(f"bad turn: {exc}", cause=exc) from None
    return turn_from_data(data, seq, head=head)


def turn_timestamp(raw: str | bytes) -> str | None:
    """The timestamp of a turn in its wire form (None if it has none or is not JSON)."""
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    value = data.get("timestamp") if isinstance(data, dict) else None
    return value if isinstance(value, str) else None


def turn_from_data(data: object, seq: int, *, head: bool) -> Turn:
    if not isinstance(data, dict):
        raise MalformedEntry("turn is not a JSON object")
    if head:
        data.setdefault("content", "")
        data.setdefault("metadata", {})
    data["seq"] = seq
    try:
        return Turn.model_validate(data)
    except PydanticValidationError as exc:
        raise MalformedEntry(f"bad turn: {exc}", cause=exc) from None
