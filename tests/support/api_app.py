"""The HTTP API on a real uvicorn server on loopback, for the API tests: fakeredis, Qdrant
`:memory:`, the hashing embedder, two namespace keys and one agent key."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from hivemem import MemoryClient
from hivemem.api import create_app
from hivemem.config import Settings
from hivemem.providers.embedders import HashingEmbedder
from hivemem.runtime.metrics import Metrics
from hivemem.store.apikeys import ApiKeyStore
from hivemem.store.currency import SlotTableStore
from hivemem.store.episodes import EpisodeStore
from hivemem.store.state import TurnLog
from hivemem.store.streams import StreamStore
from hivemem.store.vectors.server import ServerVectorStore
from hivemem.testing import connect_fake, fake_server
from hivemem.workers.boundary import BoundaryHandler, boundary_kind, policy_from
from hivemem.workers.currency import CurrencyKeeper
from hivemem.workers.embed import EmbedHandler, embed_kind
from hivemem.workers.stream import StreamWorker
from support.live_api import LiveServer


@dataclass
class Api:
    url: str
    client: MemoryClient
    drain: Callable[[], None]
    key_a: str
    key_b: str
    metrics: Metrics
    app: object
    keys: ApiKeyStore
    settings: Settings

    def http(self, key: str | None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=10)


def build_api(overrides: dict[str, Any] | None = None, url: str = "http://testserver") -> Api:
    """The app and its stores, not served (call it through ASGI, or serve it)."""
    settings = Settings.model_validate({
        "embedding": {"provider": "hashing", "dim": 256},
        "worker": {"block_ms": 20, "claim_idle_ms": 200},
        "api": {"max_body_bytes": 64 * 1024, "max_batch": 50},
        **(overrides or {}),
    })
    redis_client = connect_fake(fake_server())
    embedder = HashingEmbedder(256)
    vectors = ServerVectorStore(settings.qdrant, embedder.dim, location=":memory:")
    client = MemoryClient(settings, redis_client=redis_client, vector_store=vectors,
                          embedder=embedder)
    keys = ApiKeyStore(redis_client, client.keys)
    key_a, _ = keys.create("team-a", "tests")
    key_b, _ = keys.create("team-b", "tests")
    metrics = Metrics()
    metrics.watch_pipeline(client.admin.pipeline_status)
    app = create_app(settings, client=client, metrics=metrics)

    def drain() -> None:
        state = TurnLog(redis_client, client.keys, settings.ingest.recent_window)
        streams = StreamStore(redis_client, client.keys)
        kind = embed_kind(EmbedHandler(embedder, vectors, state, streams, client.keys))
        StreamWorker(metrics.instrument(kind), streams, settings.worker).run(burst=True)
        # The boundary stage keeps the slot table: `wait_until_processed` waits for it.
        boundary = BoundaryHandler(
            EpisodeStore(redis_client, client.keys, settings.episodes.lease_ms),
            policy_from(settings.episodes),
            CurrencyKeeper(SlotTableStore(redis_client, client.keys), settings.reflection))
        StreamWorker(boundary_kind(boundary), streams, settings.worker).run(burst=True)

    return Api(url, client, drain, key_a, key_b, metrics, app, keys, settings)


@contextmanager
def live_api(overrides: dict[str, Any] | None = None) -> Iterator[Api]:
    api = build_api(overrides)
    try:
        with LiveServer(api.app) as server:
            api.url = server.url
            yield api
    finally:
        api.client.vector_store().close()
