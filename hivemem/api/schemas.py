"""Request and response bodies of the HTTP API (pydantic; they make the OpenAPI spec).

Request models check shapes and sizes only; the SDK's validators (`ValidationError` with the
field) still decide what a valid turn or query is, so the API and the SDK agree.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from hivemem.domain.ids import ID_PATTERN
from hivemem.domain.models import SessionStats, StageLag
from hivemem.domain.turn import MARKER_PATTERN, MAX_MARKERS

Visibility = Literal["private", "shared"]
Preset = Literal["cheap", "balanced", "high_recall", "agent_state"]
ID_REGEX = ID_PATTERN.pattern
Id = Annotated[str, Field(pattern=ID_REGEX, max_length=128)]
Marker = Annotated[str, Field(pattern=MARKER_PATTERN)]
# Not only whitespace (a JSON Schema pattern matches anywhere in the string).
NOT_BLANK = r"\S"
# A private turn belongs to someone: with a namespace key, name the agent (an agent key
# supplies its own). Stated in the schema so that clients and schemathesis know it.
_PRIVATE_NEEDS_AGENT: dict[str, Any] = {
    "if": {"properties": {"visibility": {"const": "private"}}, "required": ["visibility"]},
    "then": {"required": ["agent_id"], "properties": {"agent_id": {"type": "string"}}},
}


def _date_time_text(value: object) -> object:
    """The spec says ``format: date-time``: a number (epoch seconds) is not one."""
    if value is not None and not isinstance(value, str | datetime):
        raise ValueError("must be an RFC 3339 date-time string")
    return value


DateTimeText = Annotated[datetime, BeforeValidator(_date_time_text)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TurnIn(_Body):
    model_config = ConfigDict(extra="forbid", json_schema_extra=_PRIVATE_NEEDS_AGENT)

    role: Literal["user", "assistant", "system", "tool"]
    content: str = Field(min_length=1, pattern=NOT_BLANK,
                         description="The message text (size limit from config)")
    agent_id: Id | None = Field(
        default=None, description="Who wrote it (an agent key: its agent, or omitted)")
    visibility: Visibility = Field(
        default="shared", description="shared with the namespace, or private to agent_id"
    )
    markers: list[Marker] | None = Field(default=None, max_length=MAX_MARKERS)
    metadata: dict[str, Any] | None = Field(
        default=None, description="JSON object: at most 16 levels deep, 2000 keys and values,"
        " keys up to 256 characters, integers in 64 bits, 16 KiB (config) as JSON")
    timestamp: DateTimeText | None = Field(
        default=None, description="timezone-aware RFC 3339; default now")
    turn_id: Id | None = Field(default=None, description="Your id: a retry with it is a no-op")


class BatchTurnIn(TurnIn):
    session_id: Id


class BatchIn(_Body):
    turns: list[BatchTurnIn] = Field(min_length=1, description="at most api.max_batch (500)")


class TurnOut(BaseModel):
    session_id: str
    turn_id: str
    seq: int
    duplicate: bool
    namespace: str
    visibility: Visibility
    agent_id: str | None
    token_count: int


class BatchOut(BaseModel):
    turns: list[TurnOut]


class RecallIn(_Body):
    query: str = Field(min_length=1, max_length=8192, pattern=NOT_BLANK)
    agent_id: Id | None = Field(
        default=None, description="Who asks: its private memories join the shared ones"
    )
    token_budget: int | None = Field(default=None, gt=0)
    preset: Preset | None = None
    limit: int | None = Field(default=None, gt=0)
    include_history: bool = False
    explain: bool = False
    related_sessions: list[Id] = Field(default_factory=list, max_length=20)


class RecallOut(BaseModel):
    preset: str
    token_budget: int
    used_tokens: int
    items: list[dict[str, Any]]
    excluded: list[dict[str, Any]]
    context: str = Field(description="The items as prompt text, oldest first")


class CloseIn(_Body):
    session_end: bool = Field(default=False, description="The session is over")


class CloseOut(BaseModel):
    session_id: str
    seq: int


class StatsOut(BaseModel):
    """`SessionStats` with the pending count (its property) as a field."""

    session_id: str
    turns_enqueued: int
    turns_processed: int
    turns_dead_lettered: int
    turns_pending: int
    last_seq: int
    first_activity: datetime | None = None
    last_activity: datetime | None = None
    turns_assigned: int = 0
    episodes: int = 0
    open_episode_turns: int = 0
    markers: dict[str, int] = Field(default_factory=dict)
    stages: list[StageLag] = Field(default_factory=list)

    @classmethod
    def of(cls, stats: SessionStats) -> StatsOut:
        return cls(**stats.model_dump(), turns_pending=stats.turns_pending)


class FactOut(BaseModel):
    fact_id: str
    session_id: str
    content: str
    kind: str
    subject: str
    status: str
    confidence: float
    stated_by: str | None = Field(description="The agent that stated or decided it")
    visibility: Visibility
    valid_from: datetime
    valid_to: datetime | None
    superseded_by: str | None
    source_turn_ids: list[str]
    version: int


class FactsOut(BaseModel):
    facts: list[FactOut]


class TimelineOut(BaseModel):
    events: list[dict[str, Any]] = Field(
        description="at, seq, kind (turn, episode, fact), session_id, ref_id, actor, summary")
    next_cursor: str | None = Field(
        default=None, description="with `limit` or `cursor`: pass it as `cursor` for the page"
        " of older events (null: there are none)")


class TracesOut(BaseModel):
    traces: list[dict[str, Any]]


class Health(BaseModel):
    status: Literal["ok", "unavailable"]
    checks: dict[str, str] = Field(default_factory=dict)


class Problem(BaseModel):
    """RFC 9457 problem details."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str | None = None
    instance: str | None = None
    field: str | None = Field(default=None, description="The offending input, when one is")
