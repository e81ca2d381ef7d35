"""Pydantic models for what crosses a boundary: stream messages, results, stats.

Messages are frozen and ignore unknown fields, so producers may upgrade before workers.
"""

from __future__ import annotations

import json
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field


class Role(StrEnum):
    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"
    TOOL = "tool"


BUILTIN_MARKERS: frozenset[str] = frozenset({"decision", "constraint", "failure", "goal"})


class Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class Turn(Message):
    """One conversation turn: what `ingest` returns and what the turns stream carries."""

    turn_id: str
    session_id: str
    agent_id: str | None = None
    role: Role
    content: str
    markers: tuple[str, ...] = ()
    metadata: dict[str, Any] = Field(default_factory=dict)
    timestamp: datetime
    seq: int = Field(ge=1)
    token_count: int = Field(ge=0)
    # True when the turn id had been ingested before: nothing new was written.
    duplicate: bool = False


SourceType = Literal["turn", "fact", "episode"]


class ScoreComponents(BaseModel):
    """Why an item scored what it did; `final` is the weighted sum used for ranking."""

    model_config = ConfigDict(frozen=True)

    dense: float = 0.0
    recency: float = 0.0
    marker: float = 0.0
    episode: float = 0.0
    stale: float = 0.0  # 1.0: the turn stated a fact that has since been superseded
    final: float = 0.0

    def reasons(self) -> list[str]:
        parts = [f"similarity {self.dense:.2f}"]
        if self.recency >= 0.05:
            parts.append(f"recent {self.recency:.2f}")
        if self.marker:
            parts.append("marked")
        if self.episode:
            parts.append("current episode")
        if self.stale:
            parts.append("superseded")
        return parts


class ContextItem(BaseModel):
    """One recalled item, ready to put in a prompt."""

    model_config = ConfigDict(frozen=True)

    content: str
    role: Role | None = None
    score: float
    components: ScoreComponents
    token_count: int
    source_type: SourceType
    source_id: str
    session_id: str
    agent_id: str | None = None
    seq: int | None = None
    timestamp: datetime | None = None
    markers: tuple[str, ...] = ()
    metadata: dict[str, Any] = Field(default_factory=dict)


class Control(Message):
    """An explicit episode close, ordered after the session's turn `after_seq`."""

    session_id: str
    after_seq: int = Field(ge=0)
    action: Literal["close_episode", "close_session"]


class StageLag(BaseModel):
    """A stream stage's backlog (for the whole deployment, not one session)."""

    stage: str
    stream: str
    lag: int  # entries not yet delivered to the stage's consumer group
    pending: int  # delivered, not yet acknowledged
    dead_letters: int


class SessionStats(BaseModel):
    session_id: str
    turns_enqueued: int
    turns_processed: int
    turns_dead_lettered: int
    last_seq: int
    first_activity: datetime | None = None
    last_activity: datetime | None = None
    # Filled by the boundary stage.
    turns_assigned: int = 0  # seqs (turns and controls) the boundary stage has passed
    episodes: int = 0
    open_episode_turns: int = 0
    markers: dict[str, int] = Field(default_factory=dict)
    stages: list[StageLag] = Field(default_factory=list)

    @property
    def turns_pending(self) -> int:
        return max(0, self.turns_enqueued - self.turns_processed - self.turns_dead_lettered)


class DeadLetter(BaseModel):
    """An entry a worker gave up on, with why."""

    model_config = ConfigDict(frozen=True)

    stream: str
    group: str
    entry_id: str
    fields: dict[str, str]
    error: str
    deliveries: int
    failed_at: datetime


class TurnFields(Protocol):
    """What a turn looks like before and after it has a seq (`TurnDraft` and `Turn`)."""

    turn_id: str
    session_id: str
    agent_id: str | None
    role: Role
    content: str
    markers: tuple[str, ...]
    metadata: dict[str, Any]
    timestamp: datetime
    token_count: int


def wire_json(turn: TurnFields) -> str:
    """The turn as the stream and the recent window carry it (the seq travels beside it)."""
    return json.dumps(
        {
            "turn_id": turn.turn_id,
            "session_id": turn.session_id,
            "agent_id": turn.agent_id,
            "role": turn.role.value,
            "content": turn.content,
            "markers": list(turn.markers),
            "metadata": turn.metadata,
            "timestamp": turn.timestamp.isoformat(),
            "token_count": turn.token_count,
        },
        ensure_ascii=False,
        separators=(",", ":"),
    )
