"""Build and run a worker process from settings (what `hivemem worker KIND` calls)."""

from __future__ import annotations

import threading
import time
from functools import partial
from typing import Any

import structlog

from hivemem.config import Settings
from hivemem.domain.scope import OPERATOR
from hivemem.errors import StoreUnavailable
from hivemem.pipeline.topology import DISPATCH, EMBED, STAGE_NAMES
from hivemem.runtime.metrics import Metrics
from hivemem.runtime.wiring import Wiring
from hivemem.store.redis_connect import connect, connect_rq
from hivemem.store.session_names import move_to_names
from hivemem.workers.stream import StreamWorker, WorkerReport

KINDS = (*STAGE_NAMES, DISPATCH, "reflect")

log = structlog.get_logger(__name__)


def wait_for_redis(settings: Settings, kind: str) -> None:
    """Before a worker builds anything: until its Redis (and rq's, for a reflect worker)
    answers, backing off, for at most `worker.startup_wait_s`; then the error is raised
    as it would have been at once. A worker started during an outage (a supervisor's
    restart while Redis is down or loading its AOF) waits for it instead of exiting."""
    budget = settings.worker.startup_wait_s
    if budget <= 0:
        return
    deadline = time.monotonic() + budget
    delay = settings.worker.backoff_initial_s
    while True:
        try:
            client = connect(settings.redis)
            if kind == "reflect":
                connect_rq(settings.redis, client)
            client.close()
            return
        except StoreUnavailable as exc:
            if time.monotonic() + delay > deadline:
                raise
            log.warning("worker.waiting_for_redis", kind=kind, error=str(exc),
                        retry_in_s=round(delay, 2))
            time.sleep(delay)
            delay = min(delay * 2, settings.worker.backoff_max_s)


def _metrics(wiring: Wiring, port: int | None) -> Metrics | None:
    """Serve /metrics on `port` (its own thread) with the pipeline's backlog; None: off."""
    if port is None:
        return None
    metrics = Metrics()
    metrics.watch_pipeline(partial(wiring.service.operator.pipeline_status, OPERATOR))
    metrics.serve(port)
    return metrics


def run_reflect_worker(
    settings: Settings, *, burst: bool = False, name: str | None = None,
    metrics_port: int | None = None,
) -> int:
    """An rq worker for the reflect queue (reflection and compaction jobs), handing each
    job this process's context; retry back-off and abandoned jobs by a thread
    (`QueueCare`), not rq's forked scheduler (see `hivemem.workers.retries`). An outage of
    its Redis never ends it: it backs off and starts rq's loop again
    (`work_through_outages`). A thread beside it dispatches the outbox (closed
    episodes -> jobs) for the partitions this process leases, so a deployment needs no
    separate dispatcher process (`hivemem worker dispatch` runs one alone)."""
    from hivemem.workers.rqworker import QueueCare, work_through_outages  # rq: lazily

    with Wiring(settings) as wiring:
        # Forgets a process began and did not finish (it died): the reflect worker, the one
        # process kind every server deployment runs, finishes them as it starts.
        # So are sessions of a store written before they were keyed by namespace (once).
        move_to_names(wiring.redis, wiring.keys, wiring.vectors)
        wiring.service.forget.resume(OPERATOR)
        sweep = None if burst else wiring.retention_sweep()
        if sweep is not None:
            sweep.start()  # a daemon thread: it ends with the process
        dispatcher = wiring.dispatch_worker(wiring.connect())
        dispatch_thread = threading.Thread(
            target=dispatcher.run, kwargs={"burst": burst}, name="hivemem-dispatch",
            daemon=True)
        dispatch_thread.start()
        if burst:
            dispatch_thread.join()
        context = wiring.job_context()
        metrics = _metrics(wiring, metrics_port)
        if metrics is not None:
            context.on_outcome = metrics.reflection_outcome
        worker = wiring.reflect_worker(name=name, context=context)
        if metrics is not None:
            worker.on_health = metrics.worker_health("reflect")
            dispatcher.on_health = metrics.worker_health(DISPATCH)
        care = None
        if not burst:
            # On rq's Redis, where the worker's queue, its scheduled retries and its started
            # jobs live (with `redis.rq_url`, as a Redis Cluster needs, not the main Redis).
            care = QueueCare(worker, wiring.jobs)
            care.start()
        try:
            work_through_outages(worker, burst=burst,
                                 backoff_initial_s=settings.worker.backoff_initial_s,
                                 backoff_max_s=settings.worker.backoff_max_s)
        finally:
            dispatcher.stop()
            if care is not None:
                care.stop()
            dispatch_thread.join(timeout=10)
        return worker.handled


def run_worker(
    kind: str, settings: Settings, *, burst: bool = False, name: str | None = None,
    metrics_port: int | None = None,
) -> WorkerReport:
    """`metrics_port`: serve Prometheus metrics there while the worker runs."""
    wait_for_redis(settings, kind)
    if kind == "reflect":
        return WorkerReport(handled=run_reflect_worker(
            settings, burst=burst, name=name, metrics_port=metrics_port))
    if kind not in KINDS:
        raise ValueError(f"unknown worker kind {kind!r}; known: {', '.join(KINDS)}")
    with Wiring(settings) as wiring:
        window = None
        if kind == EMBED:
            stage = wiring.embed_stage()
            window = _window_beside_embed(wiring, name)
        elif kind == DISPATCH:
            stage = wiring.dispatch_stage()
        else:
            stage = wiring.boundary_stage()
        metrics = _metrics(wiring, metrics_port)
        worker = wiring.stream_worker(
            stage if metrics is None else metrics.instrument(stage), consumer=name
        )
        if metrics is not None:
            worker.on_health = metrics.worker_health(kind)
        worker.install_signal_handlers()
        window_thread = None
        if window is not None:
            window_thread = threading.Thread(
                target=window.run, kwargs={"burst": burst}, name="hivemem-window",
                daemon=True)
            window_thread.start()
        try:
            return worker.run(burst=burst)
        finally:
            if window is not None and window_thread is not None:
                window.stop()
                window_thread.join(timeout=30)


def _window_beside_embed(wiring: Wiring, name: str | None) -> StreamWorker[Any] | None:
    """An embed worker process refines windows in a thread of its own when the embed stage
    has nothing waiting (`window_mode: refined`); otherwise it removes the window group a
    former setting left, so that the embedded streams still trim."""
    if not wiring.refines_windows:
        wiring.drop_window_group()
        return None
    return wiring.window_worker(wiring.connect(),
                                consumer=None if name is None else f"{name}-window")
