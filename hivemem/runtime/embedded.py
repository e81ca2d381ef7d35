"""Embedded mode: the whole pipeline on one machine, with no server to run.

A real Redis-compatible server runs as a child process on a unix socket in the folder, with
an append-only file (`hivemem.runtime.child_server`); Qdrant Edge keeps the vectors (and
every turn's payload) under `path`; the workers run as threads. The process that opens the
folder owns it (`hivemem.runtime.owner`): it holds the folder's lock, and publishes where
its Redis (and its HTTP API, when it serves one) can be reached by other processes.

Crash guarantees: a turn `ingest()` returned for is in the server's AOF (fsynced within a
second, or before the reply with `durable=True`); when the owner dies, the server keeps
running and the next owner adopts it, so acknowledged turns that were not embedded yet are
embedded then. A Redis found empty beside stored vectors (an older store, a lost AOF) is
rebuilt from Qdrant, the system of record.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from hivemem.config import Settings
from hivemem.domain.scope import OPERATOR
from hivemem.errors import ConfigurationError, FolderBusy
from hivemem.pipeline.topology import Topology
from hivemem.providers.embedders import Embedder
from hivemem.providers.reflector import Reflector
from hivemem.runtime.child_server import ChildServer
from hivemem.runtime.owner import OwnerLock, OwnerRecord, read_record
from hivemem.runtime.owner_api import OwnerApi
from hivemem.runtime.reflect_process import ReflectProcess
from hivemem.runtime.wiring import Wiring
from hivemem.store.rebuild import rebuild_state, refeed_boundary
from hivemem.store.redis import Redis, redis_errors
from hivemem.store.session_names import move_to_names
from hivemem.store.streams import StreamStore
from hivemem.workers.stream import StreamWorker

if TYPE_CHECKING:
    from hivemem.workers.rqworker import ThreadWorker

log = structlog.get_logger(__name__)

# What an older hivemem left in the folder; its content is recovered from Qdrant instead.
LEGACY_SNAPSHOT = "redis.snapshot"


def default_embed_workers() -> int:
    """One embed thread per available core, at most four."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, min(4, cores))


