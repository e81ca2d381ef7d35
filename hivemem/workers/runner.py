"""Build and run a worker process from settings (what `hivemem worker KIND` calls)."""

from __future__ import annotations

from hivemem.config import Settings
from hivemem.keys import Keys
from hivemem.providers.embedders import build_embedder
from hivemem.store.factory import open_vector_store
from hivemem.store.redis import connect
from hivemem.store.state import SessionState
from hivemem.store.streams import StreamStore
from hivemem.workers.embed import EmbedHandler, embed_kind
from hivemem.workers.stream import StreamWorker, WorkerReport

KINDS = ("embed",)


def run_worker(
    kind: str, settings: Settings, *, burst: bool = False, name: str | None = None
) -> WorkerReport:
    if kind not in KINDS:
        raise ValueError(f"unknown worker kind {kind!r}; known: {', '.join(KINDS)}")
    keys = Keys(settings.redis.key_prefix)
    redis_client = connect(settings.redis)
    embedder = build_embedder(settings.embedding)
    vectors = open_vector_store(settings.qdrant, embedder.dim)
    try:
        state = SessionState(redis_client, keys, settings.ingest.recent_window)
        handler = EmbedHandler(embedder, vectors, state)
        worker = StreamWorker(
            embed_kind(handler, keys.turns_stream),
            StreamStore(redis_client, keys),
            settings.worker,
            consumer=name,
        )
        worker.install_signal_handlers()
        return worker.run(burst=burst)
    finally:
        vectors.close()
        redis_client.close()
