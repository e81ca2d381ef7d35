"""The MCP server through the `mcp` client: `hivemem --local DIR mcp` over stdio and over
streamable HTTP (where every request needs an API key)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from hivemem.runtime.child_server import DATA_DIR, PIDFILE


def _data(result: Any) -> Any:
    assert not result.is_error, result.content
    return json.loads(result.content[0].text)


async def _session(tmp_path: Path, errlog: Any) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIVEMEM_")}
    env.update({"HIVEMEM_EMBEDDING__PROVIDER": "hashing", "HIVEMEM_EMBEDDING__DIM": "256",
                "HIVEMEM_EPISODES__MAX_TURNS": "2", "HIVEMEM_LOG_LEVEL": "warning"})
    params = StdioServerParameters(
        command=sys.executable,
        args=["-c", "from hivemem.cli.main import main; main()", "--local", str(tmp_path / "m"),
              "mcp", "--namespace", "team-a"],
        env=env, cwd=str(tmp_path),
    )
    async with stdio_client(params, errlog=errlog) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        listed = {t.name: t for t in (await session.list_tools()).tools}
        assert {"ingest", "recall", "known_facts"} <= set(listed)
        assert "remember" not in listed  # one word per concept: ingest
        # What the tools do to memory, for clients that ask before calling.
        for name in ("recall", "known_facts"):
            hints = listed[name].annotations
            assert hints is not None and hints.read_only_hint is True, name
            assert hints.destructive_hint is False, name
        writes = listed["ingest"].annotations
        assert writes is not None and writes.read_only_hint is False
        assert writes.destructive_hint is False
        first = _data(await session.call_tool("ingest", {
            "session_id": "proj", "role": "user", "agent_id": "planner",
            "content": "We decided to use PostgreSQL for the database"}))
        assert first["seq"] == 1
        _data(await session.call_tool("ingest", {
            "session_id": "proj", "content": "My own scratch note about PostgreSQL tuning",
            "agent_id": "coder", "visibility": "private"}))
        shared = _data(await session.call_tool("recall", {
            "session_id": "proj", "query": "which database?", "agent_id": "reviewer"}))
        texts = [i["content"] for i in shared["items"]]
        assert "We decided to use PostgreSQL for the database" in texts
        assert not any("scratch" in t for t in texts)
        own = _data(await session.call_tool("recall", {
            "session_id": "proj", "query": "PostgreSQL tuning", "agent_id": "coder"}))
        assert any("scratch" in i["content"] for i in own["items"])
        assert "PostgreSQL" in own["context"]
        deadline = time.monotonic() + 20
        facts: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            facts = _data(await session.call_tool("known_facts", {
                "session_id": "proj", "agent_id": "reviewer"}))["facts"]
            if facts:
                break
            await asyncio.sleep(0.2)
        assert any("PostgreSQL" in f["content"] and f["stated_by"] == "planner"
                   for f in facts), facts
        assert all(f["visibility"] == "shared" for f in facts)
        bad = await session.call_tool("ingest", {"session_id": "proj", "content": "  "})
        assert bad.is_error
        assert bad.content[0].text.endswith("content: must not be empty or whitespace")
        bad = await session.call_tool("ingest", {"session_id": "no/such id",
                                                   "content": "x"})
        assert bad.is_error
        text = bad.content[0].text
        assert "session_id: must match" in text and "\n" not in text
        bad = await session.call_tool("recall", {"session_id": "unknown", "query": "x"})
        assert bad.is_error and "session_id: no such session" in bad.content[0].text
        # Arguments the schema refuses: one line naming the field, no pydantic dump or URL.
        bad = await session.call_tool("ingest", {"session_id": "proj", "content": "x",
                                                   "role": "bogus"})
        text = bad.content[0].text
        assert bad.is_error and text.startswith("role: ") and "\n" not in text, text
        assert "http" not in text
        await _forget(session, listed, first["turn_id"])


async def _forget(session: Any, listed: dict[str, Any], turn_id: str) -> None:
    # Forget: destructive, and scoped like every tool.
    hints = listed["forget"].annotations
    assert hints is not None and hints.destructive_hint is True
    gone = _data(await session.call_tool("forget", {
        "session_id": "proj", "turn_ids": [turn_id]}))
    assert gone["target"] == "turns" and gone["removed"]["vectors"]["turns"] == 1
    left = _data(await session.call_tool("recall", {
        "session_id": "proj", "query": "which database?", "agent_id": "reviewer"}))
    assert not any("We decided" in i["content"] for i in left["items"])
    gone = _data(await session.call_tool("forget", {"session_id": "proj"}))
    assert gone["target"] == "session"
    bad = await session.call_tool("forget", {"session_id": "proj"})
    assert bad.is_error and "session_id: no such session" in bad.content[0].text


def test_mcp_over_stdio(tmp_path: Path) -> None:
    errlog = tmp_path / "stderr.txt"
    with errlog.open("w") as err:
        asyncio.run(asyncio.wait_for(_session(tmp_path, err), timeout=60))
    said = errlog.read_text()
    # The server says which store it serves, and a tool failure leaves no traceback.
    assert f"hivemem mcp: mode=local, store={tmp_path / 'm'}" in said
    assert "Traceback" not in said


def _cli(*args: str, env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, "-c", "from hivemem.cli.main import main; main()",
                           *args], check=False, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


async def _call(url: str, key: str, tool: str, args: dict[str, Any]) -> Any:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as http, \
            streamable_http_client(url, http_client=http) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        return await session.call_tool(tool, args)


async def _over_http(url: str, team: str, alice: str) -> None:
    stored = _data(await _call(url, team, "ingest", {
        "session_id": "web", "content": "The staging database is db-3"}))
    assert stored["seq"] == 1
    found = _data(await _call(url, team, "recall", {
        "session_id": "web", "query": "staging database"}))
    assert "db-3" in found["context"]
    # An agent key writes as its agent; naming another agent is an error result.
    mine = _data(await _call(url, alice, "ingest", {
        "session_id": "web", "content": "alice's note", "visibility": "private"}))
    assert mine["visibility"] == "private"
    refused = await _call(url, alice, "recall", {
        "session_id": "web", "query": "note", "agent_id": "bob"})
    assert refused.is_error and "agent_id: this key acts as agent 'alice' only" in (
        refused.content[0].text)


def test_mcp_over_streamable_http_needs_a_key(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIVEMEM_")}
    env["HIVEMEM_EMBEDDING__PROVIDER"] = "hashing"
    store = str(tmp_path / "m")
    team = _cli("--local", store, "apikey", "create", "default", env=env)
    alice = _cli("--local", store, "apikey", "create", "default", "--agent", "alice", env=env)
    server = subprocess.Popen(
        [sys.executable, "-c", "from hivemem.cli.main import main; main()", "--local",
         store, "mcp", "--transport", "http", "--port", str(port)],
        env=env, cwd=str(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
        import httpx

        for headers in ({}, {"Authorization": "Bearer hm_000000000000_notarealkeynotarealkey"}):
            r = httpx.post(url, headers={**headers, "accept": "application/json"}, json={
                "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
            assert r.status_code == 401, r.text
        asyncio.run(asyncio.wait_for(_over_http(url, team, alice), timeout=60))
        child = int((Path(store) / DATA_DIR / PIDFILE).read_text().strip())
    finally:
        server.terminate()
        server.wait(timeout=30)
    # SIGTERM closed the store: the embedded folder's child Redis server stopped with it.
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), "the MCP server left its embedded Redis server running"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is not alive: it only waits to be reaped
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_mcp_without_keys_stays_on_loopback(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from hivemem.cli.main import cli

    refused = CliRunner().invoke(cli, ["--local", str(tmp_path / "m"), "mcp", "--transport",
                                       "http", "--host", "0.0.0.0", "--no-auth"])
    assert refused.exit_code == 2 and "beyond loopback" in refused.output
