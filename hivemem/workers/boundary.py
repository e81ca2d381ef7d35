"""The boundary stage: embedded turns -> episodes, in seq order, with any number of workers.

See `hivemem.store.episodes` for how the order holds across workers and crashes, and
`hivemem.domain.episode` for the rules themselves.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from typing import Any

import structlog

from hivemem.domain.episode import (
    BoundaryPolicy,
    Episode,
    SessionEpisodes,
    step_control,
    step_turn,
)
from hivemem.pipeline.messages import (
    EmbeddedEntry,
    EmbeddedTurn,
    EpisodeControl,
    decode_embedded,
    embedded_from_json,
)
from hivemem.pipeline.topology import Topology
from hivemem.store.episodes import Enqueue, EpisodeStore
from hivemem.store.streams import StreamEntry
from hivemem.workers.stream import WorkerKind

log = structlog.get_logger(__name__)


def decode_item(entry: StreamEntry) -> EmbeddedEntry:
    """An embedded-stream entry: a turn with its vector, a control, or a skip."""
    return decode_embedded(entry.fields)


class BoundaryHandler:
    def __init__(
        self, store: EpisodeStore, policy: BoundaryPolicy, enqueue: Enqueue | None = None
    ) -> None:
        self.store = store
        self.policy = policy
        self.enqueue = enqueue

    def __call__(self, items: list[EmbeddedEntry]) -> None:
        # The buffer keeps each entry's fields as JSON until its predecessors are in.
        by_session: dict[str, list[tuple[str, int, str]]] = defaultdict(list)
        for item in items:
            by_session[item.session_id].append((str(item.seq), item.seq, item.to_json()))
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
            closed.extend(self._apply(state, embedded_from_json(raw), markers))
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
        self, state: SessionEpisodes, item: EmbeddedEntry, markers: Counter[str]
    ) -> list[Episode]:
        if isinstance(item, EmbeddedTurn):
            markers.update(item.turn.markers)
            return step_turn(state, item.turn, item.vector, self.policy)
        if isinstance(item, EpisodeControl):
            return step_control(state, item.action)
        return []  # a skip: a turn the embed stage dead-lettered; the order moves past it


def boundary_kind(handler: BoundaryHandler) -> WorkerKind[EmbeddedEntry]:
    stage = Topology(handler.store.keys).boundary
    return WorkerKind.of(stage, decode_item, handler)


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
