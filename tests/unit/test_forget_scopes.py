"""Who may forget what, and the forgets beyond one session: an agent key forgets only what
its agent wrote (another agent's turn or fact is 403, one it cannot see or another
namespace's session 404), a namespace key within its namespace; an agent's data in a
namespace; a namespace; one fact and every version of it. Embedded store, HTTP API on
uvicorn."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hivemem import MemoryClient
from hivemem.api import create_app
from hivemem.config import Settings
from hivemem.errors import NotFound, NotPermitted
from hivemem.providers.embedders import HashingEmbedder
from tests.support.forget_data import (
    T0,
    files_with,
    new_secret,
    payloads_with,
    redis_keys_with,
)
from tests.support.live_api import LiveServer


@pytest.fixture
def store(tmp_path: Path, settings: Settings) -> Iterator[MemoryClient]:
    tuned = settings.model_copy(update={"lifecycle": settings.lifecycle.model_copy(
        update={"forget_settle_s": 0.0, "forget_settle_timeout_s": 1.0})})
    client = MemoryClient.local(tmp_path / "store", tuned, embedder=HashingEmbedder(1024),
                                workers=1, as_guest=False)
    try:
        yield client
    finally:
        client.close()


def _http(url: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def _two_agents(client: MemoryClient, session: str, namespace: str = "team") -> None:
    a = client.scoped(namespace=namespace, agent_id="alice")
    b = client.scoped(namespace=namespace, agent_id="bob")
    a.ingest(session, "user", "We decided to use Postgres for billing", markers=["decision"],
             turn_id="a1", timestamp=T0)
    b.ingest(session, "user", "We decided to ship on Mondays", markers=["decision"],
             turn_id="b1", timestamp=T0)
    b.ingest(session, "user", "bob's private note about the offsite", turn_id="b2",
             visibility="private", timestamp=T0)
    a.close_episode(session)
    a.wait_until_reflected(session, 30)


def _turn_ids(client: MemoryClient, session: str, namespace: str = "team") -> list[str]:
    # The operator names a session by its internal name (default's: its bare id).
    name = session if namespace == "default" else f"{namespace}/{session}"
    return sorted(t.turn_id for t in client.admin.recent_turns(name, 50))


def test_agent_key_forgets_only_its_own(store: MemoryClient) -> None:
    _two_agents(store, "s")
    keys = store.admin.api_keys()
    alice, _ = keys.create("team", "alice", agent_id="alice")
    other_ns, _ = keys.create("elsewhere", "x")
    with LiveServer(create_app(store.settings, client=store)) as server:
        with _http(server.url, alice) as http:
            assert http.delete("/v1/sessions/s/turns/b1").status_code == 403
            assert http.delete("/v1/sessions/s/turns/b2").status_code == 404  # private: unseen
            assert http.delete("/v1/sessions/nope").status_code == 404
            bob_fact = next(f.fact_id for f in store.admin.facts("team/s") if f.agent_id == "bob")
            assert http.delete(f"/v1/facts/{bob_fact}").status_code == 403
            answer = http.delete("/v1/sessions/s")
            assert answer.status_code == 200, answer.text
            assert answer.json()["removed"]["vectors"]["turns"] == 1
        with _http(server.url, other_ns) as http:
            assert http.delete("/v1/sessions/s").status_code == 404
            assert http.delete("/v1/sessions/s/turns/b1").status_code == 404
    assert _turn_ids(store, "s") == ["b1", "b2"]
    assert all(f.agent_id != "alice" for f in store.admin.facts("team/s", include_history=True))
    assert any(f.agent_id == "bob" for f in store.admin.facts("team/s"))


def test_sdk_scope_rules(store: MemoryClient) -> None:
    _two_agents(store, "s")
    with pytest.raises(NotFound):
        store.scoped(namespace="elsewhere").forget("s")
    with pytest.raises(NotFound):
        store.scoped(namespace="team").forget("unknown-session")
    pinned = store.scoped(namespace="team", agent_id="alice").pin()
    with pytest.raises(NotPermitted):
        pinned.forget("s", turn_ids=["b1"])
    with pytest.raises(NotPermitted):
        pinned.forget_agent("bob")
    with pytest.raises(NotFound):
        pinned.forget("s", turn_ids=["no-such-turn"])
    assert _turn_ids(store, "s") == ["a1", "b1", "b2"]  # nothing was removed by a refusal
    # A namespace key forgets the whole session.
    receipt = store.scoped(namespace="team").forget("s")
    assert receipt.removed["vectors"]["turns"] == 3
    assert "team/s" not in store.admin.sessions()


def test_forget_agent_in_namespace(store: MemoryClient) -> None:
    secret = new_secret()
    _two_agents(store, "s1")
    _two_agents(store, "s2")
    store.scoped(namespace="team", agent_id="alice").ingest(
        "s2", "user", f"alice's token is {secret}", turn_id="a2", timestamp=T0)
    store.scoped(namespace="other", agent_id="alice").ingest(
        "s3", "user", "alice elsewhere keeps this", turn_id="x1", timestamp=T0)
    store.scoped(namespace="team").wait_until_processed("s2", 30)
    receipt = store.admin.forget_agent("team", "alice")
    assert receipt.target == "agent" and sorted(receipt.session_ids) == ["s1", "s2"]
    assert _turn_ids(store, "s1") == ["b1", "b2"]
    assert _turn_ids(store, "s2") == ["b1", "b2"]
    assert _turn_ids(store, "s3", "other") == ["x1"]
    assert not redis_keys_with(store.admin.redis, secret)
    assert not payloads_with(store.vector_store(), secret)


def test_forget_namespace(store: MemoryClient, tmp_path: Path) -> None:
    secret = new_secret()
    team = store.scoped(namespace="gone")
    for sid in ("n1", "n2"):
        team.ingest(sid, "user", f"We decided the launch code is {secret}",
                    markers=["decision"], timestamp=T0)
        team.close_episode(sid)
        team.wait_until_reflected(sid, 30)
    _two_agents(store, "kept")
    facts = sorted(f.content for f in store.admin.facts("team/kept"))
    receipt = store.admin.forget_namespace("gone")
    assert sorted(receipt.session_ids) == ["n1", "n2"]
    assert not {"gone/n1", "gone/n2"} & set(store.admin.sessions())
    assert sorted(f.content for f in store.admin.facts("team/kept")) == facts
    assert not redis_keys_with(store.admin.redis, secret)
    assert not payloads_with(store.vector_store(), secret)
    assert not files_with(tmp_path / "store", secret)
    with pytest.raises(NotFound):
        store.admin.forget_namespace("gone")


def test_forget_one_fact_and_its_versions(store: MemoryClient, tmp_path: Path) -> None:
    secret = new_secret()
    handle = store.scoped()
    handle.ingest("f", "user", f"We decided to use the {secret} cluster",
                  markers=["decision"], turn_id="t1", timestamp=T0)
    handle.ingest("f", "user", "Change of plan: we switch the cluster to the blue one",
                  turn_id="t2", timestamp=T0)
    handle.ingest("f", "user", "We decided to deploy on Fridays", markers=["decision"],
                  turn_id="t3", timestamp=T0)
    handle.close_episode("f")
    store.wait_until_reflected("f", 30)
    facts = store.admin.facts("f", include_history=True)
    target = next(f for f in facts if secret in f.content)
    kept = [f for f in facts if "Fridays" in f.content]
    assert kept
    receipt = handle.forget_fact(target.fact_id)
    assert receipt.target == "facts" and receipt.removed["vectors"]["facts"] >= 1
    left = store.admin.facts("f", include_history=True)
    assert not any(secret in f.content or secret in (f.reason or "") for f in left)
    assert {f.fact_id for f in kept} <= {f.fact_id for f in left}
    assert target.fact_id not in {f.fact_id for f in left}
    assert all(secret not in str(e) for e in store.admin.audit_log("f"))
    assert all(secret not in str(t.get("actions")) for t in store.admin.traces(
        session_id="f"))
    # The turns it came from stay (a fact forget removes the fact, not what was said).
    assert "t1" in _turn_ids(store, "f", "default")


def _receipt_shape(data: dict[str, Any]) -> None:
    assert {"forget_id", "target", "removed", "started_at", "finished_at", "disk"} <= set(data)
