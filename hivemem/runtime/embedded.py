"""Embedded mode: the same pipeline in one process, with no server to run.

fakeredis carries the streams and session state, Qdrant Edge keeps the vectors (and every
turn's payload) on disk under `path`, and the embed workers run as threads. On open the
Redis state is rebuilt from Qdrant, so memory persists across restarts. `close()` drains
the queue first; a turn still queued when the process is killed is lost (embedded mode has
no durable queue: use a Redis server for that).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import structlog

from hivemem.config import Settings
from hivemem.pipeline.topology import Topology
from hivemem.providers.embedders import Embedder
from hivemem.providers.reflector import Reflector
from hivemem.runtime.wiring import Wiring
from hivemem.store.rebuild import rebuild_state, refeed_boundary
from hivemem.store.redis import Redis, connect_fake, fake_server
from hivemem.store.snapshot import SNAPSHOT, load_snapshot, save_snapshot
from hivemem.store.streams import StreamStore
from hivemem.workers.stream import StreamWorker

log = structlog.get_logger(__name__)


def default_embed_workers() -> int:
    """One embed thread per available core, at most four."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, min(4, cores))


class EmbeddedRuntime:
    def __init__(
        self,
        path: Path,
        settings: Settings,
        *,
        embedder: Embedder | None = None,
        reflector: Reflector | None = None,
        workers: int | None = None,
    ) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.settings = settings
        self._server = fake_server()
        workers = workers or default_embed_workers()
        # The vectors live in the folder whatever the settings say; each worker thread gets
        # its own in-process connection, and each embed thread its own model session with
        # one ONNX thread unless configured (recall's query model has its own).
        folder = settings.qdrant.model_copy(update={"url": None, "path": self.path / "qdrant"})
        server = self._server
        self.wiring = Wiring(
            settings.model_copy(update={"qdrant": folder}),
            connector=lambda: connect_fake(server),
            embedder=embedder,
            reflector=reflector,
            embed_threads=settings.embedding.threads or 1,
        )
        wiring = self.wiring
        self.keys = wiring.keys
        self.embedder = wiring.embedder
        self.query_embedder = wiring.query_embedder
        self.vectors = wiring.vectors
        conn = wiring.redis
        started = time.perf_counter()
        restored = load_snapshot(conn, self.path / SNAPSHOT)
        # Turns written after the last snapshot (a crash) are recovered from Qdrant, and the
        # boundary stage is fed again from where its state stops.
        sessions = rebuild_state(wiring.state, self.vectors)
        refed = refeed_boundary(conn, self.keys, self.vectors)
        log.info(
            "embedded.opened",
            path=str(self.path),
            sessions=sessions,
            snapshot_keys=restored,
            refed_turns=refed,
            ms=round((time.perf_counter() - started) * 1000, 1),
        )
        # Threads stop within one block interval.
        worker_settings = settings.worker.model_copy(
            update={"block_ms": min(settings.worker.block_ms, 200)}
        )
        self._workers: list[StreamWorker[Any]] = []
        self._threads: list[threading.Thread] = []
        for i in range(workers):
            conn = wiring.connect()
            worker_embedder = self.embedder if i == 0 else wiring.new_embedder()
            self._start(wiring.embed_worker(
                conn, embedder=worker_embedder, worker_settings=worker_settings,
                consumer=f"embedded-embed-{i}",
            ), f"embed-{i}")
        self._start(wiring.boundary_worker(
            wiring.connect(), worker_settings=worker_settings, consumer="embedded-boundary",
        ), "boundary")
        self._start(wiring.dispatch_worker(
            wiring.connect(), worker_settings=worker_settings, consumer="embedded-dispatch",
        ), "dispatch")
        self._reflect = wiring.thread_worker()
        thread = threading.Thread(target=self._reflect.run, name="hivemem-reflect", daemon=True)
        self._threads.append(thread)
        thread.start()

    def _start(self, worker: StreamWorker[Any], name: str) -> None:
        thread = threading.Thread(target=worker.run, name=f"hivemem-{name}", daemon=True)
        self._workers.append(worker)
        self._threads.append(thread)
        thread.start()

    def redis(self) -> Redis:
        """A new connection to the in-process Redis (closed with the runtime)."""
        return self.wiring.connect()

    def drain(self, timeout: float = 30.0) -> bool:
        """Wait until the embed stage has acked everything enqueued. True when it has."""
        streams = self.wiring.streams
        deadline = time.monotonic() + timeout
        stages = [(stream, stage.group) for stage in Topology(self.keys).all_stages
                  for stream in stage.streams()]
        while time.monotonic() < deadline:
            if all(
                self._stage_idle(streams, stream, group) for stream, group in stages
            ) and self._reflect.idle():
                return True
            time.sleep(0.01)
        return False

    @staticmethod
    def _stage_idle(streams: StreamStore, stream: str, group: str) -> bool:
        try:
            return streams.lag(stream, group) == 0 and streams.pending_count(stream, group) == 0
        except Exception:
            return True  # no group yet: nothing was ever enqueued

    def close(self, timeout: float = 30.0) -> None:
        drained = self.drain(timeout)
        if not drained:
            log.warning("embedded.close_undrained", timeout_s=timeout)
        for worker in self._workers:
            worker.stop()
        self._reflect.stop()
        for thread in self._threads:
            thread.join(timeout=5)
        save_snapshot(self.wiring.redis, self.path / SNAPSHOT)
        self.wiring.close()
