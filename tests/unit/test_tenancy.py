"""Tenants cannot touch each other's cost or learn of each other's sessions (issue 35, item 3).

A namespace's session listing (and the related-session lookup built on it) reads that
namespace's own index (`Keys.namespace_sessions`), never every tenant's sessions: the index is
kept by every write that gives a session its owner (ingest, import, restore) and by the ones
that move or remove it (repartition, import's replace), and built once for a store written
before it existed. Over HTTP, another namespace's session answers every read route exactly as
a session that does not exist.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from hivemem import MemoryClient
from hivemem.config import Settings
from hivemem.domain.models import Role, Turn
from hivemem.domain.names import session_name
from hivemem.pipeline.topology import Keys
from hivemem.providers.embedders import HashingEmbedder
from hivemem.store import head
from hivemem.store.state import TurnLog
from hivemem.store.vectors.server import ServerVectorStore
from hivemem.testing import connect_fake, fake_server

DIM = 64
SETTINGS = Settings.model_validate({"embedding": {"provider": "hashing", "dim": DIM}})


@pytest.fixture
def site() -> Iterator[tuple[MemoryClient, Any]]:
    r = connect_fake(fake_server())
    vectors = ServerVectorStore(SETTINGS.qdrant, DIM, location=":memory:")
    client = MemoryClient(SETTINGS, redis_client=r, vector_store=vectors,
                          embedder=HashingEmbedder(DIM))
    try:
        yield client, r
    finally:
        vectors.close()


def _fill(client: MemoryClient, namespace: str, count: int) -> list[str]:
    ids = [f"{namespace}-{i:03d}" for i in range(count)]
    client.scoped(namespace=namespace).ingest_many(
        [{"session_id": sid, "role": "user", "content": f"hello from {sid}"} for sid in ids])
    return ids


def _owner_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The session ids whose owner is read from now on (`head.queue_read` calls)."""
    seen: list[str] = []
    real = head.queue_read

    def spy(pipe: Any, keys: Keys, session_id: str) -> None:
        seen.append(session_id)
        real(pipe, keys, session_id)

    monkeypatch.setattr(head, "queue_read", spy)
    return seen


def test_a_listing_reads_the_callers_sessions_only(
    site: tuple[MemoryClient, Any], monkeypatch: pytest.MonkeyPatch,
) -> None:
    client, _r = site
    a = _fill(client, "team-a", 60)
    b = _fill(client, "team-b", 3)
    handle = client.scoped(namespace="team-b")
    handle.sessions()  # the index exists already (nothing to build): see the next test
    reads = _owner_reads(monkeypatch)
    assert handle.sessions() == b
    assert sorted(reads) == [f"team-b/{s}" for s in b]  # never one of team-a's 60
    assert client.scoped(namespace="team-a").sessions() == a
    # The operator names every session by its internal name.
    assert sorted(client.admin.sessions()) == sorted(
        [f"team-a/{s}" for s in a] + [f"team-b/{s}" for s in b])
    reads.clear()
    related = handle.related_sessions(b[0])
    assert {r.session_id for r in related} <= set(b)
    assert not {x for x in reads if x.startswith("team-a/")}


def test_a_store_written_before_the_index_is_indexed_once(
    site: tuple[MemoryClient, Any], monkeypatch: pytest.MonkeyPatch,
) -> None:
    client, r = site
    a = _fill(client, "team-a", 5)
    b = _fill(client, "team-b", 2)
    # A session from before namespaces: a counter, no owner record (the default one's).
    keys = client.keys
    r.hset(keys.session_turn_ids("legacy"), head.SEQ_FIELD, 3)
    r.sadd(keys.session_set("legacy"), "legacy")
    # As an older version left it: no index, no marker.
    r.delete(*keys.all_namespace_sessions("team-a"), *keys.all_namespace_sessions("team-b"),
             keys.namespace_index_built)
    fresh = MemoryClient(SETTINGS, redis_client=r, vector_store=client.vector_store(),
                         embedder=HashingEmbedder(DIM))
    assert fresh.scoped(namespace="team-b").sessions() == b
    assert r.exists(keys.namespace_index_built)
    assert fresh.scoped(namespace="team-a").sessions() == a
    assert fresh.scoped(namespace="default").sessions() == ["legacy"]
    # Built once: another process reads the index only.
    other = MemoryClient(SETTINGS, redis_client=r, vector_store=client.vector_store(),
                         embedder=HashingEmbedder(DIM))
    reads = _owner_reads(monkeypatch)
    assert other.scoped(namespace="team-b").sessions() == b
    assert sorted(reads) == [f"team-b/{s}" for s in b]


