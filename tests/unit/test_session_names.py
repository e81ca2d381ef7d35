"""Sessions keyed by namespace (issue 35, item 3): the same session id in two namespaces is
two sessions, and whether another namespace holds an id is observable on no route, writes
included.

Through the HTTP API with real keys, on an installation that restarts (a fake Redis server
that outlives its clients, qdrant-edge on disk); and a store written before sessions had
names (another namespace's session under its bare id) opened again in embedded mode.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from starlette.testclient import TestClient

from hivemem import MemoryClient
from hivemem.api import create_app
from hivemem.config import Settings
from hivemem.domain.names import SessionName, session_name
from hivemem.providers.embedders import HashingEmbedder
from hivemem.store.apikeys import ApiKeyStore
from hivemem.store.session_names import move_to_names
from hivemem.store.state import TurnLog
from hivemem.store.streams import StreamStore
from hivemem.store.vectors.base import POINT_IDS, TURNS, Point, session_where, turn_point_id
from hivemem.store.vectors.edge import EdgeVectorStore
from hivemem.testing import connect_fake, fake_server
from hivemem.workers.embed import EmbedHandler, embed_kind
from hivemem.workers.stream import StreamWorker

DIM = 64
SETTINGS = Settings.model_validate({"embedding": {"provider": "hashing", "dim": DIM}})
SID = "plan"  # the id both namespaces use


@dataclass
class Site:
    folder: Path
    server: Any
    client: MemoryClient | None = None
    http: TestClient | None = None
    keys: dict[str, str] | None = None
    vectors: EdgeVectorStore | None = None

    def start(self) -> TestClient:
        self.vectors = EdgeVectorStore(self.folder / "qdrant", DIM)
        redis_client = connect_fake(self.server)
        self.client = MemoryClient(SETTINGS, redis_client=redis_client,
                                   vector_store=self.vectors, embedder=HashingEmbedder(DIM))
        if self.keys is None:
            store = ApiKeyStore(redis_client, self.client.keys)
            self.keys = {"a": store.create("team-a", "tests")[0],
                         "b": store.create("team-b", "tests")[0]}
        self.http = TestClient(create_app(SETTINGS, client=self.client),
                               raise_server_exceptions=False)
        return self.http

    def restart(self) -> TestClient:
        assert self.http is not None and self.client is not None
        self.http.close()
        self.client.close()
        return self.start()

    def drain(self) -> None:
        client, vectors = self.client, self.vectors
        assert client is not None and vectors is not None
        r = connect_fake(self.server)
        state = TurnLog(r, client.keys, SETTINGS.ingest.recent_window)
        streams = StreamStore(r, client.keys)
        handler = EmbedHandler(HashingEmbedder(DIM), vectors, state, streams, client.keys)
        StreamWorker(embed_kind(handler), streams, SETTINGS.worker).run(burst=True)

    def call(self, who: str, method: str, path: str, **kw: Any) -> Any:
        assert self.http is not None and self.keys is not None
        return self.http.request(method, path, headers={
            "Authorization": f"Bearer {self.keys[who]}"}, **kw)


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    found = Site(tmp_path, fake_server())
    found.start()
    yield found
    assert found.http is not None and found.client is not None
    found.http.close()
    found.client.close()


SAYS = {"a": "team A chose PostgreSQL for the ledger", "b": "team B chose MongoDB for logs"}


def _write_both(site: Site) -> None:
    for who in ("a", "b"):
        r = site.call(who, "POST", f"/v1/sessions/{SID}/turns",
                      json={"role": "user", "content": SAYS[who]})
        assert r.status_code == 201, r.text  # b's write is not told that a holds the id
        assert r.json()["seq"] == 1
    site.drain()


def _own_only(site: Site) -> None:
    """Each namespace reads its session `SID` and nothing of the other's."""
    for who, other in (("a", "b"), ("b", "a")):
        sessions = site.call(who, "GET", "/v1/sessions").json()
        assert sessions["sessions"] == [SID], sessions
        recalled = site.call(who, "POST", f"/v1/sessions/{SID}/recall",
                             json={"query": "which database was chosen", "token_budget": 500})
        assert recalled.status_code == 200, recalled.text
        text = json.dumps(recalled.json())
        assert SAYS[who] in text and SAYS[other] not in text
        stats = site.call(who, "GET", f"/v1/sessions/{SID}/stats").json()
        assert stats["turns_enqueued"] == 1, stats
        timeline = site.call(who, "GET", f"/v1/sessions/{SID}/timeline").text
        assert SAYS[who] in timeline and SAYS[other] not in timeline
        exported = site.call(who, "GET", "/v1/export")
        assert exported.status_code == 200, exported.text
        assert SAYS[who] in exported.text and SAYS[other] not in exported.text


