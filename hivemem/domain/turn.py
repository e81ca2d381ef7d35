"""Validation of everything a caller hands the SDK, before anything is written."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from hivemem.config import IngestSettings
from hivemem.domain.ids import check_id
from hivemem.domain.models import BUILTIN_MARKERS, Role
from hivemem.domain.scope import Visibility, check_namespace, check_visibility
from hivemem.domain.tokens import estimate_tokens
from hivemem.errors import ValidationError

_CUSTOM_MARKER = re.compile(r"^custom:[A-Za-z0-9_.-]{1,64}$")


def check_role(value: object) -> Role:
    if isinstance(value, str):
        try:
            return Role(value)
        except ValueError:
            pass
    allowed = ", ".join(r.value for r in Role)
    raise ValidationError("role", f"unknown role {value!r}; allowed: {allowed}")


def check_content(value: object, max_bytes: int) -> str:
    if not isinstance(value, str):
        raise ValidationError("content", f"must be a string, got {type(value).__name__}")
    if not value.strip():
        raise ValidationError("content", "must not be empty or whitespace")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValidationError("content", "is not valid unicode (lone surrogate)") from None
    if size > max_bytes:
        raise ValidationError("content", f"is {size} bytes; the limit is {max_bytes}")
    return value


def check_markers(value: Iterable[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise ValidationError("markers", "must be a list of marker names")
    out: list[str] = []
    for marker in value:
        if not isinstance(marker, str) or not (
            marker in BUILTIN_MARKERS or _CUSTOM_MARKER.fullmatch(marker)
        ):
            raise ValidationError(
                "markers",
                f"unknown marker {marker!r}; allowed: decision, constraint, failure, goal,"
                " custom:<name>",
            )
        if marker not in out:
            out.append(marker)
    return tuple(out)


def check_metadata(value: Mapping[str, Any] | None, max_bytes: int) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValidationError("metadata", f"must be a mapping, got {type(value).__name__}")
    try:
        encoded = json.dumps(value, ensure_ascii=False, allow_nan=False)
        size = len(encoded.encode("utf-8"))
    except (TypeError, ValueError, RecursionError, UnicodeEncodeError) as exc:
        raise ValidationError("metadata", f"must be JSON-serialisable: {exc}") from None
    if size > max_bytes:
        raise ValidationError("metadata", f"is {size} bytes as JSON; the limit is {max_bytes}")
    decoded: dict[str, Any] = json.loads(encoded)  # a plain-JSON copy the caller cannot mutate
    return decoded


def check_timestamp(value: object) -> datetime:
    if value is None:
        return datetime.now(UTC)
    if not isinstance(value, datetime):
        raise ValidationError("timestamp", f"must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValidationError("timestamp", "must be timezone-aware (e.g. datetime.now(UTC))")
    return value.astimezone(UTC)


def check_turn_id(value: object) -> str:
    if value is None:
        return uuid.uuid4().hex
    return check_id("turn_id", value)


def check_budget(value: object, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError("token_budget", f"must be an integer, got {type(value).__name__}")
    if value <= 0:
        raise ValidationError("token_budget", "must be > 0")
    return value


def check_query(value: object) -> str:
    if not isinstance(value, str):
        raise ValidationError("query", f"must be a string, got {type(value).__name__}")
    if not value.strip():
        raise ValidationError("query", "must not be empty or whitespace")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError("query", "is not valid unicode (lone surrogate)") from None
    return value


class TurnDraft:
    """A validated turn that has no sequence number yet."""

    __slots__ = (
        "agent_id",
        "content",
        "markers",
        "metadata",
        "namespace",
        "role",
        "session_id",
        "timestamp",
        "token_count",
        "turn_id",
        "visibility",
    )

    def __init__(
        self,
        session_id: object,
        role: object,
        content: object,
        *,
        settings: IngestSettings,
        agent_id: object = None,
        markers: Iterable[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        timestamp: object = None,
        turn_id: object = None,
        namespace: object = None,
        visibility: object = "shared",
    ) -> None:
        self.session_id = check_id("session_id", session_id)
        self.role = check_role(role)
        self.content = check_content(content, settings.max_content_bytes)
        self.agent_id = None if agent_id is None else check_id("agent_id", agent_id)
        self.markers = check_markers(markers)
        self.metadata = check_metadata(metadata, settings.max_metadata_bytes)
        self.timestamp = check_timestamp(timestamp)
        self.turn_id = check_turn_id(turn_id)
        self.token_count = estimate_tokens(self.content)
        self.namespace: str = check_namespace(namespace)
        self.visibility: Visibility = check_visibility(visibility)
        if self.visibility == "private" and self.agent_id is None:
            raise ValidationError("visibility", "a private turn needs an agent_id (its owner)")
