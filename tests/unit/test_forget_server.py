"""Forget in server mode, over HTTP: a real redis-server, the Qdrant REST stand-in in its own
process, the workers as threads, the API on uvicorn and the remote client. After the forget
no Redis key and no Qdrant payload holds the secret; the bystander session is unchanged."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
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

            _one_turn(remote, client, raw, server.url, key)
            _one_fact(remote, client)
        assert not redis_keys_with(raw, secret)
        assert not payloads_with(client.vector_store(), secret)
    finally:
        client.close()


def _one_turn(remote: Any, client: MemoryClient, raw: Any, url: str, key: str) -> None:
    # One turn, over DELETE: the turn and what came only from it.
    turn_secret = new_secret()
    remote.ingest("t", "user", "We decided to use Redis streams for the queue",
                  markers=["decision"], turn_id="keep")
    remote.ingest("t", "user", f"We decided the token is {turn_secret}",
                  markers=["decision"], turn_id="leak")
    remote.close_episode("t")
    remote.wait_until_reflected("t", 30)
    assert redis_keys_with(raw, turn_secret)
    with httpx.Client(base_url=url, timeout=60,
                      headers={"Authorization": f"Bearer {key}"}) as http:
        answer = http.delete("/v1/sessions/t/turns/leak")
    assert answer.status_code == 200, answer.text
    assert not redis_keys_with(raw, turn_secret)
    assert not payloads_with(client.vector_store(), turn_secret)
    assert [t.turn_id for t in client.admin.recent_turns("t", 10)] == ["keep"]


def _one_fact(remote: Any, client: MemoryClient) -> None:
    # One fact (its turn stays: a fact forget removes the fact, not what was said).
    fact_secret = new_secret()
    remote.ingest("f", "user", f"We decided to name the cluster {fact_secret}",
                  markers=["decision"])
    remote.close_episode("f")
    remote.wait_until_reflected("f", 30)
    fact = next(f for f in remote.facts("f") if fact_secret in f.content)
    receipt = remote.forget_fact(fact.fact_id)
    assert receipt.target == "facts"
    assert not any(fact_secret in str(h.payload) for h in client.vector_store().scroll(
        "facts", {"session_id": "f"}))
    assert not any(fact_secret in str(e) for e in client.admin.audit_log("f"))
    assert not any(fact_secret in str(t) for t in client.admin.traces(session_id="f"))
