"""The smaller findings of issue 35, through the HTTP API with real keys: who may change a
session's header (and that `created_at` never changes), one Authorization header per
request, Swagger UI served from the server itself, and MCP argument errors on one line."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("fastapi")

from starlette.testclient import TestClient
from support.api_app import Api, build_api

from hivemem.api.docs import swagger_assets


@pytest.fixture(scope="module")
def api() -> Iterator[tuple[Api, TestClient]]:
    built = build_api()
    with TestClient(built.app, raise_server_exceptions=False) as http:  # type: ignore[arg-type]
        yield built, http


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_only_a_namespace_key_or_the_sessions_agent_changes_its_header(
    api: tuple[Api, TestClient],
) -> None:
    built, http = api
    alice, _ = built.keys.create("team-a", "alice", agent_id="alice")
    bob, _ = built.keys.create("team-a", "bob", agent_id="bob")
    sid = f"s-{uuid.uuid4().hex[:8]}"
    r = http.post(f"/v1/sessions/{sid}/turns", headers=_auth(built.key_a),
                  json={"role": "user", "content": "hello", "timestamp": "2026-01-02T03:04:05Z"})
    assert r.status_code == 201, r.text
    began = http.get(f"/v1/sessions/{sid}", headers=_auth(built.key_a)).json()["created_at"]
    # Alice takes the unheld session: hers from now on.
    r = http.patch(f"/v1/sessions/{sid}", headers=_auth(alice), json={"title": "Alice's"})
    assert r.status_code == 200 and r.json()["agent_id"] == "alice", r.text
    assert r.json()["created_at"] == began  # the first PATCH does not rewrite it
    # Bob may neither rename it nor make himself its agent.
    r = http.patch(f"/v1/sessions/{sid}", headers=_auth(bob), json={"title": "Bob's now"})
    assert r.status_code == 403 and r.json()["field"] == "agent_id", r.text
    info = http.get(f"/v1/sessions/{sid}", headers=_auth(built.key_a)).json()
    assert (info["title"], info["agent_id"]) == ("Alice's", "alice")
    # Alice again, and the namespace key (which may name any of its agents), may.
    assert http.patch(f"/v1/sessions/{sid}", headers=_auth(alice),
                      json={"title": "Renamed"}).status_code == 200
    r = http.patch(f"/v1/sessions/{sid}", headers=_auth(built.key_a),
                   json={"title": "Handed over", "agent_id": "bob"})
    assert r.status_code == 200 and r.json()["agent_id"] == "bob"
    assert r.json()["created_at"] == began


def test_two_authorization_headers_are_a_400(api: tuple[Api, TestClient]) -> None:
    built, http = api
    headers = [("Authorization", f"Bearer {built.key_a}"),
               ("Authorization", f"Bearer {built.key_b}")]
    r = http.request("GET", "/v1/sessions", headers=headers)
    assert r.status_code == 400, r.text
    r = http.request("POST", "/v1/sessions/s-two/turns", headers=headers,
                     json={"role": "user", "content": "x"})
    assert r.status_code == 400, r.text
    assert "one Authorization" in r.json()["detail"]
    keys = [("X-API-Key", built.key_a), ("X-API-Key", built.key_b)]
    assert http.request("GET", "/v1/sessions", headers=keys).status_code == 400
    assert http.get("/v1/sessions", headers=_auth(built.key_a)).status_code == 200


def test_docs_load_their_assets_from_this_server(api: tuple[Api, TestClient]) -> None:
    _, http = api
    assert swagger_assets() is not None, "swagger-ui-py (the api extra) is not installed"
    page = http.get("/docs")
    assert page.status_code == 200
    assert "cdn" not in page.text.lower() and "https://" not in page.text
    for name in ("swagger-ui-bundle.js", "swagger-ui.css"):
        assert f"/docs/static/{name}" in page.text
        asset = http.get(f"/docs/static/{name}")
        assert asset.status_code == 200 and len(asset.content) > 10_000


def test_mcp_argument_errors_are_one_line() -> None:
    pytest.importorskip("mcp")
    from mcp.server.mcpserver.exceptions import ToolError

    from hivemem.mcp import build_server

    def no_memory(_headers: object) -> object:
        raise AssertionError("arguments are checked before any memory is used")

    server = build_server(no_memory)  # type: ignore[arg-type]
    call = server.call_tool("ingest", {"session_id": "s", "content": "x", "role": "bogus",
                                       "visibility": 3})
    # On a thread of its own: a test elsewhere may leave an event loop running on this one.
    with ThreadPoolExecutor(1) as pool, pytest.raises(ToolError) as caught:
        pool.submit(asyncio.run, call).result()
    text = str(caught.value)
    assert text.startswith("role: ") and "(and 1 more)" in text, text
    assert "\n" not in text and "http" not in text
