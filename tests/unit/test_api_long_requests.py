"""A request that runs long blocks neither other requests nor shutdown (issue 35, item 3).

`hivemem serve`'s own uvicorn configuration (`server_config`) on a real socket: one tenant
keeps more requests running than the server has worker threads (each held inside the
service until the test lets it go, what a slow export or a long poll does). Meanwhile
another tenant's requests and `/healthz` answer at once, the first tenant's excess is
refused with 429 rather than queued, and a shutdown finishes within the grace period while
the held requests still run.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

import httpx
import uvicorn

from hivemem import MemoryClient
from hivemem.api import create_app
from hivemem.api.serving import server_config
from hivemem.config import Settings
from hivemem.producer.scoped import ScopedMemory
from hivemem.providers.embedders import HashingEmbedder
from hivemem.store.apikeys import ApiKeyStore
from hivemem.store.vectors.server import ServerVectorStore
from hivemem.testing import connect_fake, fake_server

DIM = 64
SETTINGS = Settings.model_validate({
    "embedding": {"provider": "hashing", "dim": DIM},
    "api": {"shutdown_grace_s": 2.0},
})
HELD = 50  # more than the worker threads (anyio's default limiter: 40)


class Server:
    def __init__(self, app: Any, settings: Settings) -> None:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self.server = uvicorn.Server(server_config(app, settings, host="127.0.0.1",
                                                   port=self.port))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]},
                                       daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.02)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Server, dict[str, str],
                                                               threading.Event, list[int]]]:
    vectors = ServerVectorStore(SETTINGS.qdrant, DIM, location=":memory:")
    client = MemoryClient(SETTINGS, redis_client=connect_fake(fake_server()),
                          vector_store=vectors, embedder=HashingEmbedder(DIM))
    store = ApiKeyStore(client.admin.redis, client.keys)
    keys = {"a": store.create("team-a", "slow")[0], "b": store.create("team-b", "ok")[0]}
    client.scoped(namespace="team-a").ingest("slow", "user", "a turn")
    client.scoped(namespace="team-b").ingest("fine", "user", "b's turn")
    gate = threading.Event()
    entered: list[int] = []
    real = ScopedMemory.episodes

    def held(self: ScopedMemory, session_id: str) -> Any:
        if self.scope.namespace == "team-a":
            entered.append(1)
            gate.wait(60)  # a request that runs long
        return real(self, session_id)

    monkeypatch.setattr(ScopedMemory, "episodes", held)
    server = Server(create_app(SETTINGS, client=client), SETTINGS)
    try:
        yield server, keys, gate, entered
    finally:
        gate.set()
        server.server.should_exit = True
        server.thread.join(10)
        client.close()


def test_a_long_request_blocks_neither_others_nor_shutdown(
    world: tuple[Server, dict[str, str], threading.Event, list[int]],
) -> None:
    server, keys, gate, entered = world

    def slow(_i: int) -> int:
        with httpx.Client(base_url=server.url, timeout=90) as http:
            return http.get("/v1/sessions/slow/episodes",
                            headers={"Authorization": f"Bearer {keys['a']}"}).status_code

    pool = ThreadPoolExecutor(HELD)
    futures = [pool.submit(slow, i) for i in range(HELD)]
    limit = SETTINGS.api.max_inflight_per_namespace
    deadline = time.monotonic() + 15
    while len(entered) < limit or sum(f.done() for f in futures) < HELD - limit:
        assert time.monotonic() < deadline, (len(entered), sum(f.done() for f in futures))
        time.sleep(0.02)
    # The tenant's requests past its share were refused at once (429), not queued.
    refused = [f.result() for f in futures if f.done()]
    assert refused == [429] * (HELD - limit), refused
    assert len(entered) == limit
    with httpx.Client(base_url=server.url, timeout=3) as http:
        started = time.monotonic()
        assert http.get("/healthz").status_code == 200
        other = http.get("/v1/sessions/fine/episodes",
                         headers={"Authorization": f"Bearer {keys['b']}"})
        assert other.status_code == 200, other.text
        assert time.monotonic() - started < 2.0
    # Shutdown with the held requests still running: done within the grace period.
    started = time.monotonic()
    server.server.should_exit = True
    server.thread.join(SETTINGS.api.shutdown_grace_s + 5)
    assert not server.thread.is_alive(), "shutdown waited for the held requests"
    assert time.monotonic() - started < SETTINGS.api.shutdown_grace_s + 3
    gate.set()
    pool.shutdown(wait=True)
