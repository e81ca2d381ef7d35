"""Timelines: what happened in one or more sessions, in one deterministic order.

Events: every stored turn, every episode close, every fact status or layer change (from the
audit log). Order: timestamp, then sequence (a turn's seq, the last seq of a closed episode,
an audit event's position in its log), then kind (turn, episode, fact), session and id, so two
builds of the same data always agree.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from hivemem.domain.audit import AuditEvent
from hivemem.domain.episode import Episode
from hivemem.domain.models import Turn

EventKind = Literal["turn", "episode", "fact"]
KINDS: tuple[str, ...] = ("turn", "episode", "fact")
_KIND_RANK = {name: i for i, name in enumerate(KINDS)}


class TimelineEvent(BaseModel):
    model_config = ConfigDict(frozen=True)

    at: datetime
    seq: int
    kind: EventKind
    session_id: str
    ref_id: str  # the turn, episode or fact
    actor: str | None = None  # who spoke, or what changed the fact
    summary: str
    detail: dict[str, Any] = Field(default_factory=dict)

    def sort_key(self) -> tuple[float, int, int, str, str]:
        return (self.at.timestamp(), self.seq, _KIND_RANK[self.kind], self.session_id,
                self.ref_id)


def turn_event(turn: Turn) -> TimelineEvent:
    return TimelineEvent(
        at=turn.timestamp, seq=turn.seq, kind="turn", session_id=turn.session_id,
        ref_id=turn.turn_id, actor=turn.agent_id or turn.role.value, summary=turn.content,
        detail={"role": turn.role.value, "markers": list(turn.markers),
                "visibility": turn.visibility},
    )


def episode_event(episode: Episode) -> TimelineEvent:
    return TimelineEvent(
        at=episode.ended_at, seq=episode.seq_end, kind="episode",
        session_id=episode.session_id, ref_id=episode.episode_id, actor=None,
        summary=(f"episode {episode.index} closed ({episode.close_reason}):"
                 f" {episode.turn_count} turns, seq {episode.seq_start}-{episode.seq_end}"),
        detail={"index": episode.index, "close_reason": episode.close_reason,
                "markers": list(episode.markers)},
    )


def fact_event(event: AuditEvent) -> TimelineEvent:
    return TimelineEvent(
        at=event.at, seq=event.seq, kind="fact", session_id=event.session_id,
        ref_id=event.fact_id, actor=event.actor, summary=event.describe(),
        detail={"action": event.action, "from_status": event.from_status,
                "to_status": event.to_status, "from_layer": event.from_layer,
                "to_layer": event.to_layer, "cause": event.cause, "event_id": event.event_id},
    )


def order(events: Iterable[TimelineEvent]) -> list[TimelineEvent]:
    return sorted(events, key=TimelineEvent.sort_key)


def merge_timeline(
    turns: Iterable[Turn],
    episodes: Iterable[Episode],
    audit: Iterable[AuditEvent],
    *,
    kinds: Sequence[str] = KINDS,
) -> list[TimelineEvent]:
    events: list[TimelineEvent] = []
    if "turn" in kinds:
        events.extend(turn_event(t) for t in turns)
    if "episode" in kinds:
        events.extend(episode_event(e) for e in episodes)
    if "fact" in kinds:
        events.extend(fact_event(a) for a in audit)
    return order(events)
