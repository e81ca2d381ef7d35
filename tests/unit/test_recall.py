"""Recall through the whole pipeline: producer, stream, embed worker (burst), Qdrant."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from hivemem import MemoryClient, Settings, ValidationError
from hivemem.providers.embedders import HashingEmbedder
from hivemem.store.qdrant_server import ServerVectorStore
from hivemem.store.state import SessionState
from hivemem.store.streams import StreamStore
from hivemem.workers.embed import EmbedHandler, embed_kind
from hivemem.workers.stream import StreamWorker


@pytest.fixture
def pipeline(redis_client: redis.Redis, settings: Settings, embedder: HashingEmbedder):
    vectors = ServerVectorStore(settings.qdrant, embedder.dim, location=":memory:")
    client = MemoryClient(settings, redis_client=redis_client, vector_store=vectors,
                          embedder=embedder)

    def drain() -> None:
        state = SessionState(redis_client, client.keys, settings.ingest.recent_window)
        worker = StreamWorker(
            embed_kind(EmbedHandler(embedder, vectors, state, StreamStore(redis_client, client.keys),
                                    client.keys)),
            StreamStore(redis_client, client.keys),
            settings.worker,
        )
        worker.run(burst=True)

    yield client, drain
    vectors.close()


def test_recall_finds_the_relevant_turn_within_budget(pipeline) -> None:
    client, drain = pipeline
    client.ingest("s1", "user", "Decision: the database is PostgreSQL with JSON columns",
                  markers=["decision"])
    for i in range(30):
        client.ingest("s1", "assistant", f"filler chatter about the weather number {i}")
    client.ingest("s2", "user", "the database is Oracle")  # another session: never recalled
    drain()
    assert client.wait_until_processed("s1", timeout=1).turns_processed == 31
    items = client.recall("s1", "which database is it", token_budget=40)
    assert items[0].content.startswith("Decision: the database is PostgreSQL")
    assert items[0].components.marker == 1.0 and items[0].components.dense > 0.15
    assert all(i.session_id == "s1" for i in items)
    assert sum(i.token_count for i in items) <= 40
    assert items == sorted(items, key=lambda i: i.score, reverse=True)
    # The budget is a hard limit even when the best item alone does not fit.
    assert client.recall("s1", "which database is it", token_budget=1) == []


def test_recent_turns_are_recallable_before_embedding(pipeline) -> None:
    client, _drain = pipeline
    client.ingest("s1", "user", "brand new turn about llamas")
    items = client.recall("s1", "llamas")
    assert [i.content for i in items] == ["brand new turn about llamas"]
    assert items[0].components.dense == 0.0 and items[0].components.recency == 1.0


def test_recall_drops_near_duplicates(pipeline) -> None:
    client, drain = pipeline
    for _ in range(3):
        client.ingest("s1", "user", "We ship on Friday.")
    client.ingest("s1", "user", "Something else entirely")
    drain()
    items = client.recall("s1", "when do we ship")
    assert [i.content for i in items].count("We ship on Friday.") == 1


def test_recall_limit_and_read_only(pipeline, redis_client: redis.Redis) -> None:
    client, drain = pipeline
    for i in range(10):
        client.ingest("s1", "user", f"note {i} on topic alpha")
    drain()
    before = {k: redis_client.type(k) for k in redis_client.keys("*")}
    dump_before = {k: redis_client.dump(k) for k in before if before[k] != b"stream"}
    assert len(client.recall("s1", "alpha", limit=3)) == 3
    assert {k: redis_client.dump(k) for k in dump_before} == dump_before
    with pytest.raises(ValidationError) as info:
        client.recall("s1", "alpha", token_budget=0)
    assert info.value.field == "token_budget"
    with pytest.raises(ValidationError):
        client.recall("s1", "")
    assert client.recall("unknown-session", "alpha") == []


def test_embedded_mode_persists_across_restarts(tmp_path: Path, settings: Settings) -> None:
    path = tmp_path / "mem"
    with MemoryClient.local(path, settings, embedder=HashingEmbedder(1024)) as client:
        client.ingest("s1", "user", "The launch date is March 3rd", turn_id="launch")
        for i in range(20):
            client.ingest("s1", "assistant", f"unrelated remark {i}")
        client.wait_until_processed("s1", timeout=10)
    with MemoryClient.local(path, settings, embedder=HashingEmbedder(1024)) as client:
        stats = client.get_session_stats("s1")
        assert stats.turns_enqueued == stats.turns_processed == 21
        assert client.ingest("s1", "user", "dup", turn_id="launch").duplicate
        nxt = client.ingest("s1", "user", "after restart")
        assert nxt.seq == 22
        client.wait_until_processed("s1", timeout=10)
        items = client.recall("s1", "when is the launch date")
        assert items[0].content == "The launch date is March 3rd"
        assert client.sessions() == ["s1"]


def test_close_drains_the_queue(tmp_path: Path, settings: Settings) -> None:
    path = tmp_path / "mem"
    client = MemoryClient.local(path, settings, embedder=HashingEmbedder(1024))
    client.ingest_many([{"session_id": "s1", "role": "user", "content": f"turn {i}"}
                        for i in range(200)])
    client.close()  # no wait_until_processed: close must not lose the queued turns
    with MemoryClient.local(path, settings, embedder=HashingEmbedder(1024)) as again:
        assert again.get_session_stats("s1").turns_processed == 200


async def _async_roundtrip(path: Path, settings: Settings) -> None:
    from hivemem import AsyncMemoryClient

    async with AsyncMemoryClient.local(path, settings, embedder=HashingEmbedder(1024)) as client:
        t = await client.ingest("s1", "user", "async hello world")
        many = await client.ingest_many([{"session_id": "s1", "role": "user", "content": "x"}])
        assert (t.seq, many[0].seq) == (1, 2)
        await client.wait_until_processed("s1", timeout=10)
        items = await client.recall("s1", "hello world")
        assert items[0].content == "async hello world"
        assert (await client.get_session_stats("s1")).turns_processed == 2


def test_async_client(tmp_path: Path, settings: Settings) -> None:
    import asyncio

    asyncio.run(_async_roundtrip(tmp_path / "mem", settings))
