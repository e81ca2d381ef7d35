"""Facts: the durable, current state reflection distils from episodes (pure models)."""

from __future__ import annotations

import uuid
from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class FactKind(StrEnum):
    DECISION = "decision"
    CONSTRAINT = "constraint"
    FAILURE = "failure"
    GOAL = "goal"
    PREFERENCE = "preference"
    FACT = "fact"


class FactStatus(StrEnum):
    ACTIVE = "active"
    SUPERSEDED = "superseded"
    ARCHIVED = "archived"
    CONFLICTED = "conflicted"


# Statuses recall shows by default: conflicted facts stay visible, flagged.
VISIBLE = (FactStatus.ACTIVE, FactStatus.CONFLICTED)


class Fact(BaseModel):
    """One versioned fact. A newer version supersedes an older one; nothing is deleted."""

    model_config = ConfigDict(extra="ignore")

    fact_id: str
    namespace: str = "default"
    session_id: str
    agent_id: str | None = None  # who stated or decided it
    # Shared with the namespace, or private to agent_id (`hivemem.domain.scope`).
    visibility: Literal["private", "shared"] = "shared"
    content: str
    kind: FactKind = FactKind.FACT
    subject: str = ""  # what the fact is about: versions of one fact share it
    confidence: float = Field(default=0.8, ge=0.0, le=1.0)
    source_turn_ids: list[str] = Field(default_factory=list)
    episode_id: str | None = None
    created_at: datetime
    valid_from: datetime
    valid_to: datetime | None = None
    superseded_by: str | None = None
    supersedes: str | None = None
    reason: str | None = None
    status: FactStatus = FactStatus.ACTIVE
    layer: str = "semantic"
    conflicts_with: list[str] = Field(default_factory=list)
    version: int = 1
    # The turns that withdrew this fact ("scrap that"): what recall shows in its place.
    retracted_by: list[str] = Field(default_factory=list)
    # Turns that only asked about, imagined or proposed another value of this fact's slot
    # ("what if we used MySQL?"): it answers them, so recall shows it in their place.
    considered_in: list[str] = Field(default_factory=list)
    considered_values: list[str] = Field(default_factory=list)  # the values they named
    # Turns that only repeat this fact's value ("Done, the hook runs autopep8"): not its
    # provenance (their scope stays theirs), but history with it when it changes.
    mentioned_in: list[str] = Field(default_factory=list)


_FACT_NAMESPACE = uuid.UUID("5b0e9c1e-44a7-4f5e-a0c3-7c1d2f6b9e30")


def fact_id_for(episode_id: str, ordinal: int) -> str:
    """Deterministic: a retried reflection of an episode writes the same fact ids."""
    return uuid.uuid5(_FACT_NAMESPACE, f"fact/{episode_id}/{ordinal}").hex


ActionOp = Literal["add", "update", "keep", "remove"]


class FactAction(BaseModel):
    """What a reflector proposes. `target` names an existing fact for update/keep/remove."""

    model_config = ConfigDict(extra="ignore")

    op: ActionOp
    target: str | None = None
    content: str | None = None
    kind: FactKind = FactKind.FACT
    subject: str = ""
    confidence: float = Field(default=0.8, ge=0.0, le=1.0)
    reason: str | None = None
    source_turn_ids: list[str] = Field(default_factory=list)
    agent_id: str | None = None
