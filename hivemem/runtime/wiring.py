"""The composition root: every store, provider, worker, the job queue and the service are
built here, from `Settings`.

Entry points make one `Wiring` per process and take what they need from it: the SDK client
(`wire`, or embedded mode's runtime's, never a second one), embedded mode, `hivemem worker
KIND`. Nothing else constructs a store (a test pins it). The SDK handles call `service`
(`hivemem.service`), which works on the parts below; rq's connection (`queue_redis`) is the
job queue's (`jobs`) alone. Parts are built on first use and cached, so an ingest-only
producer never loads a model or opens Qdrant. Tests (and embedded mode) hand in ready parts
instead: a Redis connection (or how to open more of them), a vector store, an embedder, a
reflector. `close()` closes what the wiring opened itself and nothing that was handed in.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property, partial
from typing import TYPE_CHECKING, Any, Self

from hivemem.config import Settings, WorkerSettings
from hivemem.domain.scope import OPERATOR
from hivemem.pipeline.topology import Keys, Topology
from hivemem.providers.embedders import Embedder, build_embedder
from hivemem.providers.llm import reflector_for
from hivemem.providers.reflector import Reflector
from hivemem.recall.foreground import Foreground
from hivemem.service.core import Service
from hivemem.service.guard import IngestGuard
from hivemem.store.apikeys import ApiKeyStore
from hivemem.store.audit import AuditLog
from hivemem.store.currency import SlotTableStore
from hivemem.store.episodes import EpisodeStore
from hivemem.store.erasure import ErasureStore
from hivemem.store.key_index import KeyIndexStore
from hivemem.store.redis import Redis
from hivemem.store.redis_connect import check_partitions, connect, connect_rq
from hivemem.store.reflection import ReflectionState
from hivemem.store.repartition import Repartition
from hivemem.store.sessions import SessionStore
from hivemem.store.state import TurnLog
from hivemem.store.status import stage_activity
from hivemem.store.streams import StreamStore
from hivemem.store.vectors.base import VectorStore
from hivemem.store.vectors.factory import open_vector_store
from hivemem.transfer.stores import Stores
from hivemem.workers.boundary import BoundaryHandler, boundary_kind, policy_from
from hivemem.workers.compact import Compactor
from hivemem.workers.currency import CurrencyKeeper
from hivemem.workers.dispatch import DispatchHandler, dispatch_kind
from hivemem.workers.embed import EmbedHandler, embed_kind
from hivemem.workers.jobs import JobContext
from hivemem.workers.queue import JobQueue
from hivemem.workers.retention import RetentionSweep
from hivemem.workers.stream import StreamWorker, WorkerKind
from hivemem.workers.window import WindowHandler, window_kind

if TYPE_CHECKING:
    from hivemem.workers.rqworker import ContextWorker, ThreadWorker

StageKind = WorkerKind[Any]


class Wiring:
    """Builds and caches the parts of one installation (one Redis, one vector store).

    `redis`: use this connection (not closed here). `connector`: how to open another
    connection for a worker thread (default: a new one from `settings.redis`, or `redis`
    itself when only that was given). `vectors`, `embedder` (for documents and queries
    alike), `reflector`: use these instead of building them from settings. `embed_threads`:
    ONNX threads of each document embedder built here (embedded mode runs one per thread).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        redis: Redis | None = None,
        connector: Callable[[], Redis] | None = None,
        vectors: VectorStore | None = None,
        embedder: Embedder | None = None,
        reflector: Reflector | None = None,
        embed_threads: int | None = None,
    ) -> None:
        self.settings = settings
        self._redis = redis
        self._connector = connector
        self._vectors = vectors
        self._embedder = embedder
        self._reflector = reflector
        self.embed_threads = embed_threads
        self._opened: list[Redis] = []
        self._owns_vectors = False
        self._partitions_checked = False

    # -- connections -----------------------------------------------------------------------

    def connect(self) -> Redis:
        """A connection of its own (a worker thread's); closed by `close()` if opened here."""
        if self._redis is not None and self._connector is None:
            return self._redis  # handed in: its pool serves every thread
        conn = self._connector() if self._connector is not None else connect(
            self.settings.redis)
        self._check_partitions(conn)
        self._opened.append(conn)
        return conn

    def _check_partitions(self, conn: Redis) -> None:
        # Once per wiring, on whichever connection comes first: data written with another
        # partition count (or a repartition under way) must stop everything at start.
        if not self._partitions_checked:
            check_partitions(conn, self.keys)
            self._partitions_checked = True

    @cached_property
    def redis(self) -> Redis:
        # A handed-in client is the caller's (tests, an app's own pool): used as is, not
        # checked, so that building a client stays free of round trips.
        return self._redis if self._redis is not None else self.connect()

    @cached_property
    def queue_redis(self) -> Redis:
        """rq's connection (the reflect queue): `redis.rq_url`, else the main Redis; a
        handed-in connection serves rq too."""
        handed_in = self._redis is not None or self._connector is not None
        if handed_in and self.settings.redis.rq_url is None:
            return self.redis
        conn = connect_rq(self.settings.redis, self.redis)
        if conn is not self.redis:
            self._opened.append(conn)
        return conn

    @cached_property
    def foreground(self) -> Foreground:
        """The process's gate between recalls and the pipeline's threads (embedded mode
        holds its workers back while a recall runs)."""
        return Foreground()

    @cached_property
    def keys(self) -> Keys:
        return Keys(self.settings.redis.key_prefix, self.settings.redis.partitions)

    @cached_property
    def jobs(self) -> JobQueue:
        """The reflect queue on rq's Redis (`queue_redis`): every enqueue and rq count."""
        return self.job_queue(self.queue_redis)

    def job_queue(self, conn: Redis) -> JobQueue:
        name = self.settings.episodes.reflect_queue
        return JobQueue(conn, name, self.settings.reflection,
                        maintenance_lock=self.keys.job_maintenance(name))

    # -- the service -----------------------------------------------------------------------

    @cached_property
    def service(self) -> Service:
        """What the SDK handles call (one per wiring, shared by every handle)."""
        return Service(self)

    # -- stores ----------------------------------------------------------------------------

    @cached_property
    def state(self) -> TurnLog:
        return self.turn_log(self.redis)

    def turn_log(self, conn: Redis) -> TurnLog:
        return TurnLog(conn, self.keys, self.settings.ingest.recent_window)

    @cached_property
    def streams(self) -> StreamStore:
        return StreamStore(self.redis, self.keys)

    @cached_property
    def episodes(self) -> EpisodeStore:
        return self.episode_store(self.redis)

    def episode_store(self, conn: Redis) -> EpisodeStore:
        return EpisodeStore(conn, self.keys, self.settings.episodes.lease_ms)

    @cached_property
    def slot_tables(self) -> SlotTableStore:
        """The slot table recall reads (kept by the boundary stage)."""
        return SlotTableStore(self.redis, self.keys)

    @cached_property
    def sessions(self) -> SessionStore:
        return SessionStore(self.redis, self.keys)

    @cached_property
    def audit(self) -> AuditLog:
        return AuditLog(self.redis, self.keys)

    @cached_property
    def reflection(self) -> ReflectionState:
        """Reflection progress, traces and the per-session reflection lock."""
        return ReflectionState(self.redis, self.keys)

    @cached_property
    def erasure(self) -> ErasureStore:
        """What a forget removes from Redis, and the forgets begun and done."""
        return ErasureStore(self.redis, self.keys)

    @cached_property
    def key_index(self) -> KeyIndexStore:
        """Each key's latest turn per session (`hivemem.service.keyed`)."""
        return KeyIndexStore(self.redis, self.keys)

    @cached_property
    def api_keys(self) -> ApiKeyStore:
        return ApiKeyStore(self.redis, self.keys)

    @cached_property
    def guard(self) -> IngestGuard:
        """Ingest's backpressure and durability checks."""
        return IngestGuard(self.redis, Topology(self.keys).embed, self.settings.ingest)

    @cached_property
    def vectors(self) -> VectorStore:
        """The configured vector store (a Qdrant server, or the embedded engine on a folder)."""
        if self._vectors is not None:
            return self._vectors
        store = open_vector_store(self.settings.qdrant, self._dim())
        self._owns_vectors = True
        return store

    def _dim(self) -> int:
        # Both embedders run the same model: take the dimension from whichever is loaded
        # already, so that a client (queries only) never loads a second model for it.
        for name in ("query_embedder", "embedder"):
            built = self.__dict__.get(name)
            if built is not None:
                return int(built.dim)
        return self.embedder.dim

    def stores(self) -> Stores:
        """What export and import read and write (the query model embeds imported text)."""
        return Stores(
            redis=self.redis, keys=self.keys, vectors=self.vectors, state=self.state,
            episodes=self.episodes, sessions=self.sessions, audit=self.audit,
            recent_window=self.settings.ingest.recent_window, embedder=self.query_embedder,
            ingest=self.settings.ingest,
        )

    def compactor(self) -> Compactor:
        return Compactor(self.sessions, self.reflection, self.audit, self.vectors,
                         self.settings)

    # -- providers -------------------------------------------------------------------------

    @cached_property
    def embedder(self) -> Embedder:
        """The document embedder (embed workers, reflection)."""
        return self.new_embedder()

    def new_embedder(self) -> Embedder:
        """Another document embedder (a model session is not shared between threads); the
        handed-in embedder when there is one."""
        if self._embedder is not None:
            return self._embedder
        embedding = self.settings.embedding
        if self.embed_threads is not None:
            embedding = embedding.model_copy(update={"threads": self.embed_threads})
        return build_embedder(embedding)

    @cached_property
    def query_embedder(self) -> Embedder:
        """Recall's embedder (its own ONNX threads)."""
        if self._embedder is not None:
            return self._embedder
        return build_embedder(self.settings.embedding, for_queries=True)

    @cached_property
    def reflector(self) -> Reflector:
        """The heuristic reflector, with the configured LLM on top of it when there is one."""
        if self._reflector is not None:
            return self._reflector
        return reflector_for(self.settings.llm)

    # -- workers ---------------------------------------------------------------------------

    def embed_stage(self, conn: Redis | None = None, embedder: Embedder | None = None) -> StageKind:
        conn = conn or self.redis
        handler = EmbedHandler(
            embedder or self.embedder, self.vectors, self.turn_log(conn),
            StreamStore(conn, self.keys), self.keys,
            window_turns=self.settings.embedding.window_turns,
            window_mode=self.settings.embedding.window_mode,
        )
        return embed_kind(handler)

    @property
    def refines_windows(self) -> bool:
        """Whether a window stage runs beside the embed stage (`window_mode: refined`)."""
        embedding = self.settings.embedding
        return embedding.window_mode == "refined" and embedding.window_turns > 0

    def window_stage(self, conn: Redis | None = None, embedder: Embedder | None = None
                     ) -> StageKind:
        """Window vectors embedded again from text while the embed stage is idle."""
        conn = conn or self.redis
        embed = Topology(self.keys).embed
        jobs = self.jobs  # rq's Redis (thread-safe: a pool of connections)
        handler = WindowHandler(
            embedder or self.new_embedder(), self.vectors, self.keys,
            lambda: stage_activity(conn, embed),
            reflect_backlog=jobs.backlog,
            window_turns=self.settings.embedding.window_turns,
        )
        return window_kind(handler)

    def window_worker(
        self, conn: Redis | None = None, *, embedder: Embedder | None = None,
        worker_settings: WorkerSettings | None = None, consumer: str | None = None,
    ) -> StreamWorker[Any]:
        stage = self.window_stage(conn, embedder)
        worker = self.stream_worker(
            stage, conn, worker_settings=worker_settings, consumer=consumer,
        )
        handler = stage.handle
        if isinstance(handler, WindowHandler):
            handler.stopping = lambda: worker.stopping  # a pause ends at the worker's stop
        return worker

    def drop_window_group(self) -> None:
        """Without a window stage, its consumer group (from when there was one) must not
        hold the embedded streams back from trimming: remove it."""
        StreamStore(self.redis, self.keys).drop_groups(
            Topology(self.keys).window.streams(), Topology(self.keys).window.group)

    def boundary_stage(self, conn: Redis | None = None) -> StageKind:
        conn = conn or self.redis
        handler = BoundaryHandler(
            self.episode_store(conn), policy_from(self.settings.episodes),
            CurrencyKeeper(SlotTableStore(conn, self.keys), self.settings.reflection))
        return boundary_kind(handler, self.settings.episodes.sweep_interval_s)

    def dispatch_stage(self, queue_conn: Redis | None = None) -> StageKind:
        """The outbox dispatcher: closed episodes -> reflect jobs on rq's Redis."""
        jobs = self.jobs if queue_conn is None else self.job_queue(queue_conn)
        return dispatch_kind(DispatchHandler(jobs.connection, self.keys,
                                             jobs.reflect_enqueuer()))

    def dispatch_worker(
        self, conn: Redis | None = None, *, queue_conn: Redis | None = None,
        worker_settings: WorkerSettings | None = None, consumer: str | None = None,
    ) -> StreamWorker[Any]:
        return self.stream_worker(
            self.dispatch_stage(queue_conn), conn, worker_settings=worker_settings,
            consumer=consumer,
        )

    def stream_worker(
        self, stage: StageKind, conn: Redis | None = None, *,
        worker_settings: WorkerSettings | None = None, consumer: str | None = None,
    ) -> StreamWorker[Any]:
        return StreamWorker(
            stage, StreamStore(conn or self.redis, self.keys),
            worker_settings or self.settings.worker, consumer=consumer,
        )

    def embed_worker(
        self, conn: Redis | None = None, *, embedder: Embedder | None = None,
        worker_settings: WorkerSettings | None = None, consumer: str | None = None,
    ) -> StreamWorker[Any]:
        return self.stream_worker(
            self.embed_stage(conn, embedder), conn,
            worker_settings=worker_settings, consumer=consumer,
        )

    def boundary_worker(
        self, conn: Redis | None = None, *,
        worker_settings: WorkerSettings | None = None, consumer: str | None = None,
    ) -> StreamWorker[Any]:
        return self.stream_worker(
            self.boundary_stage(conn), conn, worker_settings=worker_settings, consumer=consumer
        )

    def job_context(self, conn: Redis | None = None) -> JobContext:
        """What the jobs of the reflect queue run with, on `conn` (default: `redis`)."""
        conn = conn or self.redis
        return JobContext(
            settings=self.settings,
            redis=conn,
            keys=self.keys,
            episodes=self.episode_store(conn),
            state=ReflectionState(conn, self.keys),
            audit=AuditLog(conn, self.keys),
            sessions=SessionStore(conn, self.keys),
            vectors=self.vectors,
            embedder=self.embedder,
            reflector=self.reflector,
            jobs=self.jobs,
        )

    def reflect_worker(
        self, conn: Redis | None = None, *, name: str | None = None,
        context: JobContext | None = None,
    ) -> ContextWorker:
        """An rq worker of the reflect queue for this process (`hivemem worker reflect`)."""
        from rq import Queue

        from hivemem.workers.rqworker import ContextWorker

        queue_conn = self.queue_redis if conn is None or conn is self.redis else conn
        queue = Queue(self.settings.episodes.reflect_queue, connection=queue_conn)
        return ContextWorker(
            [queue], context=context or self.job_context(conn), connection=queue_conn,
            name=name, job_heartbeat_s=self.settings.reflection.job_heartbeat_s,
        )

    def retention_sweep(self) -> RetentionSweep | None:
        """The lifecycle sweep (retention), or None when no retention is set."""
        lifecycle = self.settings.lifecycle
        if not lifecycle.retains:
            return None
        forget = self.service.forget
        return RetentionSweep(partial(forget.apply_retention, OPERATOR),
                              self.erasure.take_retention_round,
                              lifecycle.retention_interval_s)

    def thread_worker(self, conn: Redis | None = None) -> ThreadWorker:
        """The reflect queue's worker as a thread (embedded mode), on its own connection."""
        conn = conn or self.connect()
        from hivemem.workers.rqworker import ThreadWorker  # rq: loaded by the embedded mode only

        backoff = self.settings.worker
        return ThreadWorker(conn, self.job_queue(conn), self.job_context(conn),
                            backoff_initial_s=backoff.backoff_initial_s,
                            backoff_max_s=backoff.backoff_max_s)

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Close the vector store and the connections opened here (handed-in parts stay open)."""
        service = self.__dict__.pop("service", None)
        if service is not None:
            service.close()
        if self._owns_vectors:
            self.__dict__.pop("vectors").close()
            self._owns_vectors = False
        while self._opened:
            self._opened.pop().close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def wire(
    settings: Settings, *, redis: Redis | None = None, vectors: VectorStore | None = None,
    embedder: Embedder | None = None,
) -> Wiring:
    """The wiring of an SDK client that runs no workers (its process's composition root);
    embedded mode's client uses its runtime's wiring instead."""
    return Wiring(settings, redis=redis, vectors=vectors, embedder=embedder)


def repartition_move(
    client: Redis, prefix: str, old_count: int, new_count: int, *, ttl_ms: int,
) -> Repartition:
    """The move of every session's keys from `old_count` to `new_count` partitions (`hivemem
    repartition`): built on a bare connection, since a wiring refuses to start while the
    data's partition count differs from the settings'."""
    return Repartition(client, Keys(prefix, old_count), Keys(prefix, new_count), ttl_ms=ttl_ms)
