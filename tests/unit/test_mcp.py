"""The MCP server through the `mcp` client: `hivemem --local DIR mcp` over stdio."""

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


def _data(result: Any) -> Any:
    assert not result.is_error, result.content
    return json.loads(result.content[0].text)


async def _session(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIVEMEM_")}
    env.update({"HIVEMEM_EMBEDDING__PROVIDER": "hashing", "HIVEMEM_EMBEDDING__DIM": "256",
                "HIVEMEM_EPISODES__MAX_TURNS": "2", "HIVEMEM_LOG_LEVEL": "warning"})
    params = StdioServerParameters(
        command=sys.executable,
        args=["-c", "from hivemem.cli.main import main; main()", "--local", str(tmp_path / "m"),
              "mcp", "--namespace", "team-a"],
        env=env, cwd=str(tmp_path),
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = {t.name for t in (await session.list_tools()).tools}
        assert {"remember", "recall", "known_facts"} <= tools
        first = _data(await session.call_tool("remember", {
            "session_id": "proj", "role": "user", "agent_id": "planner",
            "content": "We decided to use PostgreSQL for the database"}))
        assert first["seq"] == 1
        _data(await session.call_tool("remember", {
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
        bad = await session.call_tool("remember", {"session_id": "proj", "content": "  "})
        assert bad.is_error


def test_mcp_over_stdio(tmp_path: Path) -> None:
    asyncio.run(asyncio.wait_for(_session(tmp_path), timeout=60))


async def _over_http(url: str) -> None:
    from mcp.client.streamable_http import streamable_http_client

    async with streamable_http_client(url) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        stored = _data(await session.call_tool("remember", {
            "session_id": "web", "content": "The staging database is db-3"}))
        assert stored["seq"] == 1
        found = _data(await session.call_tool("recall", {
            "session_id": "web", "query": "staging database"}))
        assert "db-3" in found["context"]


def test_mcp_over_streamable_http(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIVEMEM_")}
    env["HIVEMEM_EMBEDDING__PROVIDER"] = "hashing"
    server = subprocess.Popen(
        [sys.executable, "-c", "from hivemem.cli.main import main; main()", "--local",
         str(tmp_path / "m"), "mcp", "--transport", "http", "--port", str(port)],
        env=env, cwd=str(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
        asyncio.run(asyncio.wait_for(_over_http(f"http://127.0.0.1:{port}/mcp"), timeout=60))
    finally:
        server.terminate()
        server.wait(timeout=30)
