"""The reflector protocol: closed episode (+ known facts) in, fact actions out."""

from __future__ import annotations

from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from hivemem.domain.episode import Episode
from hivemem.domain.fact import Fact, FactAction
from hivemem.domain.models import Turn


class ReflectionRequest(BaseModel):
    model_config = ConfigDict(frozen=True)

    session_id: str
    episode: Episode
    turns: list[Turn]
    # Active facts of the session the reflector may keep / update / remove (by fact_id).
    prior_facts: list[Fact] = Field(default_factory=list)
    max_facts: int = 10

    @property
    def mode(self) -> Literal["extract", "consolidate"]:
        return "consolidate" if self.prior_facts else "extract"


class ReflectionResult(BaseModel):
    actions: list[FactAction]
    raw_output: str | None = None  # what the model said, kept for traces and failed jobs
    model: str | None = None
    # Actions the reflector did not use as written, and why (kept in the trace's `dropped`).
    dropped: list[str] = Field(default_factory=list)


class Reflector(Protocol):
    name: str

    def reflect(self, request: ReflectionRequest) -> ReflectionResult:
        """Raise `RetryLater` for transient failures (timeouts, 429, 5xx) and
        `ProviderError` (with the raw output in the message) for permanent ones."""
        ...
