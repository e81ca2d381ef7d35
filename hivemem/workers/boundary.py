"""The boundary stage: embedded turns -> episodes, in seq order, with any number of workers.

See `hivemem.store.episodes` for how the order holds across workers and crashes, and
`hivemem.domain.episode` for the rules themselves.
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

import structlog

from hivemem.domain.episode import (
    BoundaryPolicy,
    Episode,
    SessionEpisodes,
    decode_vector,
    step_control,
    step_turn,
)
from hivemem.store.episodes import Enqueue, EpisodeStore
from hivemem.store.state import turn_from_json
from hivemem.store.streams import StreamEntry
from hivemem.workers.stream import WorkerKind

GROUP = "boundary"
log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class BoundaryItem:
    """One entry of the embedded stream: a turn with its vector, a control, or a skip."""

    session_id: str
    seq: int
    payload: str  # what the buffer keeps: the entry's fields as JSON


def decode_item(entry: StreamEntry) -> BoundaryItem:
    f = entry.fields
    kind = f["kind"]
    seq = int(f["seq"])
    if kind == "turn":
        session_id = json.loads(f["turn"])["session_id"]
    elif kind in ("control", "skip"):
        session_id = f["session_id"]
    else:
        raise ValueError(f"unknown entry kind {kind!r}")
    if seq < 1:
        raise ValueError(f"bad seq {seq}")
    return BoundaryItem(session_id, seq, json.dumps(f, separators=(",", ":")))


class BoundaryHandler:
    def __init__(
        self, store: EpisodeStore, policy: BoundaryPolicy, enqueue: Enqueue | None = None
    ) -> None:
        self.store = store
        self.policy = policy
        self.enqueue = enqueue

    def __call__(self, items: list[BoundaryItem]) -> None:
        by_session: dict[str, list[tuple[str, int, str]]] = defaultdict(list)
        for item in items:
            by_session[item.session_id].append((str(item.seq), item.seq, item.payload))
        for session_id, buffered in by_session.items():
            self.store.buffer(session_id, buffered)
            self.advance(session_id)

    def advance(self, session_id: str) -> None:
        """Take the session's lease and move its pointer as far as the buffer allows."""
        while True:
            token = self.store.acquire(session_id)
            if token is None:
                return  # the holder re-checks the buffer after it releases
            try:
                self._advance_locked(session_id, token)
            finally:
                self.store.release(session_id, token)
            if not self.store.has_ready(session_id):
                return

    def _advance_locked(self, session_id: str, token: str) -> None:
        started = time.perf_counter()
        next_seq, state, buffer = self.store.load(session_id)
        seq = next_seq
        consumed: list[str] = []
        closed: list[Episode] = []
        markers: Counter[str] = Counter()
        while (raw := buffer.get(str(seq))) is not None:
            closed.extend(self._apply(state, json.loads(raw), markers))
            consumed.append(str(seq))
            seq += 1
        if not consumed:
            return
        ok = self.store.commit(
            session_id,
            token,
            next_seq=seq,
            state=state,
            consumed=consumed,
            closed=closed,
            marker_counts=dict(markers),
            enqueue=self.enqueue,
        )
        if not ok:
            # The lease expired mid-advance and another worker took over: it replays from
            # the last commit, so dropping this attempt loses nothing.
            log.warning("boundary.lease_lost", session_id=session_id, seq=seq)
            return
        for episode in closed:
            log.info(
                "episode.closed",
                session_id=session_id,
                episode_id=episode.episode_id,
                turns=episode.turn_count,
                reason=episode.close_reason,
            )
        log.debug(
            "boundary.advanced",
            session_id=session_id,
            turns=len(consumed),
            next_seq=seq,
            ms=round((time.perf_counter() - started) * 1000, 2),
        )

    def _apply(
        self, state: SessionEpisodes, fields: dict[str, Any], markers: Counter[str]
    ) -> list[Episode]:
        kind = fields["kind"]
        if kind == "turn":
            turn = turn_from_json(fields["turn"], int(fields["seq"]))
            vector = decode_vector(fields["vec"]) if fields.get("vec") else None
            markers.update(turn.markers)
            return step_turn(state, turn, vector, self.policy)
        if kind == "control":
            return step_control(state, fields["action"])
        return []  # "skip": a turn the embed stage dead-lettered; the order moves past it


def boundary_kind(handler: BoundaryHandler, stream: str) -> WorkerKind[BoundaryItem]:
    return WorkerKind(name="boundary", stream=stream, group=GROUP, decode=decode_item,
                      handle=handler)


def policy_from(settings: Any) -> BoundaryPolicy:
    """BoundaryPolicy from `EpisodeSettings`."""
    return BoundaryPolicy(
        max_turns=settings.max_turns,
        max_gap_seconds=settings.max_gap_seconds,
        topic_shift_threshold=settings.topic_shift_threshold,
        topic_min_tokens=settings.topic_min_tokens,
        topic_min_turns=settings.topic_min_turns,
        min_episode_turns=settings.min_episode_turns,
    )