def test_two_namespaces_same_id_each_reads_and_writes_only_its_own(site: Site) -> None:
    _write_both(site)
    _own_only(site)
    # A second turn each: its own counter, its own window.
    for who in ("a", "b"):
        r = site.call(who, "POST", f"/v1/sessions/{SID}/turns",
                      json={"role": "user", "content": f"{who} again"})
        assert (r.status_code, r.json()["seq"]) == (201, 2)
    site.drain()
    assert site.client is not None
    operator = site.client.admin
    assert sorted(operator.sessions()) == [f"team-a/{SID}", f"team-b/{SID}"]
    # Restarted: the same, read from what was stored.
    site.restart()
    for who in ("a", "b"):
        stats = site.call(who, "GET", f"/v1/sessions/{SID}/stats").json()
        assert stats["turns_enqueued"] == 2, stats
        assert site.call(who, "GET", "/v1/sessions").json()["sessions"] == [SID]


def test_an_id_only_another_namespace_holds_is_free_on_every_write(site: Site) -> None:
    """A write to an id another namespace holds answers as one to an unused id does; an
    import in append mode renames only ids its own namespace holds."""
    _write_both(site)
    only_b = site.call("b", "POST", "/v1/sessions/b-only/turns",
                       json={"role": "user", "content": "b's private project"})
    assert only_b.status_code == 201
    site.drain()
    exported = site.call("a", "GET", "/v1/export", params={"session_id": SID}).text
    records = [json.loads(line) for line in exported.splitlines() if line.strip()]
    as_b_only = json.loads(json.dumps(records).replace(f'"{SID}"', '"b-only"'))
    body = "\n".join(json.dumps(r) for r in as_b_only) + "\n"
    imported = site.call("a", "POST", "/v1/import", content=body.encode())
    assert imported.status_code == 201, imported.text
    assert imported.json()["sessions"] == {"b-only": "b-only"}  # not renamed: a's is free
    again = site.call("a", "POST", "/v1/import", content=body.encode())
    assert again.json()["sessions"] == {"b-only": "b-only.2"}  # a's own now: renamed
    # B's session of that id is as it was.
    stats = site.call("b", "GET", "/v1/sessions/b-only/stats").json()
    assert stats["turns_enqueued"] == 1
    facts = site.call("b", "GET", "/v1/sessions/b-only/timeline").text
    assert "b's private project" in facts and SAYS["a"] not in facts
    assert sorted(site.call("a", "GET", "/v1/sessions").json()["sessions"]) == [
        "b-only", "b-only.2", SID]


def test_forget_in_one_namespace_leaves_the_same_id_in_the_other(site: Site) -> None:
    _write_both(site)
    assert site.vectors is not None
    b_points = site.vectors.count(TURNS, session_where(session_name("team-b", SID)))
    assert b_points == 1
    r = site.call("a", "DELETE", f"/v1/sessions/{SID}")
    assert r.status_code == 200, r.text
    assert site.call("a", "GET", f"/v1/sessions/{SID}/stats").status_code == 404
    assert site.call("a", "GET", "/v1/sessions").json()["sessions"] == []
    # B's session of the same id: its turn, its point, its listing, its recall.
    assert site.vectors.count(TURNS, session_where(session_name("team-b", SID))) == 1
    assert site.call("b", "GET", "/v1/sessions").json()["sessions"] == [SID]
    stats = site.call("b", "GET", f"/v1/sessions/{SID}/stats").json()
    assert stats["turns_enqueued"] == 1
    recalled = site.call("b", "POST", f"/v1/sessions/{SID}/recall",
                         json={"query": "which database", "token_budget": 500}).text
    assert SAYS["b"] in recalled
    site.restart()
    assert site.call("b", "GET", f"/v1/sessions/{SID}/stats").json()["turns_enqueued"] == 1


