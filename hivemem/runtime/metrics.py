"""Prometheus metrics for the workers and the API (`prometheus-client`).

Each process builds one `Metrics` on its own registry (no module-level state). Counters and
histograms move as work happens; the pipeline's backlog (stream lag, pending entries, dead
letters, consumers per stage, reflection jobs per state) is read from Redis at scrape time
by `PipelineCollector`, so any one process shows the whole deployment's queues.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from hivemem.store.status import PipelineStatus
from hivemem.workers.stream import WorkerKind

M = TypeVar("M")

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Label values come from closed sets: a made-up method (no key needed to send one) must not
# become a new time series; every label set costs memory for the life of the process.
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
OTHER = "other"


def method_label(method: str) -> str:
    return method if method in HTTP_METHODS else OTHER


def status_label(status: int) -> str:
    return str(status) if 100 <= status <= 599 else OTHER


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.stage_items = Counter(
            "hivemem_stage_items", "Stream entries a pipeline stage finished, by outcome",
            ["stage", "outcome"], registry=r,
        )
        self.stage_batch_seconds = Histogram(
            "hivemem_stage_batch_seconds", "Time a stage spent on one batch", ["stage"],
            buckets=LATENCY_BUCKETS, registry=r,
        )
        self.reflections = Counter(
            "hivemem_reflections", "Episode reflections, by outcome", ["outcome"], registry=r,
        )
        self.ingested = Counter(
            "hivemem_ingested_turns", "Turns accepted by ingest (duplicates included)",
            registry=r,
        )
        self.recall_seconds = Histogram(
            "hivemem_recall_seconds", "Recall latency", ["preset"], buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.http_requests = Counter(
            "hivemem_http_requests", "HTTP requests, by route and status",
            ["method", "route", "status"], registry=r,
        )
        self.worker_up = Gauge(
            "hivemem_worker_up",
            "1 while this process's worker reaches its stores, 0 while it backs off",
            ["worker"], registry=r,
        )
        self.http_seconds = Histogram(
            "hivemem_http_request_seconds", "HTTP request latency", ["method", "route"],
            buckets=LATENCY_BUCKETS, registry=r,
        )

    def worker_health(self, worker: str) -> Callable[[bool], None]:
        """`hivemem_worker_up{worker}` at 1 now; the callback sets it (False: backing off
        while a store is away, True: working again)."""
        gauge = self.worker_up.labels(worker)
        gauge.set(1)
        return lambda up: gauge.set(1 if up else 0)

    def watch_pipeline(self, status: Callable[[], PipelineStatus]) -> None:
        """Report the deployment's backlog at every scrape (`status`: the operator's
        pipeline status, whose job counts come from rq's own Redis)."""
        self.registry.register(PipelineCollector(status))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def serve(self, port: int, addr: str = "0.0.0.0") -> Any:
        """Expose /metrics on its own HTTP thread (workers' ``--metrics-port``)."""
        return start_http_server(port, addr=addr, registry=self.registry)

    def instrument(self, kind: WorkerKind[M]) -> WorkerKind[M]:
        """The same stage, counting what it handles and dead-letters and timing batches."""
        stage = kind.name
        handle = kind.handle
        delivered = kind.handle_delivered
        dead = kind.on_dead_letter

        def counted(messages: list[M], run: Callable[[], None]) -> None:
            started = time.perf_counter()
            try:
                run()
            except Exception:
                self.stage_items.labels(stage, "failed").inc(len(messages))
                raise
            self.stage_batch_seconds.labels(stage).observe(time.perf_counter() - started)
            self.stage_items.labels(stage, "handled").inc(len(messages))

        def handled(messages: list[M]) -> None:
            counted(messages, lambda: handle(messages))

        # A stage that takes its entries' ids is handed them that way (`WorkerKind.deliver`).
        with_ids: Callable[[list[M], list[str]], None] | None = None
        if delivered is not None:
            deliver = delivered

            def handled_delivered(messages: list[M], entry_ids: list[str]) -> None:
                counted(messages, lambda: deliver(messages, entry_ids))

            with_ids = handled_delivered

        def dead_lettered(entry: Any, error: str) -> None:
            self.stage_items.labels(stage, "dead_lettered").inc()
            if dead is not None:
                dead(entry, error)

        return dataclasses.replace(
            kind, handle=handled, on_dead_letter=dead_lettered,
            handle_delivered=with_ids)

    def reflection_outcome(self, outcome: str) -> None:
        self.reflections.labels(outcome).inc()


class PipelineCollector(Collector):
    """Stream lag, pending entries, dead letters and consumers per stage; rq job counts."""

    def __init__(self, status: Callable[[], PipelineStatus]) -> None:
        self.status = status

    def describe(self) -> list[Any]:
        return []  # collected live: no fixed description at registration

    def collect(self) -> Iterator[GaugeMetricFamily]:
        lag = GaugeMetricFamily("hivemem_stream_lag", "Entries not yet delivered", labels=["stage"])
        pending = GaugeMetricFamily(
            "hivemem_stream_pending", "Entries delivered, not acknowledged", labels=["stage"]
        )
        dead = GaugeMetricFamily(
            "hivemem_dead_letters", "Entries in the dead-letter stream", labels=["stage"]
        )
        consumers = GaugeMetricFamily(
            "hivemem_stage_consumers", "Consumers in the stage's group", labels=["stage"]
        )
        jobs = GaugeMetricFamily(
            "hivemem_reflect_jobs", "Reflection jobs by state", labels=["state"]
        )
        reflect_workers = GaugeMetricFamily(
            "hivemem_reflect_workers", "rq workers of the reflect queue (stale: not heard from"
            " lately)", labels=["state"])
        waiting = GaugeMetricFamily(
            "hivemem_boundary_waiting_sessions", "Sessions with entries in their boundary buffer")
        waiting_oldest = GaugeMetricFamily(
            "hivemem_boundary_waiting_oldest_seconds",
            "How long the longest-waiting boundary buffer has held entries")
        up = GaugeMetricFamily("hivemem_redis_up", "1 when Redis answered the scrape")
        try:
            status = self.status()
        except Exception:
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        for stage in status.stages:
            lag.add_metric([stage.stage], stage.lag)
            pending.add_metric([stage.stage], stage.pending)
            dead.add_metric([stage.stage], stage.dead_letters)
            consumers.add_metric([stage.stage], len(stage.consumers))
        for state, count in status.reflect_jobs.items():
            jobs.add_metric([state], count)
        reflect_workers.add_metric(
            ["live"], status.reflect_workers - status.reflect_workers_stale)
        reflect_workers.add_metric(["stale"], status.reflect_workers_stale)
        waiting.add_metric([], status.boundary_waiting)
        waiting_oldest.add_metric([], (status.boundary_waiting_oldest_ms or 0) / 1000)
        yield from (lag, pending, dead, consumers, jobs, reflect_workers, waiting,
                    waiting_oldest, up)


def timed(histogram: Histogram, *labels: str) -> Callable[[], None]:
    """Start a timer; calling the result records the elapsed time."""
    started = time.perf_counter()
    return lambda: histogram.labels(*labels).observe(time.perf_counter() - started)
