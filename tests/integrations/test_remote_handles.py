"""The adapters take a remote handle (`hivemem.connect`) as well as a local one: the same
flows over a live HTTP API (server mode on a throwaway redis-server)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

pytest.importorskip("fastapi")

from support.connections import remote_api

from hivemem import RemoteMemory, connect
from hivemem.testing import RedisServer


@pytest.fixture
def remote(redis_server: RedisServer) -> Iterator[RemoteMemory]:
    conn = redis_server.client()
    conn.flushall()
    with remote_api(conn) as (url, key_a, _key_b, _client), \
            connect(url, api_key=key_a, agent_id="planner") as memory:
        yield memory
    conn.flushall()
    conn.close()


def test_the_langgraph_store_over_http(remote: RemoteMemory,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("langgraph")
    from hivemem.integrations.langgraph import HivememStore

    def no_turn_reads(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a remote handle reads through the key index (latest)")

    # Every read goes through the server's key index (`GET .../latest`), not the turns.
    monkeypatch.setattr(remote, "timeline", no_turn_reads)
    store = HivememStore(remote)
    store.put(("decisions", "u1"), "db", {"text": "Orders live in MySQL"})
    store.put(("decisions", "u1"), "gone", {"text": "to be deleted"})
    store.delete(("decisions", "u1"), "gone")
    store.put(("decisions", "u1"), "db", {"text": "Orders live in Postgres"})
    store.put(("decisions", "u1"), "cache", {"text": "Sessions live in Redis"})
    got = store.get(("decisions", "u1"), "db")
    assert got is not None and got.value == {"text": "Orders live in Postgres"}
    found = store.search(("decisions",), query="where do orders live? Postgres")
    assert found[0].key == "db"
    assert store.list_namespaces() == [("decisions", "u1")]


def test_the_agents_session_over_http(remote: RemoteMemory) -> None:
    pytest.importorskip("agents")
    from hivemem.integrations.openai_agents import HivememSession

    session = HivememSession("remote-chat", remote)

    async def run() -> None:
        await session.add_items([{"role": "user", "content": "Call me Sam"},
                                 {"role": "assistant", "content": "Hi Sam"}])
        assert await session.get_items() == [{"role": "user", "content": "Call me Sam"},
                                             {"role": "assistant", "content": "Hi Sam"}]
        assert await session.pop_item() == {"role": "assistant", "content": "Hi Sam"}
        assert await session.get_items(limit=5) == [{"role": "user", "content": "Call me Sam"}]

    asyncio.run(run())
    # The recall for a query and the popped turns (`recall_latest`: two requests here).
    context = session.context("what is my name?")
    assert "Call me Sam" in context and "Hi Sam" not in context
