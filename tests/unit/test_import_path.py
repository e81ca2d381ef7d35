"""`POST /v1/import` obeys every rule ingest does (issue 35): each hostile file of the issue,
imported over HTTP with a real key into an embedded store (qdrant-edge on disk, one Redis),
is refused naming its line and field, writes nothing, and after a restart (the store closed
and opened again) the store opens and another tenant's recall answers as before."""

from __future__ import annotations

import json
import time
import uuid
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
from hivemem.providers.embedders import HashingEmbedder
from hivemem.store.apikeys import ApiKeyStore
from hivemem.store.state import TurnLog
from hivemem.store.streams import StreamStore
from hivemem.store.vectors.edge import EdgeVectorStore
from hivemem.testing import connect_fake, fake_server
from hivemem.workers.embed import EmbedHandler, embed_kind
from hivemem.workers.stream import StreamWorker

DIM = 64
SETTINGS = Settings.model_validate({"embedding": {"provider": "hashing", "dim": DIM}})


@dataclass
class Installation:
    """An embedded store that can be restarted: Redis (a fake server that outlives the
    client) and qdrant-edge on disk."""

    folder: Path
    server: Any
    client: MemoryClient | None = None
    http: TestClient | None = None
    keys: dict[str, str] | None = None
    vectors: EdgeVectorStore | None = None

    def start(self) -> TestClient:
        vectors = self.vectors = EdgeVectorStore(self.folder / "qdrant", DIM)  # or raises
        redis_client = connect_fake(self.server)
        self.client = MemoryClient(SETTINGS, redis_client=redis_client, vector_store=vectors,
                                   embedder=HashingEmbedder(DIM))
        if self.keys is None:
            store = ApiKeyStore(redis_client, self.client.keys)
            self.keys = {"a": store.create("team-a", "tests")[0],
                         "b": store.create("team-b", "tests")[0],
                         "alice": store.create("team-a", "a", agent_id="alice")[0],
                         "bob": store.create("team-a", "b", agent_id="bob")[0]}
        self.http = TestClient(create_app(SETTINGS, client=self.client),
                               raise_server_exceptions=False)
        return self.http

    def stop(self) -> None:
        assert self.client is not None and self.http is not None
        self.http.close()
        self.client.close()

    def restart(self) -> TestClient:
        self.stop()
        return self.start()

    def auth(self, who: str) -> dict[str, str]:
        assert self.keys is not None
        return {"Authorization": f"Bearer {self.keys[who]}"}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installation]:
    found = Installation(tmp_path_factory.mktemp("embedded"), fake_server())
    http = found.start()
    # Team b's memory: what every hostile import must leave as it is.
    r = http.post("/v1/sessions/b-main/turns", headers=found.auth("b"),
                  json={"role": "user", "content": "we deploy with Kubernetes on Fridays"})
    assert r.status_code == 201, r.text
    # A clean export of team a's (with two agents) to tamper with.
    for body in ({"role": "user", "content": "the plan is ready", "agent_id": "alice"},
                 {"role": "assistant", "content": "noted", "agent_id": "alice",
                  "visibility": "private", "metadata": {"k": {"n": 1}}}):
        assert http.post("/v1/sessions/a-src/turns", headers=found.auth("a"),
                         json=body).status_code == 201
    _drain(found)
    yield found
    found.stop()


def _drain(site: Installation) -> None:
    """Run the embed stage until the turns stream is empty (no workers run here)."""
    client = site.client
    assert client is not None
    redis_client = connect_fake(site.server)
    state = TurnLog(redis_client, client.keys, SETTINGS.ingest.recent_window)
    streams = StreamStore(redis_client, client.keys)
    assert site.vectors is not None
    handler = EmbedHandler(HashingEmbedder(DIM), site.vectors, state, streams, client.keys)
    StreamWorker(embed_kind(handler), streams, SETTINGS.worker).run(burst=True)


def _export(site: Installation) -> list[dict[str, Any]]:
    assert site.http is not None
    r = site.http.get("/v1/export", headers=site.auth("a"),
                      params={"session_id": "a-src"})
    assert r.status_code == 200, r.text
    return [json.loads(line) for line in r.text.splitlines() if line.strip()]


def _file(records: list[dict[str, Any]]) -> bytes:
    return ("\n".join(json.dumps(r, separators=(",", ":")) for r in records) + "\n").encode()