class EmbeddedRuntime:
    """The owner of one store folder: its lock, its Redis server, its vectors, its workers.

    `serve_guests`: serve the owner API on the folder's socket, so that other processes
    (the CLI) can use the folder while this one runs. `redis_connector`: run on these Redis
    connections instead of the child server (tests and the benchmark's fakeredis baseline).
    Raises `FolderBusy` when another process owns the folder.
    """

    def __init__(
        self,
        path: Path,
        settings: Settings,
        *,
        embedder: Embedder | None = None,
        reflector: Reflector | None = None,
        workers: int | None = None,
        durable: bool | None = None,
        serve_guests: bool = True,
        redis_connector: Callable[[], Redis] | None = None,
    ) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.settings = settings
        self.lock = OwnerLock(self.path)
        if not self.lock.acquire(wait=settings.embedded.lock_wait_s):
            record = read_record(self.path)
            who = f"process {record.pid}" if record is not None else "another process"
            raise FolderBusy(f"{self.path} is owned by {who}: stop it first, or use the"
                             " folder through it (the CLI does that by itself)")
        self.server: ChildServer | None = None
        self.owner_api: OwnerApi | None = None
        self._reflect_process: ReflectProcess | None = None
        try:
            self._open(embedder, reflector, workers, durable, serve_guests, redis_connector)
        except BaseException:
            wiring: Wiring | None = self.__dict__.get("wiring")
            if wiring is not None:
                wiring.close()
            self._release()
            raise

    def _open(
        self, embedder: Embedder | None, reflector: Reflector | None, workers: int | None,
        durable: bool | None, serve_guests: bool,
        redis_connector: Callable[[], Redis] | None,
    ) -> None:
        settings = self.settings
        durable = settings.embedded.durable if durable is None else durable
        redis_settings = settings.redis
        if redis_connector is None:
            self.server = ChildServer(self.path, durable=durable)
            self.server.start()
            redis_settings = redis_settings.model_copy(
                update={"url": self.server.url, "username": None, "password": None})
        workers = workers or default_embed_workers()
        # The vectors live in the folder whatever the settings say; each worker thread gets
        # its own connection, and each embed thread its own model session with one ONNX
        # thread unless configured (recall's query model has its own).
        folder = settings.qdrant.model_copy(update={"url": None, "path": self.path / "qdrant"})
        self.wiring = Wiring(
            settings.model_copy(update={"qdrant": folder, "redis": redis_settings}),
            connector=redis_connector,
            embedder=embedder,
            reflector=reflector,
            embed_threads=settings.embedding.threads or 1,
        )
        wiring = self.wiring
        self.keys = wiring.keys
        self.embedder = wiring.embedder
        self.query_embedder = wiring.query_embedder
        self.vectors = wiring.vectors
        started = time.perf_counter()
        sessions, refed = self._recover(wiring.redis)
        # A store written before sessions were keyed by namespace: moved to names, once.
        move_to_names(wiring.redis, self.keys, self.vectors)
        # A forget this folder's last owner began and did not finish: finished first.
        resumed = wiring.service.forget.resume(OPERATOR)
        log.info(
            "embedded.opened", path=str(self.path), durable=durable,
            adopted_server=bool(self.server and self.server.adopted),
            rebuilt_sessions=sessions, refed_turns=refed, resumed_forgets=len(resumed),
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
        if wiring.refines_windows:
            self._start(wiring.window_worker(
                wiring.connect(), worker_settings=worker_settings, consumer="embedded-window",
            ), "window")
        else:
            wiring.drop_window_group()
        self._start(wiring.boundary_worker(
            wiring.connect(), worker_settings=worker_settings, consumer="embedded-boundary",
        ), "boundary")
        self._start(wiring.dispatch_worker(
            wiring.connect(), worker_settings=worker_settings, consumer="embedded-dispatch",
        ), "dispatch")
        self._sweep = wiring.retention_sweep()
        if self._sweep is not None:
            self._threads.append(self._sweep.start())
        in_process = (settings.embedded.reflect_process and embedder is None
                      and reflector is None and redis_connector is None)
        if in_process:
            self._reflect_process = self._start_reflect_process()
        self._reflect: ThreadWorker | ReflectProcess
        if self._reflect_process is not None:
            self._reflect = self._reflect_process
        else:
            thread_worker = wiring.thread_worker()
            # Recalls in this process come first: the reflect loop holds back between jobs.
            thread_worker.pause_before_jobs(wiring.foreground.pause)
            self._reflect = thread_worker
            thread = threading.Thread(target=thread_worker.run, name="hivemem-reflect",
                                      daemon=True)
            self._threads.append(thread)
            thread.start()
        api_url = self._serve_guests() if serve_guests else None
        self.record: OwnerRecord = self.lock.publish(wiring.settings.redis.url, api_url)

    def _start_reflect_process(self) -> ReflectProcess | None:
        """Reflection in a process of its own (`hivemem.runtime.reflect_process`); None
        when it cannot start (no API extra to serve it vectors): then a thread."""
        wiring = self.wiring
        process = ReflectProcess(self.path, wiring.settings, self.vectors, wiring.foreground,
                                 wiring.connect())
        try:
            process.start()
        except ConfigurationError as exc:
            log.warning("embedded.reflect_process_unavailable", reason=str(exc))
            return None
        return process

    def _serve_guests(self) -> str | None:
        api = OwnerApi(self.path, self.vectors, self.lock.make_key())
        try:
            api.start()
        except ConfigurationError as exc:
            # Without the API extra the folder still works here; guests get Redis only.
            log.warning("embedded.owner_api_unavailable", reason=str(exc))
            return None
        self.owner_api = api
        return api.url

    def _recover(self, conn: Redis) -> tuple[int, int]:
        """Rebuild Redis from Qdrant when Redis is empty but vectors are stored (a store
        from before the child server, or a lost AOF). A live Redis is left alone."""
        with redis_errors("inspect embedded redis"):
            empty = int(conn.dbsize()) == 0
        if not empty or self.vectors.count_turns() == 0:
            return 0, 0
        if (self.path / LEGACY_SNAPSHOT).exists():
            log.warning("embedded.legacy_snapshot_ignored", path=str(self.path / LEGACY_SNAPSHOT))
        sessions = rebuild_state(self.wiring.state, self.vectors)
        return sessions, refeed_boundary(conn, self.keys, self.vectors)

    @property
    def reflect_process(self) -> ReflectProcess | None:
        """The reflection process, None when reflection runs in a thread of this one."""
        return self._reflect_process

    @property
    def redis_url(self) -> str:
        """Where other processes on this machine reach this folder's Redis."""
        return self.wiring.settings.redis.url

    def _start(self, worker: StreamWorker[Any], name: str) -> None:
        # Recalls in this process come first: the stage holds back between batches.
        worker.pause = self.wiring.foreground.pause
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
        if self.owner_api is not None:
            self.owner_api.stop()  # guests first: nothing new arrives while draining
            self.owner_api = None
        drained = self.drain(timeout)
        if not drained:
            log.warning("embedded.close_undrained", timeout_s=timeout)
        for worker in self._workers:
            worker.stop()
        if self._sweep is not None:
            self._sweep.stop()
        if self._reflect_process is not None:
            self._reflect_process.stop()  # after the job it runs, and before the server
            self._reflect_process = None
        else:
            self._reflect.stop()
        for thread in self._threads:
            # The reflect thread finishes the job it runs (an LLM call can take a while).
            thread.join(timeout=30 if thread.name == "hivemem-reflect" else 5)
        alive = [t.name for t in self._threads if t.is_alive()]
        if alive:
            log.warning("embedded.close_threads_alive", threads=alive)
        self.wiring.close()
        self._release()

    def _release(self) -> None:
        if self._reflect_process is not None:
            self._reflect_process.stop()  # idempotent: a second stop finds it ended
            self._reflect_process = None
        if self.owner_api is not None:
            self.owner_api.stop()
            self.owner_api = None
        # The server stops before the lock goes: a next owner never meets a closing server.
        if self.server is not None:
            self.server.stop()
            self.server = None
        self.lock.release()
