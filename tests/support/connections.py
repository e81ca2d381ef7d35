"""The three ways to connect, as one thing a test can be parametrized over.

- ``embedded``: `MemoryClient.local` on a temporary folder (its own Redis and worker threads);
- ``server``: `MemoryClient` on a real redis-server with Qdrant `:memory:`, the pipeline's
  workers (embed, boundary, reflect) running as threads beside it;
- ``remote``: the same server-mode installation behind a live ``uvicorn`` API, reached with
  `hivemem.connect` and API keys.

Each gives a handle of namespace ``team-a`` (`handle(agent)`) and one of namespace ``team-b``
(`other`), with the same methods: the behavioural tests never ask which one they hold.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from hivemem import MemoryClient, RemoteMemory, Settings, connect
from hivemem.providers.embedders import HashingEmbedder
from hivemem.runtime.metrics import Metrics
from hivemem.runtime.wiring import Wiring
from hivemem.store.apikeys import ApiKeyStore

DIM = 256
KINDS = ("embedded", "server", "remote")


def settings() -> Settings:
    return Settings.model_validate({
        "embedding": {"provider": "hashing", "dim": DIM},
        "worker": {"block_ms": 20, "claim_idle_ms": 200, "claim_interval_s": 0.1,
                   "max_deliveries": 3, "backoff_initial_s": 0.01, "backoff_max_s": 0.05},
        "episodes": {"lease_ms": 150},
    })


class PipelineThreads:
    """The embed, boundary and reflect workers of one installation, as daemon threads."""

    def __init__(self, wiring: Wiring) -> None:
        self._stoppers: list[Callable[[], None]] = []
        self._threads: list[threading.Thread] = []
        for worker in (wiring.embed_worker(wiring.connect(), consumer="test-embed"),
                       wiring.boundary_worker(wiring.connect(), consumer="test-boundary")):
            self._start(worker.run, worker.stop)
        reflect = wiring.thread_worker()
        self._start(reflect.run, reflect.stop)

    def _start(self, run: Callable[[], Any], stop: Callable[[], None]) -> None:
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        self._threads.append(thread)
        self._stoppers.append(stop)

    def stop(self) -> None:
        for stop in self._stoppers:
            stop()
        for thread in self._threads:
            thread.join(timeout=5)


@dataclass
class Connection:
    kind: str
    handle: Callable[[str | None], Any]  # the team-a handle acting as that agent
    other: Any  # a handle of namespace team-b


@contextlib.contextmanager
def server_mode(conn: redis.Redis) -> Iterator[tuple[MemoryClient, Wiring]]:
    """A server-mode client on `conn` with Qdrant `:memory:` and its workers running."""
    from hivemem.store.vectors.server import ServerVectorStore

    config = settings()
    embedder = HashingEmbedder(DIM)
    vectors = ServerVectorStore(config.qdrant, DIM, location=":memory:")
    wiring = Wiring(config, redis=conn, vectors=vectors, embedder=embedder)
    client = MemoryClient(config, redis_client=conn, vector_store=vectors, embedder=embedder)
    threads = PipelineThreads(wiring)
    try:
        yield client, wiring
    finally:
        threads.stop()
        vectors.close()


@contextlib.contextmanager
def remote_api(conn: redis.Redis) -> Iterator[tuple[str, str, str, MemoryClient]]:
    """A live API over a server-mode installation: (url, key of team-a, key of team-b,
    the server's own client)."""
    from hivemem.api import create_app
    from support.live_api import LiveServer

    with server_mode(conn) as (client, _wiring):
        keys = ApiKeyStore(conn, client.keys)
        key_a, _ = keys.create("team-a", "tests")
        key_b, _ = keys.create("team-b", "tests")
        app = create_app(client.settings, client=client, metrics=Metrics())
        with LiveServer(app) as server:
            yield server.url, key_a, key_b, client


@contextlib.contextmanager
def open_connection(kind: str, tmp: Path, conn: redis.Redis | None) -> Iterator[Connection]:
    if kind == "embedded":
        client = MemoryClient.local(tmp / "store", settings(), embedder=HashingEmbedder(DIM),
                                    workers=1)
        try:
            yield Connection(kind, lambda agent: client.scoped(namespace="team-a",
                                                               agent_id=agent),
                             client.scoped(namespace="team-b"))
        finally:
            client.close()
        return
    assert conn is not None
    if kind == "server":
        with server_mode(conn) as (client, _wiring):
            yield Connection(kind, lambda agent: client.scoped(namespace="team-a",
                                                               agent_id=agent),
                             client.scoped(namespace="team-b"))
        return
    with remote_api(conn) as (url, key_a, key_b, _client):
        team_a: RemoteMemory = connect(url, api_key=key_a)
        team_b = connect(url, api_key=key_b)
        try:
            yield Connection(kind, team_a.for_agent, team_b)
        finally:
            team_a.close()
            team_b.close()