def _renamed(records: list[dict[str, Any]], sid: str) -> list[dict[str, Any]]:
    """The export as a new session `sid` (so that append does not rename it)."""
    text = json.dumps(records).replace('"a-src"', json.dumps(sid))
    out: list[dict[str, Any]] = json.loads(text)
    return out


def _import(site: Installation, who: str, body: bytes) -> Any:
    assert site.http is not None
    return site.http.post("/v1/import", headers={**site.auth(who),
                                                 "Content-Type": "application/x-ndjson"},
                          content=body)


def _team_b_unaffected(site: Installation) -> None:
    assert site.http is not None
    r = site.http.post("/v1/sessions/b-main/recall", headers=site.auth("b"),
                       json={"query": "how do we deploy"})
    assert r.status_code == 200, r.text
    assert any("Kubernetes" in i["content"] for i in r.json()["items"])


def _nested(levels: int) -> dict[str, Any]:
    root: dict[str, Any] = {}
    node = root
    for _ in range(levels - 1):
        node["a"] = {}
        node = node["a"]
    return root


def _turn_line(records: list[dict[str, Any]]) -> tuple[int, dict[str, Any]]:
    """The first turn record and its line number (from 1)."""
    for i, rec in enumerate(records):
        if rec.get("type") == "turn":
            return i + 1, rec
    raise AssertionError("no turn in the export")


def _tamper_turn(site: Installation, **changes: Any) -> tuple[int, list[dict[str, Any]]]:
    records = _renamed(_export(site), f"hostile-{uuid.uuid4().hex[:8]}")
    line, rec = _turn_line(records)
    rec["turn"].update(changes)
    return line, records


HOSTILE_TURNS = {
    "metadata nested 200 levels": ({"metadata": _nested(200)}, "turn.metadata"),
    "metadata nested 130 levels": ({"metadata": _nested(130)}, "turn.metadata"),
    "metadata int 2**70": ({"metadata": {"n": 2**70}}, "turn.metadata"),
    "timestamp before year 1": ({"timestamp": "0001-01-01T00:00:00+05:00"}, "turn.timestamp"),
    "turn id #ns": ({"turn_id": "#ns"}, "turn.turn_id"),
    "seq of 10**18": ({"seq": 10**18}, "turn.seq"),
    "private without owner": ({"visibility": "private", "agent_id": None},
                              "turn.visibility"),
}


@pytest.mark.parametrize("case", list(HOSTILE_TURNS))
def test_a_turn_ingest_refuses_is_refused_by_import_too(site: Installation, case: str) -> None:
    changes, field = HOSTILE_TURNS[case]
    line, records = _tamper_turn(site, **changes)
    before = _session_ids(site)
    r = _import(site, "a", _file(records))
    assert r.status_code == 422, r.text
    body = r.json()
    assert r.headers["content-type"].startswith("application/problem+json")
    assert body["field"] == f"line {line}: {field}", body
    assert body["refused"] == 1 and body["records"][0]["line"] == line
    assert _session_ids(site) == before  # nothing written
    site.restart()  # the store opens again
    _team_b_unaffected(site)


HOSTILE_SESSION_IDS = ["", "a/b/../c", "nul\x00id", "x" * 200]


@pytest.mark.parametrize("session_id", HOSTILE_SESSION_IDS)
def test_session_ids_no_route_accepts_are_refused(site: Installation, session_id: str) -> None:
    records = _renamed(_export(site), "placeholder-sid")
    text = json.dumps(records).replace('"placeholder-sid"', json.dumps(session_id))
    r = _import(site, "a", _file(json.loads(text)))
    assert r.status_code == 422, r.text
    assert r.json()["field"].startswith("line 2: session.session_id"), r.json()
    # Every record of the session is refused, and counted.
    assert r.json()["refused"] == len(records) - 2
    site.restart()
    _team_b_unaffected(site)


def test_a_claimed_counter_is_not_trusted(site: Installation) -> None:
    """A session state claiming seq 10**18 (and processed flags it made up): imported with
    the counters its records give; its export and every other request stay fast."""
    records = _renamed(_export(site), f"counter-{uuid.uuid4().hex[:8]}")
    sid = records[1]["session_id"]
    records[1]["state"].update({"seq": 10**18, "reflected": 10**9,
                                "processed": "", "dead": ""})
    r = _import(site, "a", _file(records))
    assert r.status_code == 201, r.text
    assert site.http is not None
    stats = site.http.get(f"/v1/sessions/{sid}/stats", headers=site.auth("a")).json()
    turns = sum(1 for rec in records if rec.get("type") == "turn")
    assert stats["last_seq"] == turns, stats
    started = time.perf_counter()
    for _ in range(5):
        out = site.http.get("/v1/export", headers=site.auth("a"), params={"session_id": sid})
        assert out.status_code == 200
    assert time.perf_counter() - started < 10
    site.restart()
    _team_b_unaffected(site)
    assert site.http.get("/healthz").status_code == 200


