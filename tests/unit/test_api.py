"""The HTTP API against a real uvicorn server on loopback, through httpx.

One server per module (fakeredis + Qdrant `:memory:` + the hashing embedder); each test
uses its own session ids.
"""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import structlog

pytest.importorskip("fastapi")

from support.api_app import Api, live_api

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def api() -> Iterator[Api]:
    with live_api() as server:
        yield server


def sid() -> str:
    return f"s-{uuid.uuid4().hex[:10]}"


def test_health_readiness_and_openapi(api: Api) -> None:
    with api.http(None) as http:
        assert http.get("/healthz").json() == {"status": "ok", "checks": {}}
        ready = http.get("/readyz")
        assert ready.status_code == 200
        assert ready.json()["checks"] == {"redis": "ok", "vectors": "ok"}
        spec = http.get("/openapi.json").json()
    assert "/v1/sessions/{session_id}/recall" in spec["paths"]
    checked_in = json.loads((REPO / "docs" / "openapi.json").read_text())
    assert checked_in == spec, "docs/openapi.json is stale: python -m hivemem.api.spec"


def test_api_keys_are_required(api: Api) -> None:
    with api.http(None) as http:
        r = http.post(f"/v1/sessions/{sid()}/turns", json={"role": "user", "content": "x"})
        assert r.status_code == 401
        assert r.headers["content-type"] == "application/problem+json"
        assert r.json()["status"] == 401
    with api.http("hm_000000000000_notarealkeynotarealkey") as http:
        assert http.get(f"/v1/sessions/{sid()}/stats").status_code == 401
    with httpx.Client(base_url=api.url, headers={"X-API-Key": api.key_a}) as http:
        r = http.post(f"/v1/sessions/{sid()}/turns", json={"role": "user", "content": "x"})
        assert r.status_code == 201


def test_ingest_recall_stats_facts_traces(api: Api) -> None:
    session = sid()
    with api.http(api.key_a) as http:
        r = http.post(f"/v1/sessions/{session}/turns", json={
            "role": "user", "content": "We decided to use PostgreSQL for the database",
            "agent_id": "planner", "turn_id": "t-1"})
        assert r.status_code == 201, r.text
        assert len(r.headers["x-request-id"]) == 16
        body = r.json()
        assert (body["seq"], body["namespace"], body["visibility"]) == (1, "team-a", "shared")
        again = http.post(f"/v1/sessions/{session}/turns", json={
            "role": "user", "content": "We decided to use PostgreSQL", "turn_id": "t-1"},
            headers={"X-Request-ID": "trace-42"})
        assert again.headers["x-request-id"] == "trace-42"
        assert again.json()["duplicate"] is True
        batch = http.post("/v1/turns/batch", json={"turns": [
            {"session_id": session, "role": "assistant", "content": f"noted {i}",
             "agent_id": "coder"} for i in range(3)]})
        assert batch.status_code == 201, batch.text
        assert [t["seq"] for t in batch.json()["turns"]] == [2, 3, 4]
        api.drain()
        recall = http.post(f"/v1/sessions/{session}/recall", json={
            "query": "which database?", "agent_id": "planner", "preset": "balanced",
            "explain": True, "token_budget": 200})
        assert recall.status_code == 200, recall.text
        data = recall.json()
        assert data["items"][0]["content"].startswith("We decided to use PostgreSQL")
        assert data["used_tokens"] <= 200 and "PostgreSQL" in data["context"]
        stats = http.get(f"/v1/sessions/{session}/stats").json()
        assert stats["turns_enqueued"] == 4 and stats["turns_processed"] == 4
        closed = http.post(f"/v1/sessions/{session}/episodes/close", json={})
        assert closed.status_code == 200 and closed.json()["seq"] == 5
        assert http.get(f"/v1/sessions/{session}/facts").json() == {"facts": []}
        assert http.get(f"/v1/sessions/{session}/traces?count=5").json() == {"traces": []}