def test_import_restore_and_replace_keep_the_index(
    site: tuple[MemoryClient, Any], tmp_path: Path,
) -> None:
    client, r = site
    handle = client.scoped(namespace="team-a")
    handle.ingest("moved", "user", "we chose PostgreSQL")
    exported = tmp_path / "moved.jsonl"
    handle.export(exported, ["moved"])
    # Imported again (append renames a taken id): both listed.
    result = client.admin.import_file(exported)
    # The operator's summary names sessions by internal name; renamed within team-a.
    namespace, _, renamed = result.sessions["team-a/moved"].partition("/")
    assert namespace == "team-a" and renamed != "moved"
    assert set(handle.sessions()) == {"moved", renamed}
    # Replace: purged and written again, listed once, in its namespace only.
    client.admin.import_file(exported, mode="replace")
    assert set(handle.sessions()) == {"moved", renamed}
    assert client.scoped(namespace="team-b").sessions() == []
    # Rebuilt from the vector store (`restore`): the owner's index lists it again.
    r.delete(*client.keys.all_namespace_sessions("team-a"))
    state = TurnLog(r, client.keys, SETTINGS.ingest.recent_window)
    turn = Turn(turn_id="t1", session_id="rebuilt", role=Role.USER, content="x",
                timestamp=datetime(2026, 1, 1, tzinfo=UTC), seq=1, token_count=1,
                namespace="team-a")
    state.restore_session(session_name("team-a", "rebuilt"), [turn])
    assert handle.sessions() == ["rebuilt"]


def test_an_entry_left_behind_is_not_listed(site: tuple[MemoryClient, Any]) -> None:
    """The listing reads each entry's owner back: an index entry of a session that is gone
    or now another namespace's lists nothing."""
    client, r = site
    keys = client.keys
    b = _fill(client, "team-b", 1)
    r.sadd(keys.namespace_session_set(session_name("team-b", "ghost")), "ghost")
    r.sadd(keys.namespace_session_set(session_name("team-b", "team-a-x")), "team-a-x")
    _fill(client, "team-a", 0)
    client.scoped(namespace="team-a").ingest("team-a-x", "user", "mine")
    assert client.scoped(namespace="team-b").sessions() == b


def _embed_all(client: MemoryClient, r: Any) -> None:
    from hivemem.store.streams import StreamStore
    from hivemem.workers.embed import EmbedHandler, embed_kind
    from hivemem.workers.stream import StreamWorker

    state = TurnLog(r, client.keys, SETTINGS.ingest.recent_window)
    streams = StreamStore(r, client.keys)
    handler = EmbedHandler(HashingEmbedder(DIM), client.vector_store(), state, streams,
                           client.keys)
    StreamWorker(embed_kind(handler), streams, SETTINGS.worker).run(burst=True)