def test_an_agent_key_cannot_plant_memories_in_another_agents_name(
    site: Installation,
) -> None:
    """Bob's key imports a session whose private turn and private fact carry
    agent_id alice: 403, nothing written, alice's memory as it was."""
    records = _renamed(_export(site), f"planted-{uuid.uuid4().hex[:8]}")
    sid = records[1]["session_id"]
    fact = {"type": "fact", "vector": None, "fact": {
        "fact_id": uuid.uuid4().hex, "namespace": "team-a", "session_id": sid,
        "agent_id": "alice", "visibility": "private",
        "content": "alice decided the database is MongoDB", "created_at": "2026-01-01T00:00:00Z",
        "valid_from": "2026-01-01T00:00:00Z"}}
    records.insert(len(records) - 1, fact)
    records[-1]["counts"]["fact"] = records[-1]["counts"].get("fact", 0) + 1
    before = _session_ids(site)
    r = _import(site, "bob", _file(records))
    assert r.status_code == 403, r.text
    body = r.json()
    assert body["field"].endswith("agent_id") and "'alice'" in body["detail"]
    alices = [rec for rec in records if rec.get("type") == "turn"
              and rec["turn"]["agent_id"] == "alice"]
    assert alices and body["refused"] == len(alices) + 1  # her turns and the fact
    assert _session_ids(site) == before
    site.restart()
    assert site.http is not None
    facts = site.http.get(f"/v1/sessions/{sid}/facts", headers=site.auth("alice"))
    assert facts.status_code == 404  # the session was never written
    _team_b_unaffected(site)
    # Nor claim the session's header for alice.
    header = _renamed(_export(site), f"claimed-{uuid.uuid4().hex[:8]}")
    header = [rec for rec in header if rec.get("type") != "turn"
              or rec["turn"]["agent_id"] is None]
    header[-1]["counts"]["turn"] = sum(1 for rec in header if rec.get("type") == "turn")
    header[1]["state"]["info"] = {"title": "Alice's", "agent_id": "alice"}
    r = _import(site, "bob", _file(header))
    assert r.status_code == 403 and r.json()["field"] == "line 2: session.agent_id", r.text
    # Alice's own key may import her own data (and shared turns without an agent).
    r = _import(site, "alice", _file(records))
    assert r.status_code == 201, r.text


def test_records_of_another_namespace_are_refused(site: Installation) -> None:
    records = _renamed(_export(site), f"foreign-{uuid.uuid4().hex[:8]}")
    r = _import(site, "b", _file(records))
    assert r.status_code == 422, r.text
    assert "namespace 'team-a'" in r.json()["detail"]
    assert r.json()["field"] == "line 2: session.namespace"


@pytest.mark.parametrize("line", [
    "{not json", "[1,2]", '{"type":"turn","turn":{}}', '{"type":"session"}',
    "[" * 100_000 + "]" * 100_000, '{"type":"nope"}',
])
def test_malformed_records_are_a_4xx_never_a_5xx(site: Installation, line: str) -> None:
    records = _renamed(_export(site), f"malformed-{uuid.uuid4().hex[:8]}")
    body = _file(records[:2]) + line.encode() + b"\n" + _file(records[2:])
    r = _import(site, "a", body)
    assert 400 <= r.status_code < 500, (r.status_code, r.text[:300])
    assert r.json()["field"].startswith("line 3")


def test_a_refused_file_lists_every_refused_record(site: Installation) -> None:
    records = _renamed(_export(site), f"many-{uuid.uuid4().hex[:8]}")
    bad = [i for i, rec in enumerate(records) if rec.get("type") == "turn"]
    for i in bad:
        records[i]["turn"]["metadata"] = {"n": 2**70}
    records[1]["state"]["surprise"] = 1
    r = _import(site, "a", _file(records))
    assert r.status_code == 422
    listed = r.json()["records"]
    assert r.json()["refused"] == len(bad) + 1 == len(listed)
    assert {(x["line"], x["field"]) for x in listed} == {
        (2, "session.state.surprise"), *((i + 1, "turn.metadata") for i in bad)}


def _session_ids(site: Installation) -> list[str]:
    assert site.client is not None
    return sorted(site.client.admin.sessions())
