"""What the remote handle (`hivemem.producer.remote`) sends and how it reads the answers:
the turn it drafts (named and dated by the client, so the `Turn` it returns is the stored one
and a resend is a no-op), session paths, recall results, what HTTP cannot carry."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from hivemem.domain.ids import check_id
from hivemem.domain.models import ContextItem, ExcludedItem, RecallResult, Turn
from hivemem.domain.recall.policy import RecallPolicy
from hivemem.domain.turn import (
    check_content,
    check_markers,
    check_metadata,
    check_role,
    check_timestamp,
    check_turn_id,
)
from hivemem.errors import ValidationError
from hivemem.producer.remote_http import segment

UNLIMITED = sys.maxsize  # the server applies its own size limits
# The fields a batch turn may carry (`MemoryClient.ingest_many`'s `TurnInput`).
TURN_KEYS = frozenset({"session_id", "role", "content", "agent_id", "markers", "metadata",
                        "timestamp", "turn_id", "namespace", "visibility"})
WAIT_SLACK_S = 10.0  # a long poll's read timeout beyond the wait it asks for
EXPORT_COUNTS = "X-Hivemem-Export-Counts"  # as `hivemem.api.transfer_routes` sends it


def unsupported(field: str, why: str) -> ValidationError:
    return ValidationError(field, f"is not served by the HTTP API: {why}")


def session_path(session_id: str, tail: str = "") -> str:
    check_id("session_id", session_id)
    return f"/v1/sessions/{segment(session_id)}{tail}"


class Draft:
    """A turn as the client sends it: the client names it and dates it, so the `Turn` it
    returns is the one the server stored, and a resend is a no-op."""

    def __init__(self, raw: Mapping[str, Any], agent_id: str | None) -> None:
        self.session_id = check_id("session_id", raw.get("session_id"))
        self.role = check_role(raw.get("role"))
        self.content = check_content(raw.get("content"), UNLIMITED)
        self.markers = check_markers(raw.get("markers"))
        self.metadata = check_metadata(raw.get("metadata"), UNLIMITED)
        self.timestamp = check_timestamp(raw.get("timestamp"))
        self.turn_id = check_turn_id(raw.get("turn_id"))
        self.visibility = raw.get("visibility", "shared")
        self.agent_id = agent_id

    def body(self) -> dict[str, Any]:
        return {
            "role": self.role.value, "content": self.content, "agent_id": self.agent_id,
            "visibility": self.visibility, "markers": list(self.markers),
            "metadata": self.metadata, "timestamp": self.timestamp.isoformat(),
            "turn_id": self.turn_id,
        }

    def turn(self, out: Mapping[str, Any]) -> Turn:
        return Turn(
            turn_id=out["turn_id"], session_id=out["session_id"], agent_id=out["agent_id"],
            role=self.role, content=self.content, markers=self.markers,
            metadata=self.metadata, timestamp=self.timestamp, namespace=out["namespace"],
            visibility=out["visibility"], seq=out["seq"], token_count=out["token_count"],
            duplicate=out["duplicate"],
        )


def recall_result(data: Mapping[str, Any]) -> RecallResult:
    return RecallResult(
        [ContextItem.model_validate(i) for i in data["items"]],
        token_budget=data["token_budget"], preset=data["preset"],
        excluded=[ExcludedItem.model_validate(e) for e in data["excluded"]],
    )


def preset_name(preset: str | RecallPolicy | None) -> str | None:
    if isinstance(preset, RecallPolicy):
        raise unsupported("preset", "send a preset name, not a RecallPolicy object")
    return preset
