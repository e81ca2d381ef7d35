"""Timelines: what happened in one or more sessions, in one deterministic order.

Events: every stored turn, every episode close, every fact status or layer change (from the
audit log). Order: timestamp, then sequence (a turn's seq, the last seq of a closed episode,
an audit event's position in its log), then kind (turn, episode, fact), session and id, so two
builds of the same data always agree.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from hivemem.domain.audit import AuditEvent
from hivemem.domain.episode import Episode
from hivemem.domain.models import Turn
from hivemem.errors import ValidationError

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


# -- pages --------------------------------------------------------------------------------
# A page is the `limit` newest events older than a cursor (none: the newest). A cursor names
# the oldest event of the page before (its sort key) and, per session, the highest turn seq
# still to read: a session's turns carry rising timestamps as their seqs rise (the log
# numbers them as they come), so every turn older than the page's oldest event is below the
# turns the page showed, and the next page reads from there, not from the session's end.

SortKey = tuple[float, int, int, str, str]


class TimelineCursor(BaseModel):
    model_config = ConfigDict(frozen=True)

    key: SortKey
    turn_seqs: dict[str, int] = Field(default_factory=dict)

    def encode(self) -> str:
        raw = json.dumps([list(self.key), self.turn_seqs], separators=(",", ":"))
        return base64.urlsafe_b64encode(raw.encode()).decode("ascii").rstrip("=")

    @classmethod
    def decode(cls, text: str) -> TimelineCursor:
        """A cursor a page returned; anything else is a `ValidationError` on `cursor`."""
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            key, seqs = json.loads(raw)
            at, seq, rank, session_id, ref_id = key
            checked: SortKey = (float(at), _int(seq), _int(rank), _str(session_id),
                                _str(ref_id))
            if not isinstance(seqs, dict):
                raise TypeError
            return cls(key=checked, turn_seqs={_str(k): _int(v) for k, v in seqs.items()})
        except (ValueError, TypeError) as exc:
            raise ValidationError("cursor", "not a cursor a timeline page returned") from exc


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError
    return value


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError
    return value


def newest_first(events: Iterable[TimelineEvent]) -> list[TimelineEvent]:
    return sorted(events, key=TimelineEvent.sort_key, reverse=True)


class TimelinePage(BaseModel):
    """The `limit` newest events older than the cursor asked with, oldest first, and the
    cursor of the page before them (None: there is none)."""

    model_config = ConfigDict(frozen=True)

    events: list[TimelineEvent]
    next_cursor: str | None = None
