"""Forget in server mode, over HTTP: a real redis-server, the Qdrant REST stand-in in its own
process, the workers as threads, the API on uvicorn and the remote client. After the forget
no Redis key and no Qdrant payload holds the secret; the bystander session is unchanged."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import hivemem
from hivemem import MemoryClient
from hivemem.api import create_app
from hivemem.config import Settings
from hivemem.errors import NotFound
from hivemem.testing import RedisServer
from tests.support.forget_data import (
    PoisonEmbedder,
    new_secret,
    payloads_with,
    redis_keys_with,
    wait_for,
    write_bystander,
    write_secret_session,
)
from tests.support.live_api import LiveServer
from tests.support.qdrant_standin import spawn
from tests.support.server_workers import ServerWorkers

DIM = 256


@pytest.fixture
def server_settings(tmp_path: Path, redis_server: RedisServer,
                    settings: Settings) -> Iterator[Settings]:
    standin = spawn(tmp_path / "qdrant")
    redis_server.client().flushall()
    try:
        yield settings.model_validate({
            **settings.model_dump(mode="json"),
            "embedding": {"provider": "hashing", "dim": DIM},
            "redis": {"url": redis_server.url},
            "qdrant": {"url": standin.url},
            "lifecycle": {"forget_settle_s": 0.05, "forget_settle_timeout_s": 2.0},
        })
    finally:
        standin.stop()


def test_forget_session_over_http_leaves_no_key_or_payload(
        server_settings: Settings, redis_server: RedisServer) -> None:
    secret = new_secret()
    embedder = PoisonEmbedder(DIM)
    client = MemoryClient(server_settings, embedder=embedder)
    keys = client.admin.api_keys()
    key, _ = keys.create("default", "tests")
    raw = redis_server.client()
    try:
        with ServerWorkers(server_settings, embedder), \
                LiveServer(create_app(server_settings, client=client)) as server:
            remote = hivemem.connect(server.url, api_key=key)
            write_secret_session(remote, "secret", secret)
            write_bystander(remote, "other")
            wait_for(lambda: any(secret in str(d.fields) for d in client.admin.dead_letters()),
                     what="the dead letter")
            remote.wait_until_reflected("secret", 30)
            remote.wait_until_reflected("other", 30)
            facts = client.admin.facts("secret", include_history=True)
            assert any(secret in f.content for f in facts)
            assert any(f.status == "superseded" for f in facts)
            assert redis_keys_with(raw, secret) and payloads_with(client.vector_store(), secret)
            before = sorted(f.content for f in remote.facts("other", include_history=True))
            recalled = [i.content for i in remote.recall("other", "how do we deploy?", 200)]

            receipt = remote.forget("secret")
            assert receipt.removed["vectors"]["turns"] >= 3
            assert receipt.removed["redis"]["dead_letters"] >= 1
            assert receipt.disk.vectors_vacuum == "server"
            with pytest.raises(NotFound):
                remote.forget("secret")
            assert sorted(f.content for f in remote.facts("other", include_history=True)) \
                == before
            assert [i.content for i in remote.recall("other", "how do we deploy?", 200)] \
                == recalled
        assert not redis_keys_with(raw, secret)
        assert not payloads_with(client.vector_store(), secret)
    finally:
        client.close()
