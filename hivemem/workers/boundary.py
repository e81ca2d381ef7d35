"""The boundary stage: embedded turns -> episodes, in seq order, with any number of workers.

See `hivemem.store.episodes` for how the order holds across workers and crashes, and
`hivemem.domain.episode` for the rules themselves.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

import structlog

from hivemem.domain.episode import (
    BoundaryPolicy,
    Episode,
    SessionEpisodes,
    step_control,
    step_turn,
)
from hivemem.domain.names import SessionName
from hivemem.pipeline.messages import (
    EmbeddedEntry,
    EmbeddedItem,
    EmbeddedTurn,
    EpisodeControl,
    decode_embedded,
    embedded_from_json,
    embedded_items,
)
from hivemem.pipeline.topology import Topology
from hivemem.store.episodes import Advance, EpisodeStore
from hivemem.store.streams import StreamEntry
from hivemem.workers.currency import CurrencyKeeper
from hivemem.workers.stream import WorkerKind

log = structlog.get_logger(__name__)


def decode_item(entry: StreamEntry) -> EmbeddedEntry:
    """An embedded-stream entry: a turn with its vector, a control, or a skip."""
    return decode_embedded(entry.fields)


class BoundaryHandler:
    def __init__(self, store: EpisodeStore, policy: BoundaryPolicy,
                 currency: CurrencyKeeper | None = None) -> None:
        self.store = store
        self.policy = policy
        # Keeps the slot table from the same ordered run of entries (None: not kept).
        self.currency = currency

    def __call__(self, items: list[EmbeddedEntry],
                 entry_ids: Sequence[str] | None = None) -> None:
        """`entry_ids`: the entries' embedded-stream ids (the worker's; checked against a
        forget's mark: a direct call without them checks none)."""
        # The buffer keeps each entry's fields as JSON until its predecessors are in.
        by_session: dict[SessionName, dict[str, EmbeddedItem]] = defaultdict(dict)
        sources: dict[SessionName, dict[str, str]] = defaultdict(dict)
        for i, entry in enumerate(items):
            for item in embedded_items(entry):
                by_session[item.name][str(item.seq)] = item
                if entry_ids is not None:
                    sources[item.name][str(item.seq)] = entry_ids[i]
        for name, entries in by_session.items():
            self.advance(name, entries, sources.get(name))

    def advance(self, name: SessionName, entries: dict[str, EmbeddedItem],
                sources: dict[str, str] | None = None) -> None:
        """Offer `entries`, and while this worker holds the session's lease move its
        pointer as far as the entries in hand and the buffer allow: two scripts per step
        (`EpisodeStore`); an entry's JSON is sent only if it has to wait in the buffer.
        `sources`: their embedded-stream entry ids (by seq), for the forget mark's check."""
        offered = [(f, e.seq) for f, e in entries.items()]
        token: str | None = None
        while True:
            step = self.store.begin(name, offered, lambda f: entries[f].to_json(),
                                    token, sources)
            if step is None:
                return  # the holder's commit sees what was just buffered and goes on
            token = step.token
            try:
                more = self._advance_locked(name, step, entries)
            except BaseException:
                self.store.release(name, token)
                raise
            if more == 0:
                return
            if more == 1:
                offered = []  # all in hand was consumed; the rest is in the buffer
            # -1: the lease was lost before the commit; what this call consumed was never
            # buffered, so offer it again (buffered now, or taken back under a new lease).
            token = None if more < 0 else token

    def sweep(self, partitions: list[int]) -> None:
        """Advance the sessions of `partitions` whose buffered entries no lease will drain
        (the holder died, or an outage fell between its begin and its commit): the stage's
        periodic housekeeping, so that a session's last entries never wait for traffic."""
        for partition in partitions:
            for name in self.store.waiting(partition):
                if self.store.sweep_check(name):
                    log.info("boundary.swept", session_id=name)
                    self.advance(name, {})

    def _advance_locked(
        self, name: SessionName, step: Advance, entries: dict[str, EmbeddedItem]
    ) -> int:
        started = time.perf_counter()
        state = step.state
        consumed: list[str] = []
        from_buffer: list[str] = []
        closed: list[Episode] = []
        markers: Counter[str] = Counter()
        applied: list[EmbeddedItem] = []
        for field, raw in step.ready:
            item = entries.get(field) if raw is None else embedded_from_json(raw)
            if item is None:  # cannot happen: '' marks an entry handed in by this call
                break
            closed.extend(self._apply(state, item, markers))
            applied.append(item)
            consumed.append(field)
            if raw is not None:
                from_buffer.append(field)
        if not consumed:
            self.store.release(name, step.token)
            return 0
        if self.currency is not None:
            # Before the commit: once the pointer moves past a turn, the slot table has it
            # (`wait_until_processed` waits for the pointer). A crash in between replays
            # the run, and the keeper skips what it applied.
            self.currency.apply(name, applied, step.forgotten)
        seq = step.next_seq + len(consumed)
        outcome = self.store.commit(
            name,
            step.token,
            next_seq=seq,
            state=state,
            from_buffer=from_buffer,
            closed=closed,
            marker_counts=dict(markers),
        )
        if outcome < 0:
            # The lease expired mid-advance and another worker took over: it replays from
            # the last commit, so dropping this attempt loses nothing.
            log.warning("boundary.lease_lost", session_id=name, seq=seq)
            return outcome
        for episode in closed:
            log.info(
                "episode.closed",
                session_id=name,
                episode_id=episode.episode_id,
                turns=episode.turn_count,
                reason=episode.close_reason,
            )
        log.debug(
            "boundary.advanced",
            session_id=name,
            turns=len(consumed),
            next_seq=seq,
            ms=round((time.perf_counter() - started) * 1000, 2),
        )
        return outcome

    def _apply(
        self, state: SessionEpisodes, item: EmbeddedItem, markers: Counter[str]
    ) -> list[Episode]:
        if isinstance(item, EmbeddedTurn):
            markers.update(item.turn.markers)
            return step_turn(state, item.turn, item.vector, self.policy)
        if isinstance(item, EpisodeControl):
            return step_control(state, item.action)
        return []  # a skip: a turn the embed stage dead-lettered; the order moves past it


def boundary_kind(handler: BoundaryHandler, sweep_interval_s: float = 0.0
                  ) -> WorkerKind[EmbeddedEntry]:
    """`sweep_interval_s`: how often the worker sweeps its partitions' waiting buffers
    (`BoundaryHandler.sweep`; 0: never)."""
    stage = Topology(handler.store.keys).boundary
    return WorkerKind.of(stage, decode_item, handler, sweep=handler.sweep,
                         sweep_interval_s=sweep_interval_s, handle_delivered=handler)


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
