"""Validation of everything a caller hands the SDK, before anything is written."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from hivemem.config import IngestSettings
from hivemem.domain.ids import ID_PATTERN, check_id
from hivemem.domain.models import BUILTIN_MARKERS, Role
from hivemem.domain.scope import DEFAULT_NAMESPACE, Visibility, check_namespace, check_visibility
from hivemem.domain.tokens import estimate_tokens
from hivemem.errors import ValidationError

_CUSTOM_MARKER = re.compile(r"^custom:[A-Za-z0-9_.-]{1,64}$")
# Every marker a turn may carry, as one pattern (the API's schema states it).
MARKER_PATTERN = r"^(decision|constraint|failure|goal|custom:[A-Za-z0-9_.-]{1,64})$"

# What every vector store can hold, checked before anything is written. qdrant-edge stored
# metadata nested ~124 levels and then could not replay its WAL (the embedded store no longer
# opened for anyone); 16 levels leave a wide margin and cover any real use.
MAX_METADATA_DEPTH = 16
MAX_METADATA_NODES = 2_000  # every key, value and container counts one
MAX_METADATA_KEY_CHARS = 256
MAX_MARKERS = 32
# Qdrant keeps integers as signed 64-bit: a bigger one came back as a float.
INT_RANGE = (-(2**63), 2**63 - 1)


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
            if len(out) > MAX_MARKERS:
                raise ValidationError("markers", f"at most {MAX_MARKERS} markers per turn")
    return tuple(out)


def check_metadata(value: Mapping[str, Any] | None, max_bytes: int) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValidationError("metadata", f"must be a mapping, got {type(value).__name__}")
    _check_structure(value)
    try:
        encoded = json.dumps(value, ensure_ascii=False, allow_nan=False)
        size = len(encoded.encode("utf-8"))
    except (TypeError, ValueError, RecursionError, UnicodeEncodeError) as exc:
        raise ValidationError("metadata", f"must be JSON-serialisable: {exc}") from None
    if size > max_bytes:
        raise ValidationError("metadata", f"is {size} bytes as JSON; the limit is {max_bytes}")
    decoded: dict[str, Any] = json.loads(encoded)  # a plain-JSON copy the caller cannot mutate
    return decoded


def _check_structure(root: Mapping[str, Any]) -> None:
    """Depth, node count and key sizes, iteratively (a cyclic or absurdly deep value fails
    here, not in `json.dumps` or in a store's decoder)."""
    nodes = 0
    stack: list[tuple[object, int]] = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if nodes > MAX_METADATA_NODES:
            raise ValidationError(
                "metadata", f"holds more than {MAX_METADATA_NODES} keys and values")
        if isinstance(node, Mapping):
            children: Iterable[object] = node.values()
            for key in node:
                if isinstance(key, str) and len(key) > MAX_METADATA_KEY_CHARS:
                    raise ValidationError(
                        "metadata", f"has a key longer than {MAX_METADATA_KEY_CHARS} characters")
                nodes += 1
        elif isinstance(node, list | tuple):
            children = node
        else:
            if (isinstance(node, int) and not isinstance(node, bool)
                    and not INT_RANGE[0] <= node <= INT_RANGE[1]):
                raise ValidationError(
                    "metadata", "holds an integer outside the signed 64-bit range")
            continue
        if depth > MAX_METADATA_DEPTH:
            raise ValidationError(
                "metadata", f"is nested too deep: at most {MAX_METADATA_DEPTH} levels")
        stack.extend((child, depth + 1) for child in children)


def check_timestamp(value: object) -> datetime:
    if value is None:
        return datetime.now(UTC)
    if not isinstance(value, datetime):
        raise ValidationError("timestamp", f"must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValidationError("timestamp", "must be timezone-aware (e.g. datetime.now(UTC))")
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValidationError("timestamp", "is outside the representable range in UTC"
                              " (years 1-9999)") from None


# uuid4's version nibble is 4; its variant bits are 10 (the 17th hex digit is 8, 9, a or b).
_VARIANT = {f"{i:x}": f"{8 | (i & 3):x}" for i in range(16)}


def new_turn_id() -> str:
    """A random turn id: what ``uuid.uuid4().hex`` returns (a version-4 UUID in 32 hex
    digits, the same bits random), without building a `UUID` (a fifth of the time)."""
    h = os.urandom(16).hex()
    return f"{h[:12]}4{h[13:16]}{_VARIANT[h[16]]}{h[17:]}"


def check_turn_id(value: object) -> str:
    if value is None:
        return new_turn_id()
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


_ID = ID_PATTERN.fullmatch
_ROLES: dict[str, Role] = {r.value: r for r in Role}


class TurnDraft:
    """A validated turn that has no sequence number yet.

    Every field is checked by its `check_*` function above; the common case (plain strings,
    ASCII content, no markers or metadata) is accepted inline first, with exactly the value
    that function would return, and anything else goes to the function, which returns the
    same value or raises the same error: the inline tests only skip calls (ingest_many
    validates a batch of 100 turns in about a third of the time)."""

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
        self.session_id = (
            session_id if type(session_id) is str and _ID(session_id)
            else check_id("session_id", session_id))
        self.role = (type(role) is str and _ROLES.get(role)) or check_role(role)
        limit = settings.max_content_bytes
        self.content = (
            content if type(content) is str and content.isascii() and len(content) <= limit
            and content.strip() else check_content(content, limit))
        self.agent_id = (
            None if agent_id is None
            else agent_id if type(agent_id) is str and _ID(agent_id)
            else check_id("agent_id", agent_id))
        self.markers = () if markers is None else check_markers(markers)
        self.metadata = (
            {} if metadata is None else check_metadata(metadata, settings.max_metadata_bytes))
        self.timestamp = datetime.now(UTC) if timestamp is None else check_timestamp(timestamp)
        self.turn_id = (
            new_turn_id() if turn_id is None
            else turn_id if type(turn_id) is str and _ID(turn_id)
            else check_id("turn_id", turn_id))
        self.token_count = estimate_tokens(self.content)
        self.namespace: str = (
            DEFAULT_NAMESPACE if namespace is None
            else namespace if type(namespace) is str and _ID(namespace)
            else check_namespace(namespace))
        self.visibility: Visibility = check_visibility(visibility)
        if self.visibility == "private" and self.agent_id is None:
            raise ValidationError("visibility", "a private turn needs an agent_id (its owner)")
