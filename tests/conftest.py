"""Shared fixtures: one Redis fixture with two settings (fakeredis, a real redis-server).

The real server is started by the fixture on a unix socket in a temporary folder, so tests
are hermetic and pass where no Redis runs. In CI (CI=true) a missing redis-server fails
instead of skipping.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from hivemem import MemoryClient
from hivemem.config import Settings
from hivemem.providers.embedders import HashingEmbedder
from hivemem.testing import RedisServer, connect_fake, fake_server

REPO = Path(__file__).resolve().parent.parent
SHARED_MODELS = REPO.parent / "shared" / "models"


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    if not RedisServer.available():
        if os.environ.get("CI"):
            pytest.fail("redis-server is not installed (.ci/run should apt-get it)")
        pytest.skip("redis-server is not installed")
    folder = Path(tempfile.mkdtemp(prefix="hivemem-redis-"))
    server = RedisServer(folder)
    server.start()
    yield server
    server.stop()
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(params=["fake", "real"])
def redis_client(request: pytest.FixtureRequest) -> Iterator[redis.Redis]:
    """The same test runs on fakeredis and on a real redis-server."""
    if request.param == "fake":
        client = connect_fake(fake_server())
        yield client
        client.close()
        return
    server: RedisServer = request.getfixturevalue("redis_server")
    client = server.client()
    client.flushall()
    yield client
    client.flushall()
    client.close()


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """Test settings: fast reclaim and short blocks, hashing embedder, nothing from env."""
    return Settings.model_validate(
        {
            "embedding": {"provider": "hashing", "dim": 1024},
            "worker": {"block_ms": 50, "claim_idle_ms": 200, "claim_interval_s": 0.1,
                       "max_deliveries": 3, "backoff_initial_s": 0.01, "backoff_max_s": 0.05},
            "episodes": {"lease_ms": 150},
        }
    )


@pytest.fixture
def embedder() -> HashingEmbedder:
    return HashingEmbedder(1024)


@pytest.fixture
def fastembed_env(monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point fastembed at the model shipped in ../shared/models (offline)."""
    cache = SHARED_MODELS / "fastembed_cache"
    if not cache.exists():
        pytest.skip(f"{cache} not found")
    monkeypatch.setenv("FASTEMBED_CACHE_PATH", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


@pytest.fixture(autouse=True)
def _fresh_structlog() -> Iterator[None]:
    """Each test starts with structlog's defaults (clients configure it on first use)."""
    import structlog

    structlog.reset_defaults()
    yield
    structlog.reset_defaults()


@pytest.fixture
def pipeline(
    redis_client: redis.Redis, settings: Settings, embedder: HashingEmbedder
) -> Iterator[tuple[MemoryClient, Callable[[], None]]]:
    """A client on Redis + Qdrant `:memory:`, and `drain()` to run the embed worker, then
    the boundary worker (which keeps the slot table: `wait_until_processed` waits for it;
    it closes an episode only when asked), both in burst mode."""
    from hivemem.domain.episode import BoundaryPolicy
    from hivemem.store.currency import SlotTableStore
    from hivemem.store.episodes import EpisodeStore
    from hivemem.store.state import TurnLog
    from hivemem.store.streams import StreamStore
    from hivemem.store.vectors.server import ServerVectorStore
    from hivemem.workers.boundary import BoundaryHandler, boundary_kind
    from hivemem.workers.currency import CurrencyKeeper
    from hivemem.workers.embed import EmbedHandler, embed_kind
    from hivemem.workers.stream import StreamWorker

    vectors = ServerVectorStore(settings.qdrant, embedder.dim, location=":memory:")
    client = MemoryClient(settings, redis_client=redis_client, vector_store=vectors,
                          embedder=embedder)

    def drain() -> None:
        state = TurnLog(redis_client, client.keys, settings.ingest.recent_window)
        worker = StreamWorker(
            embed_kind(EmbedHandler(embedder, vectors, state,
                                    StreamStore(redis_client, client.keys), client.keys)),
            StreamStore(redis_client, client.keys),
            settings.worker,
        )
        worker.run(burst=True)
        # The keeper runs; episodes close only when a test closes them (these tests count
        # the episodes they made, as before the boundary stage ran here).
        boundary = BoundaryHandler(
            EpisodeStore(redis_client, client.keys, settings.episodes.lease_ms),
            BoundaryPolicy(max_turns=1 << 30, max_gap_seconds=float("inf"),
                           topic_shift_threshold=-2.0),
            CurrencyKeeper(SlotTableStore(redis_client, client.keys), settings.reflection))
        StreamWorker(boundary_kind(boundary), StreamStore(redis_client, client.keys),
                     settings.worker).run(burst=True)

    yield client, drain
    vectors.close()
