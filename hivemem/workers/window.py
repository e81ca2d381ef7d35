"""The window stage: each turn's window vector embedded again from text, on spare capacity.

With `embedding.window_mode: refined` the embed stage writes a turn's window vector as the
mean of its own and its predecessors' vectors (no second model pass: it keeps up with the
ingest rate), and this stage, a second consumer group on the embedded stream, later embeds
the turn with the turns before it as one text and writes that as the point's window vector
(LoCoMo R@5 +0.011 over the mean: bench/probes/locomo_arms.py). It reads only while the embed stage
and the reflect queue are idle (`ready`), a few turns at a time, so it takes only what the
machine has to spare: a fresh turn or a reflection is never queued behind it, and under
sustained load windows stay means until the load drops.

Refining is idempotent (the same text embeds to the same vector), writes the window vector
in place (`VectorStore.update_windows`: the rest of the point is not touched, a point gone is
not brought back), and optional: a session whose turns cannot be refined (a model error)
keeps its mean windows and the entry is acked, so this stage never dead-letters what the
boundary stage reads from the same stream. A store
outage is raised, and the consume loop retries it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

import structlog

from hivemem.domain.names import SessionName
from hivemem.domain.windows import framing, window_text
from hivemem.errors import ProviderError
from hivemem.pipeline.messages import EmbeddedEntry, EmbeddedTurn, EmbeddedTurns
from hivemem.pipeline.topology import Keys, Topology
from hivemem.providers.embedders import Embedder
from hivemem.store.vectors.base import TurnHit, VectorStore
from hivemem.workers.boundary import decode_item
from hivemem.workers.stream import WorkerKind

log = structlog.get_logger(__name__)

__all__ = ["WINDOW_BATCH", "WINDOW_CHUNK", "WindowHandler", "window_kind"]

# Entries per read: one (each holds one session's turns from one embed batch), refined
# `WINDOW_CHUNK` turns per model call. Before every call the stage looks at the others again
# and waits while they have work: an entry read in a quiet moment is not worked on once
# turns arrive again. After `MAX_PAUSE_S` of waiting it refines one chunk anyway (under a load
# that never stops, a trickle: its entry is not held for ever).
WINDOW_BATCH = 1
WINDOW_CHUNK = 8
MAX_PAUSE_S = 60.0
# The embed stage counts as idle once it has nothing waiting and was handed nothing for
# this long: at a steady ingest rate its backlog is empty between two turns.
QUIET_MS = 500
_POLL_S = 0.05


class Activity(Protocol):
    """What the window stage needs to know of the embed stage (`store.status.StageActivity`)."""

    @property
    def backlog(self) -> int: ...

    @property
    def idle_ms(self) -> int | None: ...


class WindowHandler:
    def __init__(
        self,
        embedder: Embedder,
        vectors: VectorStore,
        keys: Keys,
        embed_activity: Callable[[], Activity],
        *,
        reflect_backlog: Callable[[], int] | None = None,
        window_turns: int = 2,
    ) -> None:
        self.embedder = embedder
        self.vectors = vectors
        self.keys = keys
        self.topology = Topology(keys)
        self.embed_activity = embed_activity
        self.reflect_backlog = reflect_backlog
        self.window_turns = window_turns
        # Set by whoever runs the handler (`Wiring.window_worker`): a pause ends at a stop.
        self.stopping: Callable[[], bool] = lambda: False

    def ready(self) -> bool:
        """Only while the embed stage is idle (nothing waiting, nothing handed to it for
        `QUIET_MS`) and no reflect job waits or runs: fresh turns and their facts go first."""
        activity = self.embed_activity()
        if activity.backlog or (activity.idle_ms is not None and activity.idle_ms < QUIET_MS):
            return False
        return self.reflect_backlog is None or self.reflect_backlog() == 0

    def _pause(self) -> None:
        """Before a model call: wait while the others have work (a bounded time, and not
        past a stop of the worker)."""
        deadline = time.monotonic() + MAX_PAUSE_S
        while not self.stopping() and time.monotonic() < deadline and not self.ready():
            time.sleep(_POLL_S)

    def __call__(self, entries: list[EmbeddedEntry]) -> None:
        wanted: dict[SessionName, set[int]] = {}
        for entry in entries:
            if isinstance(entry, EmbeddedTurns):
                wanted.setdefault(entry.name, set()).update(t.seq for t in entry.turns)
            elif isinstance(entry, EmbeddedTurn):
                wanted.setdefault(entry.name, set()).add(entry.seq)
            # skips and episode controls: no turn to refine
        for session_id, seqs in wanted.items():
            self._refine(session_id, sorted(seqs))

    def _refine(self, name: SessionName, seqs: list[int]) -> None:
        if not self.window_turns or not self.vectors.has_windows:
            return
        started = time.perf_counter()
        needed = sorted({s for seq in seqs
                         for s in range(max(1, seq - self.window_turns), seq + 1)})
        hits = {h.seq: h for h in self.vectors.turns_by_seq(name, needed,
                                                             with_vectors=False)}
        turns = {seq: h.turn for seq, h in hits.items()}
        rows: list[TurnHit] = []
        texts: list[str] = []
        for seq in seqs:
            hit = hits.get(seq)
            if hit is None:
                continue  # dead-lettered: never stored
            framed = framing(hit.turn, turns, self.window_turns)
            if framed:  # else its window is its own vector, as the embed stage wrote it
                rows.append(hit)
                texts.append(window_text(framed, hit.turn))
        for start in range(0, len(rows), WINDOW_CHUNK):
            self._pause()
            chunk, chunk_texts = rows[start:start + WINDOW_CHUNK], texts[start:start + WINDOW_CHUNK]
            try:
                windows = self.embedder.embed_documents(chunk_texts)
            except ProviderError as exc:
                log.warning("window.refine_failed", session_id=name, turns=len(chunk),
                            error=str(exc))
                return
            # In place: the window vector only (a turn deleted meanwhile stays deleted, and
            # nothing else of the point is written back from this read).
            self.vectors.update_windows(name, [h.turn_id for h in chunk], windows)
        log.debug("window.refined", session_id=name, turns=len(rows),
                  ms=round((time.perf_counter() - started) * 1000, 2))


def window_kind(handler: WindowHandler) -> WorkerKind[EmbeddedEntry]:
    return WorkerKind.of(handler.topology.window, decode_item, handler, ready=handler.ready,
                         batch_size=WINDOW_BATCH)