def test_isolation_between_namespaces_and_agents(api: Api) -> None:
    a, b = sid(), sid()
    with api.http(api.key_a) as ha, api.http(api.key_b) as hb:
        for agent, vis, text in (("alice", "shared", "The launch date is Friday"),
                                 ("alice", "private", "Alice thinks the launch will slip"),
                                 ("bob", "private", "Bob has the launch password")):
            r = ha.post(f"/v1/sessions/{a}/turns", json={
                "role": "user", "content": text, "agent_id": agent, "visibility": vis})
            assert r.status_code == 201
        assert hb.post(f"/v1/sessions/{b}/turns", json={
            "role": "user", "content": "Team B launch is Monday"}).status_code == 201
        api.drain()

        def recalled(http: httpx.Client, session: str, agent: str | None) -> set[str]:
            r = http.post(f"/v1/sessions/{session}/recall",
                          json={"query": "launch", "agent_id": agent})
            assert r.status_code == 200, r.text
            return {i["content"] for i in r.json()["items"]}

        assert recalled(ha, a, "alice") == {"The launch date is Friday",
                                            "Alice thinks the launch will slip"}
        assert recalled(ha, a, "bob") == {"The launch date is Friday",
                                          "Bob has the launch password"}
        assert recalled(hb, b, None) == {"Team B launch is Monday"}
        timeline = ha.get(f"/v1/sessions/{a}/timeline",
                          params={"agent_id": "alice", "kinds": ["turn"]})
        assert timeline.status_code == 200, timeline.text
        assert [e["summary"] for e in timeline.json()["events"]] == [
            "The launch date is Friday", "Alice thinks the launch will slip"]
        # Guessed ids from the other namespace look exactly like missing sessions.
        missing = sid()
        for session in (a, missing):
            for method, path, body in (
                ("POST", f"/v1/sessions/{session}/recall", {"query": "launch"}),
                ("GET", f"/v1/sessions/{session}/stats", None),
                ("GET", f"/v1/sessions/{session}/facts", None),
                ("GET", f"/v1/sessions/{session}/traces", None),
                ("GET", f"/v1/sessions/{session}/timeline", None),
                ("POST", f"/v1/sessions/{session}/episodes/close", {}),
            ):
                r = hb.request(method, path, json=body)
                assert r.status_code == 404, (method, path, r.text)
                assert r.json()["detail"] == "no such session"
        r = hb.post(f"/v1/sessions/{b}/recall",
                    json={"query": "launch", "related_sessions": [a]})
        assert r.status_code == 404
        # A write to team A's id is team B's own session of that id (201, like any new id).
        r = hb.post(f"/v1/sessions/{a}/turns", json={"role": "user", "content": "b's own"})
        assert (r.status_code, r.json()["seq"]) == (201, 1)
        r = hb.post("/v1/turns/batch", json={"turns": [
            {"session_id": a, "role": "user", "content": "b's own again"}]})
        assert r.status_code == 201
        assert "Friday" not in hb.post(f"/v1/sessions/{a}/recall",
                                       json={"query": "launch"}).text
    assert api.client.admin.session_stats(f"team-a/{a}").turns_enqueued == 3  # nothing got in
    assert api.client.admin.session_stats(f"team-b/{a}").turns_enqueued == 2


@pytest.mark.parametrize(("body", "status", "field"), [
    ({"role": "robot", "content": "x"}, 422, "role"),
    ({"role": "user", "content": "   "}, 422, "content"),
    ({"role": "user", "content": ""}, 422, "content"),
    ({"role": "user", "content": "x", "visibility": "private"}, 422, "visibility"),
    ({"role": "user", "content": "x", "markers": ["bogus"]}, 422, "markers[0]"),
    ({"role": "user", "content": "x", "timestamp": "2026-01-01T00:00:00"}, 422, "timestamp"),
    ({"role": "user", "content": "x", "surprise": 1}, 422, "surprise"),
    ({"role": "user"}, 422, "content"),
])
def test_bad_input_is_a_4xx_problem_with_its_field(
    api: Api, body: dict[str, object], status: int, field: str
) -> None:
    with api.http(api.key_a) as http:
        r = http.post(f"/v1/sessions/{sid()}/turns", json=body)
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    problem = r.json()
    assert problem["field"] == field and problem["status"] == status and problem["title"]


