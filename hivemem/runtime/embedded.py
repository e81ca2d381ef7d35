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

from hivemem.config import Settings, WorkerSettings
from hivemem.pipeline.topology import Keys, Topology
from hivemem.providers.embedders import Embedder, build_embedder
from hivemem.providers.reflector import Reflector
from hivemem.store.episodes import EpisodeStore
from hivemem.store.rebuild import rebuild_state, refeed_boundary
from hivemem.store.redis import Redis, connect_fake, fake_server
from hivemem.store.snapshot import SNAPSHOT, load_snapshot, save_snapshot
from hivemem.store.state import SessionState
from hivemem.store.streams import StreamStore
from hivemem.store.vectors.edge import EdgeVectorStore
from hivemem.workers.boundary import BoundaryHandler, boundary_kind, policy_from
from hivemem.workers.embed import EmbedHandler, embed_kind
from hivemem.workers.jobs import ThreadWorker, reflect_enqueuer
from hivemem.workers.reflect import build_context, install_context, uninstall_context
from hivemem.workers.stream import StreamWorker, WorkerKind

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
        self.keys = Keys(settings.redis.key_prefix)
        self._server = fake_server()
        workers = workers or default_embed_workers()
        # One embedder per embed thread (a model session is not shared between threads) with
        # one ONNX thread each unless configured, and its own one for recall's queries.
        one_thread = settings.embedding.model_copy(
            update={"threads": settings.embedding.threads or 1}
        )
        if embedder is not None:
            worker_embedders = [embedder] * workers
            self.query_embedder = embedder
        else:
            worker_embedders = [build_embedder(one_thread) for _ in range(workers)]
            self.query_embedder = build_embedder(settings.embedding, for_queries=True)
        self.embedder = worker_embedders[0]
        self.vectors = EdgeVectorStore(self.path / "qdrant", self.embedder.dim)
        conn = connect_fake(self._server)
        state = self._state(conn)
        started = time.perf_counter()
        restored = load_snapshot(conn, self.path / SNAPSHOT)
        # Turns written after the last snapshot (a crash) are recovered from Qdrant, and the
        # boundary stage is fed again from where its state stops.
        sessions = rebuild_state(state, self.vectors)
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
        for i, worker_embedder in enumerate(worker_embedders):
            conn = connect_fake(self._server)
            handler = EmbedHandler(
                worker_embedder, self.vectors, self._state(conn), StreamStore(conn, self.keys),
                self.keys,
            )
            self._start(embed_kind(handler), conn, worker_settings, f"embed-{i}")
        conn = connect_fake(self._server)
        boundary = BoundaryHandler(
            EpisodeStore(conn, self.keys, settings.episodes.lease_ms),
            policy_from(settings.episodes),
            reflect_enqueuer(conn, settings.episodes.reflect_queue, settings.reflection),
        )
        self._start(
            boundary_kind(boundary), conn, worker_settings, "boundary"
        )
        if reflector is None:
            from hivemem.workers.reflect import build_reflector_from

            reflector = build_reflector_from(settings)
        self._start_reflect(reflector)

    def _start_reflect(self, reflector: Reflector | None) -> None:
        conn = connect_fake(self._server)
        self._reflect_context = build_context(
            self.settings, conn, self.vectors, self.embedder, reflector
        )
        install_context(self._reflect_context)
        self._reflect = ThreadWorker(conn, self.settings.episodes.reflect_queue)
        thread = threading.Thread(target=self._reflect.run, name="hivemem-reflect", daemon=True)
        self._threads.append(thread)
        thread.start()

    def _start(
        self, kind: WorkerKind[Any], conn: Redis, settings: WorkerSettings, name: str
    ) -> None:
        worker: StreamWorker[Any] = StreamWorker(
            kind, StreamStore(conn, self.keys), settings, consumer=f"embedded-{name}"
        )
        thread = threading.Thread(target=worker.run, name=f"hivemem-{name}", daemon=True)
        self._workers.append(worker)
        self._threads.append(thread)
        thread.start()

    def _state(self, conn: Redis) -> SessionState:
        return SessionState(conn, self.keys, self.settings.ingest.recent_window)

    def redis(self) -> Redis:
        return connect_fake(self._server)

    def drain(self, timeout: float = 30.0) -> bool:
        """Wait until the embed stage has acked everything enqueued. True when it has."""
        streams = StreamStore(connect_fake(self._server), self.keys)
        deadline = time.monotonic() + timeout
        stages = Topology(self.keys).stages
        while time.monotonic() < deadline:
            if all(
                self._stage_idle(streams, s.stream, s.group) for s in stages
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
        uninstall_context(self._reflect_context)
        save_snapshot(connect_fake(self._server), self.path / SNAPSHOT)
        self.vectors.close()