def test_an_operator_export_holding_one_id_twice_imports_back(site: Site, tmp_path: Path,
                                                             ) -> None:
    """The operator's export of both namespaces holds the id twice (each session record
    names its namespace): it validates and imports back, each into its own namespace."""
    _write_both(site)
    assert site.client is not None
    admin = site.client.admin
    path = tmp_path / "all.jsonl"
    summary = admin.export(path, vectors=True)
    assert sorted(summary.sessions) == [f"team-a/{SID}", f"team-b/{SID}"]
    replaced = admin.import_file(path, mode="replace")
    assert replaced.sessions == {f"team-a/{SID}": f"team-a/{SID}",
                                 f"team-b/{SID}": f"team-b/{SID}"}
    appended = admin.import_file(path)  # both taken now: renamed, each in its namespace
    assert appended.sessions == {f"team-a/{SID}": f"team-a/{SID}.2",
                                 f"team-b/{SID}": f"team-b/{SID}.2"}
    listed = {who: site.call(who, "GET", "/v1/sessions").json()["sessions"]
                          for who in ("a", "b")}
    assert listed == {"a": [SID, f"{SID}.2"], "b": [SID, f"{SID}.2"]}
    for who, other in (("a", "b"), ("b", "a")):
        text = site.call(who, "GET", f"/v1/sessions/{SID}.2/timeline").text
        assert SAYS[who] in text and SAYS[other] not in text


# -- a store written before sessions had names ------------------------------------------------


def _as_before_names(client: MemoryClient, namespace: str, session_id: str) -> None:
    """Lay `namespace`'s session out as a version before names wrote it: every key and the
    session set under the bare id, its namespace's index in the bare id's partition, its
    turns' points under ids derived from the bare id; no marker that names were moved."""
    from hivemem.store.session_names import _move_keys

    r, keys, vectors = client.admin.redis, client.keys, client.vector_store()
    name, bare = session_name(namespace, session_id), SessionName(session_id)
    _move_keys(r, keys, name, bare, namespace)
    # `_move_keys` indexed the bare name as default's: it was `namespace`'s.
    r.srem(keys.namespace_session_set(bare), session_id)
    r.sadd(keys.namespace_sessions(keys.partition(bare), namespace), session_id)
    hits = list(vectors.scroll(TURNS, session_where(name), with_vectors=True))
    vectors.upsert(TURNS, [Point(turn_point_id(bare, str(h.payload["turn_id"])), h.vector,
                                 h.payload, None, h.window) for h in hits if h.vector is not None])
    vectors.delete(TURNS, {POINT_IDS: [h.id for h in hits]})
    r.delete(keys.session_names_moved)


def test_a_store_written_before_names_reads_everything_after_a_reopen(
    tmp_path: Path, settings: Settings,
) -> None:
    folder = tmp_path / "store"
    client = MemoryClient.local(folder, settings, workers=1, as_guest=False)
    try:
        team = client.scoped(namespace="team-a")
        for text in ("we deploy with Kubernetes", "the database is PostgreSQL",
                     "the cache is Redis"):
            team.ingest("legacy", "user", text)
        team.close_session("legacy")
        team.wait_until_reflected("legacy", 30)
        client.ingest("plain", "user", "a default session, bare as ever")
        client.wait_until_processed("plain", 30)
        before = {
            "episodes": [e.episode_id for e in team.episodes("legacy")],
            "facts": sorted(f.fact_id for f in team.facts("legacy")),
            "turns": [t.content for t in client.recent_turns("legacy", 10,
                                                             namespace="team-a")],
        }
        assert before["episodes"] and before["facts"], before
        _as_before_names(client, "team-a", "legacy")
        assert client.admin.redis.exists(
            client.keys.session_turn_ids(SessionName("legacy")))
    finally:
        client.close()
    reopened = MemoryClient.local(folder, settings, workers=1, as_guest=False)
    try:
        team = reopened.scoped(namespace="team-a")
        assert team.sessions() == ["legacy"]
        assert [e.episode_id for e in team.episodes("legacy")] == before["episodes"]
        assert sorted(f.fact_id for f in team.facts("legacy")) == before["facts"]
        assert [t.content for t in reopened.recent_turns(
            "legacy", 10, namespace="team-a")] == before["turns"]
        found = [i.content for i in team.recall("legacy", "which database", 2000)]
        assert "the database is PostgreSQL" in found
        vectors = reopened.vector_store()
        name = session_name("team-a", "legacy")
        # Every turn once, under the ids its name derives (none left under the old ones).
        hits = list(vectors.scroll(TURNS, session_where(name)))
        assert len(hits) == 3
        assert {h.id for h in hits} == {turn_point_id(name, str(h.payload["turn_id"]))
                                        for h in hits}
        assert team.ingest("legacy", "user", "one more").seq == 5  # after the close's seq
        # Default's sessions never moved; nothing of team-a's is default's.
        assert reopened.get_session_stats("plain").turns_enqueued == 1
        assert "legacy" not in reopened.scoped(namespace="default").sessions()
        assert move_to_names(reopened.admin.redis, reopened.keys, vectors) == 0  # once only
    finally:
        reopened.close()