@pytest.mark.parametrize("counter", [10**18, 2**62])
def test_a_counter_past_the_turns_costs_what_the_turns_cost(
    site: tuple[MemoryClient, Any], monkeypatch: pytest.MonkeyPatch, counter: int,
) -> None:
    """A session whose counter claims far more turns than it holds (what an import that
    trusted the file once left behind): its export and timeline read what is stored, in a
    number of vector store calls that follows the turns, not the counter."""
    from starlette.testclient import TestClient

    from hivemem.api import create_app
    from hivemem.store.apikeys import ApiKeyStore

    client, r = site
    handle = client.scoped(namespace="team-a")
    for i in range(5):
        handle.ingest("inflated", "user", f"turn {i}")
    _embed_all(client, r)
    r.hset(client.keys.session_turn_ids(session_name("team-a", "inflated")), head.SEQ_FIELD,
           counter)
    vectors = client.vector_store()
    calls: list[str] = []
    for name in ("count", "scroll"):
        real = getattr(vectors, name)

        def spy(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            calls.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(vectors, name, spy)
    key = ApiKeyStore(r, client.keys).create("team-a", "tests")[0]
    with TestClient(create_app(SETTINGS, client=client)) as http:
        auth = {"Authorization": f"Bearer {key}"}
        out = http.get("/v1/export", headers=auth, params={"session_id": "inflated"})
        assert out.status_code == 200, out.text
        turns = [line for line in out.text.splitlines() if '"type":"turn"' in line]
        assert len(turns) == 5
        assert len(calls) < 200, len(calls)  # ~log2(counter) counts, not counter / 512
        calls.clear()
        page = http.get("/v1/sessions/inflated/timeline", headers=auth,
                        params={"limit": 3, "kinds": "turn"})
        assert page.status_code == 200, page.text
        body = page.json()
        events = body["events"] if isinstance(body, dict) else body
        assert [e["seq"] for e in events] == [3, 4, 5]
        assert len(calls) < 200, len(calls)


# -- over HTTP: another namespace's session looks like no session --------------------------

pytest.importorskip("fastapi")

from support.api_app import Api, live_api  # noqa: E402

READS: list[tuple[str, str, dict[str, Any] | None]] = [
    ("GET", "", None), ("GET", "/stats", None), ("GET", "/stats/full", None),
    ("GET", "/episodes", None), ("GET", "/facts", None), ("GET", "/facts/full", None),
    ("GET", "/timeline", None), ("GET", "/traces", None), ("GET", "/related", None),
    ("POST", "/recall", {"query": "hello"}), ("POST", "/context", {"query": "hello"}),
    ("POST", "/wait", {"timeout": 0.1}), ("POST", "/wait-reflected", {"timeout": 0.1}),
    ("PATCH", "", {"title": "mine now"}), ("POST", "/episodes/close", {}),
]


@pytest.fixture(scope="module")
def api() -> Iterator[Api]:
    with live_api({"api": {"max_wait_s": 0.2}}) as server:
        yield server


def _answer(http: Any, method: str, sid: str, tail: str,
            body: dict[str, Any] | None) -> tuple[int, Any]:
    r = http.request(method, f"/v1/sessions/{sid}{tail}", json=body)
    try:
        payload = r.json()
    except ValueError:
        payload = r.text
    if isinstance(payload, dict):
        payload.pop("instance", None)
    text = repr(payload).replace(sid, "<sid>")
    return r.status_code, text


@pytest.mark.parametrize(("method", "tail", "body"), READS,
                         ids=[f"{m} {t or '/'}" for m, t, _ in READS])
def test_another_namespaces_session_answers_as_a_missing_one(
    api: Api, method: str, tail: str, body: dict[str, Any] | None,
) -> None:
    theirs, missing = f"b-{uuid.uuid4().hex[:8]}", f"m-{uuid.uuid4().hex[:8]}"
    with api.http(api.key_a) as ha, api.http(api.key_b) as hb:
        assert hb.post(f"/v1/sessions/{theirs}/turns",
                       json={"role": "user", "content": "theirs"}).status_code == 201
        seen = _answer(ha, method, theirs, tail, body)
        absent = _answer(ha, method, missing, tail, body)
        assert seen == absent
        assert seen[0] == 404
        # Nothing of B's changed (the PATCH and close above were refused).
        info = hb.get(f"/v1/sessions/{theirs}").json()
        assert info["title"] is None and info["turns"] == 1
    assert theirs not in api.client.scoped(namespace="team-a").sessions()


@pytest.mark.parametrize(("body", "params"), [
    (b'{"format": "hivemem.export", "version": 1, "sessions": []}\n', {}),  # no end record
    (b'{"format": "hivemem.export"}\n', {"gzip": "true"}),  # not gzip
    (b"", {}),  # empty
])
def test_an_import_refusal_never_names_the_servers_files(
    api: Api, body: bytes, params: dict[str, str],
) -> None:
    with api.http(api.key_a) as http:
        r = http.post("/v1/import", content=body, params=params,
                      headers={"content-type": "application/x-ndjson"})
    assert r.status_code == 422, r.text
    assert "upload" in r.json()["detail"]
    assert "hivemem-import-" not in r.text and "/tmp" not in r.text, r.text
