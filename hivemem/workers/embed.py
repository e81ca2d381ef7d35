"""The embed stage: turns -> markers and vectors in Qdrant -> progress in Redis -> next stage.

After the writes are durable, each turn is published, with its vector, on the embedded
stream for the boundary stage; a turn this stage dead-letters is published as a `skip`, so
the boundary stage's in-order pointer moves past it instead of waiting for it forever.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import structlog

from hivemem.domain.markers import detect_markers, merge_markers
from hivemem.domain.models import Turn
from hivemem.domain.names import SessionName, session_name
from hivemem.domain.windows import framing, window_text
from hivemem.errors import ConfigurationError
from hivemem.pipeline.messages import EmbeddedTurn, TurnEntry
from hivemem.pipeline.topology import Keys, Topology
from hivemem.providers.embedders import Embedder, Matrix
from hivemem.providers.lexical import LexicalEncoder
from hivemem.store.state import TurnLog
from hivemem.store.stream_entries import id_order
from hivemem.store.streams import StreamEntry, StreamStore
from hivemem.store.vectors.base import TURNS, Vector, VectorStore, session_where
from hivemem.workers.stream import WorkerKind

log = structlog.get_logger(__name__)


def decode_turn(entry: StreamEntry) -> Turn:
    return TurnEntry.from_fields(entry.fields).turn


def with_detected_markers(turn: Turn) -> Turn:
    markers = merge_markers(turn.markers, detect_markers(turn.content, turn.role.value))
    return turn if markers == turn.markers else turn.model_copy(update={"markers": markers})


class EmbedHandler:
    def __init__(
        self,
        embedder: Embedder,
        vectors: VectorStore,
        state: TurnLog,
        streams: StreamStore,
        keys: Keys,
        lexical: LexicalEncoder | None = None,
        *,
        window_turns: int = 2,
        window_mode: str = "mean",
    ) -> None:
        if embedder.dim != vectors.dim:
            raise ConfigurationError(
                f"embedder makes {embedder.dim}-d vectors but the store holds {vectors.dim}-d"
            )
        self.embedder = embedder
        self.vectors = vectors
        self.state = state
        self.streams = streams
        self.keys = keys
        self.topology = Topology(keys)
        self.lexical = lexical or LexicalEncoder()
        self.window_turns = window_turns
        self.window_mode = window_mode

    def __call__(self, turns: list[Turn], entry_ids: Sequence[str] | None = None) -> None:
        """Embed `turns` and publish them; `entry_ids`: their turns-stream entry ids (the
        worker's; a direct call without them checks no forget mark)."""
        started = time.perf_counter()
        if entry_ids is not None:
            turns, entry_ids = self._not_forgotten(turns, entry_ids)
            if not turns:
                return
        turns = [with_detected_markers(t) for t in turns]
        texts = [t.content for t in turns]
        matrix = self.embedder.embed_documents(texts)
        sparse = self.lexical.documents(texts)
        windows = self._windows(turns, matrix)
        embedded = time.perf_counter()
        self.vectors.upsert_turns(turns, matrix, sparse, windows)
        # One idempotent script per partition: processed bit + the boundary stage's entry,
        # published only for turns not processed before (a retry after this point, or a
        # redelivery, appends nothing twice).
        entries = [EmbeddedTurn.of(t, matrix[i]) for i, t in enumerate(turns)]
        if entry_ids is None:
            self.state.publish_embedded(entries)
        else:
            self._take_back(self.state.publish(entries, entry_ids).forgotten)
        log.debug(
            "turns.embedded",
            count=len(turns),
            sessions=len({t.session_id for t in turns}),
            embed_ms=round((embedded - started) * 1000, 2),
            write_ms=round((time.perf_counter() - embedded) * 1000, 2),
        )

    def _not_forgotten(self, turns: list[Turn], entry_ids: Sequence[str]
                       ) -> tuple[list[Turn], list[str]]:
        """The turns whose session no forget began since they were read: the others are not
        even written to the vector store (a point written and taken back after the forget
        is over would stay in an embedded engine's files until its next vacuum). The
        publish checks the mark again, atomically: a forget may begin after this read."""
        names = [session_name(t.namespace, t.session_id) for t in turns]
        marks = {name: id_order(mark) for name, mark in
                 self.state.forget_marks(list(dict.fromkeys(names))).items()}
        if not marks:
            return turns, list(entry_ids)
        kept = [(t, e) for t, e, name in zip(turns, entry_ids, names, strict=True)
                if name not in marks or id_order(e) > marks[name]]
        if len(kept) < len(turns):
            log.info("turns.forgotten_before_embedding", count=len(turns) - len(kept))
        return [t for t, _ in kept], [e for _, e in kept]

    def _take_back(self, forgotten: Sequence[EmbeddedTurn]) -> None:
        """Delete the points just written for turns whose session a forget began to erase
        after they were read: the forget's passes may be over, so nobody else would (the
        script that refused them published nothing, so no later stage sees them)."""
        by_session: dict[SessionName, list[str]] = {}
        for entry in forgotten:
            by_session.setdefault(entry.name, []).append(entry.turn.turn_id)
        for name, turn_ids in by_session.items():
            self.vectors.delete(TURNS, {**session_where(name), "turn_id": turn_ids})
            log.info("turns.forgotten_meanwhile", session_id=name, count=len(turn_ids))

    def _windows(self, turns: list[Turn], matrix: Matrix) -> Matrix | None:
        """Each turn embedded after the `window_turns` turns before it in its session (from
        this batch, else from the store: a session's turns are embedded in order). A turn
        with nothing before it keeps its own vector. None when windows are off."""
        if not self.window_turns or not self.vectors.has_windows:
            return None
        before: dict[str, dict[int, Turn]] = {}
        # Keyed by each turn's session's internal name: the same id in two namespaces is
        # two sessions.
        names = [session_name(t.namespace, t.session_id) for t in turns]
        for name, t in zip(names, turns, strict=True):
            before.setdefault(name, {})[t.seq] = t
        wanted: dict[SessionName, set[int]] = {}
        for name, t in zip(names, turns, strict=True):
            known = before[name]
            for seq in range(max(1, t.seq - self.window_turns), t.seq):
                if seq not in known:
                    wanted.setdefault(name, set()).add(seq)
        mean = self.window_mode != "text"  # refined: the mean now, the text later
        own: dict[tuple[str, int], Vector] = {
            (names[i], t.seq): matrix[i] for i, t in enumerate(turns)} if mean else {}
        for session, seqs in wanted.items():
            for hit in self.vectors.turns_by_seq(session, sorted(seqs), with_vectors=mean):
                before[session].setdefault(hit.seq, hit.turn)
                if mean and hit.vector is not None:
                    own.setdefault((session, hit.seq), hit.vector)
        rows: list[int] = []
        texts: list[str] = []
        windows = matrix.copy()
        for i, t in enumerate(turns):
            framed = framing(t, before[names[i]], self.window_turns)
            if not framed:
                continue
            if mean:
                vectors = [own[key] for p in framed if (key := (names[i], p.seq)) in own]
                total = np.sum([*vectors, matrix[i]], axis=0)
                windows[i] = total / max(float(np.linalg.norm(total)), 1e-12)
            else:
                rows.append(i)
                texts.append(window_text(framed, t))
        if texts:
            windows[rows] = self.embedder.embed_documents(texts)
        return windows

    def dead_lettered(self, entry: StreamEntry, _error: str) -> None:
        try:
            turn = decode_turn(entry)
        except Exception:
            return  # undecodable: no session to account it to
        name = session_name(turn.namespace, turn.session_id)
        if not self.state.publish_skip(name, turn.seq, entry.entry_id):
            log.info("turns.skip_forgotten", session_id=name, seq=turn.seq)


def embed_kind(handler: EmbedHandler) -> WorkerKind[Turn]:
    return WorkerKind.of(handler.topology.embed, decode_turn, handler, handler.dead_lettered,
                         handle_delivered=handler)
