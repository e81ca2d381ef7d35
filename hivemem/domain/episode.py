"""Episode boundaries, as a pure step function over one session's items in seq order.

A turn is first assigned to the episode it belongs to, then the boundary is decided:
- a time gap or a topic shift *before* a turn means the open episode ends before it, so the
  turn starts the next episode;
- a tool result, or reaching `max_turns`, ends the episode *with* the turn in it;
- an explicit close (`close_episode`, `close_session`) ends the open episode at that point.
An episode that would close on an automatic rule with fewer than `min_episode_turns` turns is
not closed: its turns carry forward into the next episode (they live in the persisted open
episode, so a crash loses nothing). Explicit closes always close.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from hivemem.domain.models import Role, Turn
from hivemem.domain.names import split_session_name
from hivemem.domain.scope import owner_of

# The one vector codec (centroids are stored as its text form).
from hivemem.pipeline.vectors import decode_vector, encode_vector

CloseReason = Literal["max_turns", "time_gap", "topic_shift", "tool_result", "manual", "session"]
ControlAction = Literal["close_episode", "close_session"]


@dataclass(frozen=True, slots=True)
class BoundaryPolicy:
    max_turns: int = 6
    max_gap_seconds: float = 1800.0
    # Cosine between the new turn and the open episode's centroid below which the topic
    # changed. Short turns ("ok", "thanks") never trigger it: they carry little topic.
    topic_shift_threshold: float = 0.3
    topic_min_tokens: int = 8
    topic_min_turns: int = 3
    min_episode_turns: int = 2


class OpenEpisode(BaseModel):
    """The episode being built for a session; persisted in Redis between batches."""

    model_config = ConfigDict(extra="ignore")

    index: int = Field(ge=1)
    turn_ids: list[str] = Field(default_factory=list)
    seq_start: int = 0
    seq_end: int = 0
    started_at: datetime | None = None
    ended_at: datetime | None = None
    # max(previous, current) timestamp: a turn whose clock goes backwards cannot open a gap.
    last_ts: datetime | None = None
    markers: list[str] = Field(default_factory=list)
    agent_ids: list[str] = Field(default_factory=list)
    centroid_sum: str | None = None  # base64 float32: the sum of the turns' unit vectors
    carried: int = 0  # how many times a short episode was carried forward into this one
    namespace: str = "default"
    # Agents whose private turns are in it (`hivemem.domain.scope.owner_of` decides who sees it).
    private_agents: list[str] = Field(default_factory=list)

    @property
    def size(self) -> int:
        return len(self.turn_ids)

    def centroid(self) -> npt.NDArray[np.float32] | None:
        if self.centroid_sum is None:
            return None
        total = decode_vector(self.centroid_sum)
        norm = float(np.linalg.norm(total))
        return total / norm if norm > 0 else None

    def add(self, turn: Turn, vector: npt.NDArray[np.float32] | None) -> None:
        if not self.turn_ids:
            self.seq_start = turn.seq
            self.started_at = turn.timestamp
        self.turn_ids.append(turn.turn_id)
        self.seq_end = turn.seq
        self.ended_at = turn.timestamp
        self.last_ts = turn.timestamp if self.last_ts is None else max(self.last_ts, turn.timestamp)
        for marker in turn.markers:
            if marker not in self.markers:
                self.markers.append(marker)
        if turn.agent_id and turn.agent_id not in self.agent_ids:
            self.agent_ids.append(turn.agent_id)
        self.namespace = turn.namespace
        if turn.visibility == "private" and turn.agent_id not in self.private_agents:
            self.private_agents.append(turn.agent_id or "")
        if vector is not None:
            if self.centroid_sum is not None:
                vector = decode_vector(self.centroid_sum) + vector
            self.centroid_sum = encode_vector(vector)


class Episode(BaseModel):
    """A closed episode: what reflection turns into facts."""

    model_config = ConfigDict(frozen=True)

    episode_id: str
    session_id: str
    index: int
    turn_ids: tuple[str, ...]
    seq_start: int
    seq_end: int
    started_at: datetime
    ended_at: datetime
    close_reason: CloseReason
    markers: tuple[str, ...] = ()
    agent_ids: tuple[str, ...] = ()
    carried: int = 0
    centroid: str | None = None  # base64 float32, unit length
    namespace: str = "default"
    # Private (to agent_id) when any of its turns is private: see `hivemem.domain.scope.owner_of`.
    visibility: Literal["private", "shared"] = "shared"
    agent_id: str | None = None

    @property
    def turn_count(self) -> int:
        return len(self.turn_ids)


@dataclass(slots=True)
class SessionEpisodes:
    """One session's boundary state: the open episode and how many episodes closed.
    `session_id`: the session's internal name (`hivemem.domain.names`: episode ids derive
    from it, so the same id in two namespaces names different episodes)."""

    session_id: str
    closed_count: int = 0
    open: OpenEpisode | None = None


def _close(state: SessionEpisodes, reason: CloseReason, ep_id: str) -> Episode | None:
    ep = state.open
    if ep is None or not ep.turn_ids:
        return None
    assert ep.started_at is not None and ep.ended_at is not None
    centroid = ep.centroid()
    owner = owner_of(
        {"visibility": "private", "agent_id": agent or None} for agent in ep.private_agents
    )
    closed = Episode(
        episode_id=ep_id,
        session_id=split_session_name(state.session_id)[1],
        index=ep.index,
        turn_ids=tuple(ep.turn_ids),
        seq_start=ep.seq_start,
        seq_end=ep.seq_end,
        started_at=ep.started_at,
        ended_at=ep.ended_at,
        close_reason=reason,
        markers=tuple(ep.markers),
        agent_ids=tuple(ep.agent_ids),
        carried=ep.carried,
        centroid=None if centroid is None else encode_vector(centroid),
        namespace=ep.namespace,
        visibility=owner.visibility,
        agent_id=owner.agent_id,
    )
    state.closed_count += 1
    state.open = None
    return closed


def _auto_close(
    state: SessionEpisodes, reason: CloseReason, policy: BoundaryPolicy, ep_id: str
) -> Episode | None:
    ep = state.open
    if ep is None:
        return None
    if ep.size < policy.min_episode_turns:
        ep.carried += 1  # too short to stand alone: it carries forward into the next one
        return None
    return _close(state, reason, ep_id)


def _topic_shift(
    ep: OpenEpisode, turn: Turn, vector: npt.NDArray[np.float32] | None, policy: BoundaryPolicy
) -> bool:
    if vector is None or ep.size < policy.topic_min_turns:
        return False
    if turn.token_count < policy.topic_min_tokens:
        return False
    centroid = ep.centroid()
    if centroid is None:
        return False
    return float(centroid @ vector) < policy.topic_shift_threshold


_EPISODE_NAMESPACE = uuid.UUID("0b7e2a52-5d0e-4c3c-8d57-3c1f3e1a9b64")


def episode_id(session_id: str, index: int) -> str:
    """Deterministic: a replayed boundary decision names the same episode. `session_id`:
    the session's internal name (`hivemem.domain.names`)."""
    return uuid.uuid5(_EPISODE_NAMESPACE, f"episode/{session_id}/{index}").hex


