"""The embed stage: turns -> vectors in Qdrant -> the session's progress in Redis."""

from __future__ import annotations

import time

import structlog

from hivemem.errors import HivememError
from hivemem.models import Turn
from hivemem.providers.embedders import Embedder
from hivemem.store.state import SessionState, turn_from_json
from hivemem.store.streams import StreamEntry
from hivemem.store.vectors import VectorStore
from hivemem.workers.stream import WorkerKind

GROUP = "embed"
log = structlog.get_logger(__name__)


def decode_turn(entry: StreamEntry) -> Turn:
    return turn_from_json(entry.fields["turn"], int(entry.fields["seq"]))


class EmbedHandler:
    def __init__(self, embedder: Embedder, vectors: VectorStore, state: SessionState) -> None:
        if embedder.dim != vectors.dim:
            raise HivememError(
                f"embedder makes {embedder.dim}-d vectors but the store holds {vectors.dim}-d"
            )
        self.embedder = embedder
        self.vectors = vectors
        self.state = state

    def __call__(self, turns: list[Turn]) -> None:
        started = time.perf_counter()
        matrix = self.embedder.embed_documents([t.content for t in turns])
        embedded = time.perf_counter()
        self.vectors.upsert_turns(turns, matrix)
        self.state.mark_processed(turns)
        log.debug(
            "turns.embedded",
            count=len(turns),
            sessions=len({t.session_id for t in turns}),
            embed_ms=round((embedded - started) * 1000, 2),
            write_ms=round((time.perf_counter() - embedded) * 1000, 2),
        )

    def dead_lettered(self, entry: StreamEntry, _error: str) -> None:
        try:
            turn = decode_turn(entry)
        except Exception:
            return  # undecodable: no session to account it to
        self.state.mark_dead(turn.session_id, turn.seq)


def embed_kind(handler: EmbedHandler, stream: str) -> WorkerKind[Turn]:
    return WorkerKind(
        name="embed",
        stream=stream,
        group=GROUP,
        decode=decode_turn,
        handle=handler,
        on_dead_letter=handler.dead_lettered,
    )