def test_malformed_oversized_and_odd_requests(api: Api) -> None:
    session = sid()
    with api.http(api.key_a) as http:
        r = http.post(f"/v1/sessions/{session}/turns", content=b"{not json",
                      headers={"content-type": "application/json"})
        assert r.status_code == 400 and r.json()["type"].endswith("/malformed")
        huge = {"role": "user", "content": "x" * (70 * 1024)}
        # The server answers 413 before it reads the body and drops the rest before it
        # closes: the client, still sending, reads the 413 (not a reset).
        r = http.post(f"/v1/sessions/{session}/turns", json=huge)
        assert r.status_code == 413 and r.json()["status"] == 413
        assert http.get(f"/v1/sessions/{session}").status_code == 404

        def chunks() -> Iterator[bytes]:
            yield b'{"role": "user", "content": "'
            for _ in range(80):
                yield b"y" * 1024
            yield b'"}'

        r = http.post(f"/v1/sessions/{session}/turns", content=chunks(),
                      headers={"content-type": "application/json"})
        assert r.status_code == 413
        r = http.post(f"/v1/sessions/{'x' * 200}/turns", json={"role": "user", "content": "x"})
        assert r.status_code == 422 and r.json()["field"] == "session_id"
        r = http.post("/v1/turns/batch", json={"turns": [
            {"session_id": session, "role": "user", "content": "x"}] * 51})
        assert r.status_code == 422 and r.json()["field"] == "turns"
        r = http.post(f"/v1/sessions/{session}/recall", json={"query": "  "})
        assert r.status_code in (404, 422)
        http.post(f"/v1/sessions/{session}/turns", json={"role": "user", "content": "hi"})
        r = http.post(f"/v1/sessions/{session}/recall", json={"query": "  "})
        assert r.status_code == 422 and r.json()["field"] == "query"
        r = http.post(f"/v1/sessions/{session}/recall", json={"query": "hi", "token_budget": 0})
        assert r.status_code == 422 and r.json()["field"] == "token_budget"
        r = http.post(f"/v1/sessions/{session}/recall", json={"query": "hi", "preset": "nope"})
        assert r.status_code == 422 and r.json()["field"] == "preset"
        assert http.get("/v1/nowhere").status_code == 404
        assert http.delete(f"/v1/sessions/{session}/turns").status_code == 405


def test_metrics_move_and_secrets_never_reach_the_logs(api: Api) -> None:
    logs = io.StringIO()
    structlog.configure(  # JSON logs into a buffer (the server thread shares the config)
        processors=[structlog.contextvars.merge_contextvars,
                    structlog.processors.add_log_level, structlog.processors.JSONRenderer()],
        logger_factory=structlog.PrintLoggerFactory(file=logs),
    )
    session = sid()
    with api.http(api.key_a) as http:
        before = http.get("/metrics").text
        for i in range(3):
            http.post(f"/v1/sessions/{session}/turns",
                      json={"role": "user", "content": f"metric turn {i}"})
        api.drain()
        http.post(f"/v1/sessions/{session}/recall", json={"query": "metric"})
        after = http.get("/metrics").text

    def value(text: str, prefix: str, *labels: str) -> float:
        total = 0.0
        for line in text.splitlines():
            if line.startswith(prefix) and all(label in line for label in labels):
                total += float(line.rsplit(" ", 1)[1])
        return total

    assert value(after, "hivemem_ingested_turns_total") - value(
        before, "hivemem_ingested_turns_total") == 3
    assert value(after, "hivemem_stage_items_total{", 'stage="embed"', 'outcome="handled"') >= 3
    assert value(after, "hivemem_recall_seconds_count") > value(before,
                                                                "hivemem_recall_seconds_count")
    assert 'hivemem_stream_lag{stage="embed"} 0.0' in after
    assert "hivemem_http_requests_total" in after and "hivemem_redis_up 1.0" in after
    http_bad = api.http(api.key_a + "x")
    assert http_bad.get(f"/v1/sessions/{session}/stats").status_code == 401
    http_bad.close()
    text = logs.getvalue()
    assert '"event": "http.request"' in text and '"request_id"' in text
    assert session in text and '"namespace": "team-a"' in text
    assert '"turn_id": "' in text and '"seq": 3' in text
    # A key reads hm_<key id>_<secret>, and the secret may hold "_" itself: split twice.
    for secret in (api.key_a, api.key_b, api.key_a.split("_", 2)[2]):
        assert secret not in text
