"""The HTTP API's findings of the multi-agent security pass (issue 17), each reproduced:
metric labels from closed sets, timestamps outside the representable range, the existence
oracle of `related_sessions`, the body limit after authentication, and per-agent keys."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

pytest.importorskip("fastapi")

from support.api_app import Api, live_api


@pytest.fixture(scope="module")
def api() -> Iterator[Api]:
    with live_api() as server:
        yield server


def sid() -> str:
    return f"s-{uuid.uuid4().hex[:10]}"


def _series(text: str, name: str) -> int:
    return sum(1 for line in text.splitlines() if line.startswith(name + "{"))


def test_made_up_methods_do_not_grow_the_metrics(api: Api) -> None:
    """300 requests with made-up methods (no key needed) leave /metrics as it was: the
    method label is `other` for all of them, never the raw method (each leaked one would
    add series: 300 are as telling as 2000, which cost this suite 11 s). In process (the
    same app and registry)."""
    with TestClient(api.app) as http:  # type: ignore[arg-type]
        for i in range(20):  # the `other` series of this route and status exist from here
            http.request(f"W{i:04d}", f"/v1/sessions/s{i}/turns")
        http.get("/metrics")
        before = http.get("/metrics").text
        for i in range(300):
            r = http.request(f"X{i:04d}", f"/v1/sessions/s{i}/turns")
            assert r.status_code == 405
        after = http.get("/metrics").text
    for name in ("hivemem_http_requests_total", "hivemem_http_request_seconds_bucket"):
        assert _series(after, name) == _series(before, name)
    assert "X0001" not in after and 'method="other"' in after
    assert abs(len(after) - len(before)) < 200  # counter digits only


@pytest.mark.parametrize("timestamp", ["9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+05:00"])
def test_timestamps_outside_the_range_are_a_422(api: Api, timestamp: str) -> None:
    with api.http(api.key_a) as http:
        r = http.post(f"/v1/sessions/{sid()}/turns",
                      json={"role": "user", "content": "x", "timestamp": timestamp})
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "timestamp"


@pytest.mark.parametrize("timestamp", [0, 1_700_000_000, 1.5, True])
def test_a_number_is_not_a_date_time(api: Api, timestamp: object) -> None:
    with api.http(api.key_a) as http:
        r = http.post(f"/v1/sessions/{sid()}/turns",
                      json={"role": "user", "content": "x", "timestamp": timestamp})
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "timestamp"


def test_related_sessions_answer_the_same_for_not_yours_and_missing(api: Api) -> None:
    mine, theirs = sid(), sid()
    with api.http(api.key_a) as ha, api.http(api.key_b) as hb:
        assert ha.post(f"/v1/sessions/{mine}/turns",
                       json={"role": "user", "content": "ours"}).status_code == 201
        assert hb.post(f"/v1/sessions/{theirs}/turns",
                       json={"role": "user", "content": "theirs"}).status_code == 201
        answers = []
        for other in (theirs, sid()):
            r = ha.post(f"/v1/sessions/{mine}/recall",
                        json={"query": "ours", "related_sessions": [other]})
            body = r.json()
            body.pop("instance", None)
            answers.append((r.status_code, body))
    assert answers[0] == answers[1]
    assert answers[0][0] == 404


def test_the_body_limit_comes_after_authentication(api: Api) -> None:
    huge = {"role": "user", "content": "x" * (70 * 1024)}
    with api.http(None) as http:
        r = http.post(f"/v1/sessions/{sid()}/turns", json=huge)
        assert r.status_code == 401  # no key: its body is never read, whatever its size
    with api.http("hm_000000000000_notarealkeynotarealkey") as http:
        assert http.post(f"/v1/sessions/{sid()}/turns", json=huge).status_code == 401
    with api.http(api.key_a) as http:
        assert http.post(f"/v1/sessions/{sid()}/turns", json=huge).status_code == 413


def _raw_post(api: Api, key: str | None, declared: int) -> tuple[bytes, float]:
    """A POST that declares `declared` bytes and sends 10: the answer, and how long it took."""
    host, port = api.url.removeprefix("http://").split(":")
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    head = (f"POST /v1/sessions/{sid()}/turns HTTP/1.1\r\nHost: {host}\r\n{auth}"
            f"Content-Type: application/json\r\nContent-Length: {declared}\r\n\r\n")
    started = time.perf_counter()
    with socket.create_connection((host, int(port)), timeout=20) as sock:
        sock.sendall(head.encode() + b'{"role": "')
        answer = sock.recv(4096)
    return answer, time.perf_counter() - started


def test_a_declared_body_over_the_limit_is_refused_without_waiting_for_it(api: Api) -> None:
    answer, _ = _raw_post(api, api.key_a, 50 * 1024 * 1024)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    answer, _ = _raw_post(api, None, 50 * 1024 * 1024)
    assert answer.startswith(b"HTTP/1.1 401"), answer[:200]


def test_an_agent_key_acts_as_its_agent_only(api: Api) -> None:
    key, info = api.keys.create("team-a", "alice's", agent_id="alice")
    assert (info.namespace, info.agent_id, info.kind) == ("team-a", "alice", "agent")
    session = sid()
    with api.http(key) as alice, api.http(api.key_a) as orchestrator:
        r = alice.post(f"/v1/sessions/{session}/turns", json={
            "role": "user", "content": "alice's private plan", "visibility": "private"})
        assert r.status_code == 201, r.text
        assert (r.json()["agent_id"], r.json()["visibility"]) == ("alice", "private")
        r = alice.post(f"/v1/sessions/{session}/turns", json={
            "role": "user", "content": "as alice", "agent_id": "alice"})
        assert r.status_code == 201 and r.json()["agent_id"] == "alice"
        r = orchestrator.post(f"/v1/sessions/{session}/turns", json={
            "role": "user", "content": "bob's secret launch code", "agent_id": "bob",
            "visibility": "private"})
        assert r.status_code == 201  # a namespace key may act as any of its agents
        before = api.client.admin.session_stats(f"team-a/{session}").last_seq
        for method, path, body, params in (
            ("POST", f"/v1/sessions/{session}/turns",
             {"role": "user", "content": "impersonate", "agent_id": "bob"}, None),
            ("POST", "/v1/turns/batch", {"turns": [
                {"session_id": session, "role": "user", "content": "ok"},
                {"session_id": session, "role": "user", "content": "no", "agent_id": "bob"}]},
             None),
            ("POST", f"/v1/sessions/{session}/recall", {"query": "x", "agent_id": "bob"}, None),
            ("GET", f"/v1/sessions/{session}/facts", None, {"agent_id": "bob"}),
            ("GET", f"/v1/sessions/{session}/traces", None, {"agent_id": "bob"}),
            ("GET", f"/v1/sessions/{session}/timeline", None, {"agent_id": "bob"}),
        ):
            r = alice.request(method, path, json=body, params=params)
            assert r.status_code == 403, (path, r.text)
            assert r.json()["field"].endswith("agent_id")
        # nothing written
        assert api.client.admin.session_stats(f"team-a/{session}").last_seq == before
        api.drain()
        r = alice.post(f"/v1/sessions/{session}/recall", json={"query": "plan launch code"})
        contents = {i["content"] for i in r.json()["items"]}
        assert "alice's private plan" in contents
        assert "bob's secret launch code" not in contents
        timeline = alice.get(f"/v1/sessions/{session}/timeline").json()["events"]
        assert "bob's secret launch code" not in str(timeline)
        assert "alice's private plan" in str(timeline)
        with httpx.Client(base_url=api.url, headers={"X-API-Key": key}) as by_header:
            assert by_header.get(f"/v1/sessions/{session}/stats").status_code == 200


def test_serve_says_where_and_warns_beyond_loopback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import uvicorn
    from click.testing import CliRunner

    from hivemem.cli.main import cli

    for name in ("HIVEMEM_REDIS__URL", "HIVEMEM_QDRANT__URL", "HIVEMEM_QDRANT__PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HIVEMEM_EMBEDDING__PROVIDER", "hashing")
    served: list[dict[str, object]] = []

    class Bound:  # what `serve` binds, without a real socket
        def __init__(self, address: tuple[str, int]) -> None:
            self.address = address

        def getsockname(self) -> tuple[str, int]:
            return self.address

    def bind(config: uvicorn.Config) -> Bound:
        return Bound((config.host, config.port))

    monkeypatch.setattr(uvicorn.Config, "bind_socket", bind)
    real_run = uvicorn.Server.run

    def run(server: uvicorn.Server, sockets: Any = None) -> None:
        if sockets is None:  # another server (the folder owner's API for guests)
            real_run(server)
        else:
            served.append({"host": server.config.host})

    monkeypatch.setattr(uvicorn.Server, "run", run)
    store = tmp_path / "m"
    for host, warned in (("127.0.0.1", False), ("0.0.0.0", True)):
        done = CliRunner().invoke(cli, ["--local", str(store), "serve", "--host", host])
        assert done.exit_code == 0, done.output
        assert f"hivemem serve: mode=local, store={store}" in done.output
        assert ("beyond loopback" in done.output) is warned
        assert f"listening on http://{host}:8080 (API docs: http://{host}:8080/docs)" in \
            done.output
    assert [s["host"] for s in served] == ["127.0.0.1", "0.0.0.0"]