def next_index(state: SessionEpisodes) -> int:
    return state.closed_count + 1


def step_turn(
    state: SessionEpisodes,
    turn: Turn,
    vector: npt.NDArray[np.float32] | None,
    policy: BoundaryPolicy,
) -> list[Episode]:
    """Assign `turn` to its episode, then decide the boundary. Returns closed episodes."""
    closed: list[Episode] = []
    ep = state.open
    if ep is not None and ep.turn_ids:
        reason: CloseReason | None = None
        assert ep.last_ts is not None
        gap = (turn.timestamp - ep.last_ts).total_seconds()
        if gap >= policy.max_gap_seconds:
            reason = "time_gap"
        elif _topic_shift(ep, turn, vector, policy):
            reason = "topic_shift"
        if reason == "time_gap":
            # After a long pause even a short episode stands alone: carrying it forward would
            # glue turns from days apart into one episode.
            done = _close(state, reason, episode_id(state.session_id, ep.index))
            if done is not None:
                closed.append(done)
        elif reason is not None:
            done = _auto_close(state, reason, policy, episode_id(state.session_id, ep.index))
            if done is not None:
                closed.append(done)
    if state.open is None:
        state.open = OpenEpisode(index=next_index(state))
    state.open.add(turn, vector)
    after: CloseReason | None = None
    if turn.role == Role.TOOL:
        after = "tool_result"
    elif state.open.size >= policy.max_turns:
        after = "max_turns"
    if after is not None:
        done = _auto_close(state, after, policy, episode_id(state.session_id, state.open.index))
        if done is not None:
            closed.append(done)
    return closed


def step_control(
    state: SessionEpisodes, action: ControlAction
) -> list[Episode]:
    """An explicit close: the open episode closes whatever its size."""
    if state.open is None:
        return []
    reason: CloseReason = "session" if action == "close_session" else "manual"
    done = _close(state, reason, episode_id(state.session_id, state.open.index))
    return [] if done is None else [done]
