"""The turn's one wire form: the JSON the turns stream and the recent window carry, its head
(without content and metadata) for the embedded stream, and the way back to a `Turn`.

Every byte of it is copied several times through Redis, so fields at their default are left
out and `Turn` fills them in again.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError as PydanticValidationError

from hivemem.domain.models import Turn, TurnFields
from hivemem.errors import MalformedEntry

__all__ = ["head_json", "turn_fields", "turn_from_data", "turn_from_wire", "turn_timestamp",
           "wire_json"]


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


def wire_json(turn: TurnFields) -> str:
    """The turn as the turns stream and the recent window carry it (the seq travels beside
    it), without the fields that hold their default. The Qdrant payload adds its own fields
    to `turn_fields`."""
    return _dumps(turn_fields(turn))


# What the boundary stage never reads: the embedded stream leaves them out (`head_json`).
_BODY = ("content", "metadata")


def head_json(turn: TurnFields) -> str:
    """The turn without its content and metadata: everything the boundary stage reads (ids,
    role, time, size, markers, scope), for the embedded stream, where every byte is copied
    into Redis, read back and, while it waits for its predecessors, kept in the buffer."""
    fields = turn_fields(turn)
    for name in _BODY:
        del fields[name]
    return _dumps(fields)


def turn_from_wire(raw: str | bytes, seq: int, *, head: bool = False) -> Turn:
    """The inverse of `wire_json` (with `head`, of `head_json` too: the turn then has empty
    content and metadata); `MalformedEntry` when it is not a valid turn."""
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
