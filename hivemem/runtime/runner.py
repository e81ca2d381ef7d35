"""Build and run a worker process from settings (what `hivemem worker KIND` calls)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from typing import TYPE_CHECKING

from hivemem.config import Settings
from hivemem.pipeline.topology import BOUNDARY, EMBED, STAGE_NAMES, Keys
from hivemem.store.redis import Redis, connect
from hivemem.store.streams import StreamStore
from hivemem.workers.stream import StreamWorker, WorkerKind, WorkerReport

if TYPE_CHECKING:
    from hivemem.runtime.metrics import Metrics

KINDS = (*STAGE_NAMES, "reflect")


def build_embed(
    settings: Settings, keys: Keys, conn: Redis, stack: ExitStack
) -> WorkerKind[object]:
    from hivemem.providers.embedders import build_embedder
    from hivemem.store.state import SessionState
    from hivemem.store.vectors.factory import open_vector_store
    from hivemem.workers.embed import EmbedHandler, embed_kind

    embedder = build_embedder(settings.embedding)
    vectors = open_vector_store(settings.qdrant, embedder.dim)
    stack.callback(vectors.close)
    state = SessionState(conn, keys, settings.ingest.recent_window)
    handler = EmbedHandler(embedder, vectors, state, StreamStore(conn, keys), keys)
    return embed_kind(handler)  # type: ignore[return-value]


def build_boundary(
    settings: Settings, keys: Keys, conn: Redis, stack: ExitStack
) -> WorkerKind[object]:
    from hivemem.store.episodes import EpisodeStore
    from hivemem.workers.boundary import BoundaryHandler, boundary_kind, policy_from
    from hivemem.workers.jobs import reflect_enqueuer

    handler = BoundaryHandler(
        EpisodeStore(conn, keys, settings.episodes.lease_ms),
        policy_from(settings.episodes),
        reflect_enqueuer(conn, settings.episodes.reflect_queue, settings.reflection),
    )
    return boundary_kind(handler)  # type: ignore[return-value]


BUILDERS: dict[str, Callable[[Settings, Keys, Redis, ExitStack], WorkerKind[object]]] = {
    EMBED: build_embed,
    BOUNDARY: build_boundary,
}


def _metrics(settings: Settings, conn: Redis, port: int | None) -> Metrics | None:
    """Serve /metrics on `port` (its own thread) with the pipeline's backlog; None: off."""
    if port is None:
        return None
    from hivemem.runtime.metrics import Metrics

    metrics = Metrics()
    metrics.watch_pipeline(conn, Keys(settings.redis.key_prefix),
                           settings.episodes.reflect_queue)
    metrics.serve(port)
    return metrics


def run_reflect_worker(
    settings: Settings, *, burst: bool = False, name: str | None = None,
    metrics_port: int | None = None,
) -> int:
    """An rq worker for reflection jobs; retry back-off by a thread, not rq's forked
    scheduler (see `hivemem.workers.retries`)."""
    from rq import SimpleWorker

    from hivemem.providers.embedders import build_embedder
    from hivemem.store.vectors.factory import open_vector_store
    from hivemem.workers.reflect import build_context, build_reflector_from, install_context

    conn = connect(settings.redis)
    embedder = build_embedder(settings.embedding)
    vectors = open_vector_store(settings.qdrant, embedder.dim)
    try:
        context = build_context(settings, conn, vectors, embedder, build_reflector_from(settings))
        metrics = _metrics(settings, conn, metrics_port)
        if metrics is not None:
            context.on_outcome = metrics.reflection_outcome
        install_context(context)
        # SimpleWorker: jobs run in this process, so the model and clients load once.
        worker = SimpleWorker([settings.episodes.reflect_queue], connection=conn, name=name)
        promoter = None
        if not burst:
            from hivemem.workers.retries import RetryPromoter

            promoter = RetryPromoter(conn, settings.episodes.reflect_queue)
            promoter.start()
        try:
            worker.work(burst=burst, with_scheduler=False, logging_level="WARNING")
        finally:
            if promoter is not None:
                promoter.stop()
        return int(worker.successful_job_count)
    finally:
        vectors.close()
        conn.close()


def run_worker(
    kind: str, settings: Settings, *, burst: bool = False, name: str | None = None,
    metrics_port: int | None = None,
) -> WorkerReport:
    """`metrics_port`: serve Prometheus metrics there while the worker runs."""
    if kind == "reflect":
        return WorkerReport(handled=run_reflect_worker(
            settings, burst=burst, name=name, metrics_port=metrics_port))
    if kind not in BUILDERS:
        raise ValueError(f"unknown worker kind {kind!r}; known: {', '.join(KINDS)}")
    keys = Keys(settings.redis.key_prefix)
    with ExitStack() as stack:
        conn = connect(settings.redis)
        stack.callback(conn.close)
        stage = BUILDERS[kind](settings, keys, conn, stack)
        metrics = _metrics(settings, conn, metrics_port)
        worker = StreamWorker(
            stage if metrics is None else metrics.instrument(stage),
            StreamStore(conn, keys),
            settings.worker,
            consumer=name,
        )
        worker.install_signal_handlers()
        return worker.run(burst=burst)
