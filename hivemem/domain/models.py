"""Pydantic models for what crosses a boundary: turns, results, stats. (Stream entries and
their codecs are `hivemem.pipeline.messages`.)

Messages are frozen and ignore unknown fields, so producers may upgrade before workers.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal, Protocol, overload

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
    # Who may see it (`hivemem.domain.scope`): the session's namespace; shared, or private
    # to agent_id.
    namespace: str = "default"
    visibility: Literal["private", "shared"] = "shared"
    seq: int = Field(ge=1)
    token_count: int = Field(ge=0)
    # True when the turn id had been ingested before: nothing new was written.
    duplicate: bool = False


_TURN_FIELDS = tuple(Turn.model_fields)
_set = object.__setattr__


def trusted_turn(
    *, turn_id: str, session_id: str, agent_id: str | None, role: Role, content: str,
    markers: tuple[str, ...], metadata: dict[str, Any], timestamp: datetime, namespace: str,
    visibility: Literal["private", "shared"], seq: int, token_count: int, duplicate: bool,
) -> Turn:
    """A `Turn` from values validated already: the very instance `Turn.model_construct`
    builds from all its fields (the same ``__dict__`` in field order, every field in
    ``model_fields_set``, no extra, no private), in a fifth of its time (model_construct
    looks every field's aliases and defaults up again: ingest_many returns a Turn per turn).
    tests/unit/test_wire_fast.py compares the two."""
    turn = Turn.__new__(Turn)
    _set(turn, "__dict__", {
        "turn_id": turn_id, "session_id": session_id, "agent_id": agent_id, "role": role,
        "content": content, "markers": markers, "metadata": metadata,
        "timestamp": timestamp, "namespace": namespace, "visibility": visibility,
        "seq": seq, "token_count": token_count, "duplicate": duplicate,
    })
    _set(turn, "__pydantic_fields_set__", set(_TURN_FIELDS))
    _set(turn, "__pydantic_extra__", None)
    _set(turn, "__pydantic_private__", None)
    return turn


SourceType = Literal["turn", "fact", "episode"]


class ScoreComponents(BaseModel):
    """Why an item scored what it did.

    `relevance` fuses `dense` (cosine) and `lexical` (BM25, scaled to the best lexical hit of
    the recall); the boosts (recency, marker, kind, episode, confidence, session) are scaled by
    how relevant the item is, so nothing irrelevant is promoted; `final` is what ranks.
    """

    model_config = ConfigDict(frozen=True)

    dense: float = 0.0
    lexical: float = 0.0
    relevance: float = 0.0
    neighbour: float = 0.0  # relevance of the best adjacent turn (context around a hit)
    # Relevance of the turn right before, when it asks something (this turn may answer it).
    answer: float = 0.0
    recency: float = 0.0
    marker: float = 0.0
    kind: float = 0.0  # the policy's weight for the item's kind (decision, goal, ...)
    episode: float = 0.0  # 1.0: in the session's open episode
    confidence: float = 0.0  # a fact's confidence
    conflict: float = 0.0  # 1.0: a fact in conflict with another
    stale: float = 0.0  # 1.0: superseded history, or a turn that stated only superseded facts
    # 1.0: another person's own slot (their home, their editor) when the query names someone
    other_person: float = 0.0
    session: float = 0.0  # 1.0: the session asked about; less for a related session
    # A fact that restates a turn it came from ranks with that turn (this is the turn's score).
    restates: float = 0.0
    final: float = 0.0

    def reasons(self) -> list[str]:
        parts = [f"similarity {self.dense:.2f}"]
        if self.lexical >= 0.05:
            parts.append(f"keywords {self.lexical:.2f}")
        if self.neighbour >= 0.05:
            parts.append(f"next to a hit {self.neighbour:.2f}")
        if self.answer >= 0.05:
            parts.append(f"answers a question {self.answer:.2f}")
        if self.recency >= 0.05:
            parts.append(f"recent {self.recency:.2f}")
        if self.marker:
            parts.append("marked")
        if self.kind:
            parts.append(f"kind {self.kind:.2f}")
        if self.episode:
            parts.append("current episode")
        if self.conflict:
            parts.append("conflict")
        if self.stale:
            parts.append("superseded")
        if 0 < self.session < 1:
            parts.append("related session")
        if self.restates:
            parts.append("restates its turn")
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
    namespace: str = "default"
    visibility: Literal["private", "shared"] = "shared"

    def render(self) -> str:
        """One prompt line: when, who, what (timestamps let temporal questions be answered)."""
        when = self.timestamp.strftime("%Y-%m-%d %H:%M") if self.timestamp else "undated"
        if self.source_type == "fact":
            status = self.metadata.get("status", "")
            flag = f" ({status})" if status and status != "active" else ""
            return f"[{when}] {self.metadata.get('kind', 'fact')}{flag}: {self.content}"
        who = self.agent_id or (self.role.value if self.role else "")
        return f"[{when}] {who}: {self.content}" if who else f"[{when}] {self.content}"


_COMPONENT_FIELDS = tuple(ScoreComponents.model_fields)
_ITEM_FIELDS = tuple(ContextItem.model_fields)


def trusted_components(values: dict[str, float]) -> ScoreComponents:
    """`ScoreComponents` from every one of its fields as Python floats, in field order
    (`values` is kept as the instance's ``__dict__``): the instance validation builds, in
    a third of its time (recall builds one per item it returns). As `trusted_turn`;
    tests/unit/test_score_table.py compares the two."""
    components = ScoreComponents.__new__(ScoreComponents)
    _set(components, "__dict__", values)
    _set(components, "__pydantic_fields_set__", set(_COMPONENT_FIELDS))
    _set(components, "__pydantic_extra__", None)
    _set(components, "__pydantic_private__", None)
    return components


def trusted_turn_item(
    *, content: str, role: Role, score: float, components: ScoreComponents,
    token_count: int, source_id: str, session_id: str, agent_id: str | None, seq: int,
    timestamp: datetime, markers: tuple[str, ...], metadata: dict[str, Any], namespace: str,
    visibility: Literal["private", "shared"],
) -> ContextItem:
    """A turn's `ContextItem` from values validated already (a stored turn's payload,
    written from a validated `Turn`): the instance `ContextItem(...)` builds from them (its
    own copy of `metadata`, every field set), in a third of its time (recall builds one
    per turn it returns). As `trusted_turn`; tests/unit/test_recall_core.py compares the
    two."""
    item = ContextItem.__new__(ContextItem)
    _set(item, "__dict__", {
        "content": content, "role": role, "score": score, "components": components,
        "token_count": token_count, "source_type": "turn", "source_id": source_id,
        "session_id": session_id, "agent_id": agent_id, "seq": seq, "timestamp": timestamp,
        "markers": markers, "metadata": dict(metadata), "namespace": namespace,
        "visibility": visibility,
    })
    _set(item, "__pydantic_fields_set__", set(_ITEM_FIELDS))
    _set(item, "__pydantic_extra__", None)
    _set(item, "__pydantic_private__", None)
    return item


ExclusionReason = Literal["budget", "threshold", "duplicate", "superseded", "quota", "limit"]


class ExcludedItem(BaseModel):
    """A candidate recall considered and left out (`recall(..., explain=True)`)."""

    model_config = ConfigDict(frozen=True)

    source_type: SourceType
    source_id: str
    session_id: str
    content: str
    score: float
    components: ScoreComponents
    token_count: int
    reason: ExclusionReason
    detail: str = ""


class RecallResult(Sequence[ContextItem]):
    """What `recall` returns: the chosen items, best first, plus how the budget was spent.

    It is a sequence of `ContextItem` (iterate, index, `len`), so code that treats recall as
    a list keeps working. `excluded` is filled when `explain=True`.
    """

    __slots__ = ("excluded", "items", "preset", "token_budget", "used_tokens")

    def __init__(
        self,
        items: list[ContextItem],
        *,
        token_budget: int,
        preset: str,
        excluded: list[ExcludedItem] | None = None,
    ) -> None:
        self.items = items
        self.excluded = excluded or []
        self.token_budget = token_budget
        self.used_tokens = sum(i.token_count for i in items)
        self.preset = preset

    @overload
    def __getitem__(self, index: int) -> ContextItem: ...

    @overload
    def __getitem__(self, index: slice) -> list[ContextItem]: ...

    def __getitem__(self, index: int | slice) -> ContextItem | list[ContextItem]:
        return self.items[index]

    def __len__(self) -> int:
        return len(self.items)

    def __eq__(self, other: object) -> bool:
        # Compares as the list of items, so `result == [...]` reads naturally.
        if isinstance(other, RecallResult):
            return self.items == other.items
        if isinstance(other, list):
            return self.items == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"RecallResult({len(self.items)} items, {self.used_tokens}/{self.token_budget}"
            f" tokens, preset={self.preset!r}, {len(self.excluded)} excluded)"
        )

    def chronological(self) -> list[ContextItem]:
        """The items in the order they happened (facts by when they became valid)."""
        epoch = datetime.min.replace(tzinfo=UTC)
        return sorted(self.items, key=lambda i: (i.timestamp or epoch, i.seq or 0))

    def render(self) -> str:
        """The context as prompt text, oldest first, one timestamped line per item."""
        return "\n".join(item.render() for item in self.chronological())

    def to_dict(self) -> dict[str, Any]:
        return {
            "preset": self.preset,
            "token_budget": self.token_budget,
            "used_tokens": self.used_tokens,
            "items": [i.model_dump(mode="json") for i in self.items],
            "excluded": [e.model_dump(mode="json") for e in self.excluded],
        }


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
    # Episodes whose reflection failed for good (newest traces); their traces say why.
    reflections_failed: list[int] = Field(default_factory=list)

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
    namespace: str
    visibility: Literal["private", "shared"]

