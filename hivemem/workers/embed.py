"""The embed stage: turns -> markers and vectors in Qdrant -> progress in Redis -> next stage.

After the writes are durable, each turn is published, with its vector, on the embedded
stream for the boundary stage; a turn this stage dead-letters is published as a `skip`, so
the boundary stage's in-order pointer moves past it instead of waiting for it forever.
"""

from __future__ import annotations

import time

import structlog

from hivemem.domain.markers import detect_markers, merge_markers
from hivemem.domain.models import Turn
from hivemem.errors import ConfigurationError
from hivemem.pipeline.messages import EmbeddedTurn, SkipEntry, TurnEntry
from hivemem.pipeline.topology import Keys, Topology
from hivemem.providers.embedders import Embedder
from hivemem.providers.lexical import LexicalEncoder
from hivemem.store.state import SessionState
from hivemem.store.streams import StreamEntry, StreamStore
from hivemem.store.vectors.base import VectorStore
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
        state: SessionState,
        streams: StreamStore,
        keys: Keys,
        lexical: LexicalEncoder | None = None,
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

    def __call__(self, turns: list[Turn]) -> None:
        started = time.perf_counter()
        turns = [with_detected_markers(t) for t in turns]
        texts = [t.content for t in turns]
        matrix = self.embedder.embed_documents(texts)
        sparse = self.lexical.documents(texts)
        embedded = time.perf_counter()
        self.vectors.upsert_turns(turns, matrix, sparse)
        # One idempotent script per partition: processed bit + the boundary stage's entry,
        # published only for turns not processed before (a retry after this point, or a
        # redelivery, appends nothing twice).
        self.state.publish_embedded(
            [(t, EmbeddedTurn.of(t, matrix[i]).to_fields()) for i, t in enumerate(turns)]
        )
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
        self.streams.append(
            self.keys.embedded_stream(self.keys.partition(turn.session_id)),
            [SkipEntry(session_id=turn.session_id, seq=turn.seq).to_fields()],
        )


def embed_kind(handler: EmbedHandler) -> WorkerKind[Turn]:
    return WorkerKind.of(handler.topology.embed, decode_turn, handler, handler.dead_lettered)
