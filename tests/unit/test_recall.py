"""Recall through the whole pipeline: producer, stream, embed worker (burst), Qdrant."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from hivemem import MemoryClient, NotFound, Settings, ValidationError
from hivemem.providers.embedders import HashingEmbedder


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
    # Still queued (nothing in Qdrant yet): recall embeds it to score it like the others.
    assert client._service.reads.recaller().vectors.count_turns("s1") == 0
    assert items[0].components.dense > 0.2 and items[0].components.recency == 1.0


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
    with pytest.raises(NotFound):  # like everywhere else
        client.recall("unknown-session", "alpha")
    # The check rides in the recall's first read: nothing was kept for the unknown session
    # (the known facts are a per-session cache that an asker must not fill for others).
    known = client._service.reads.recaller().currency.known
    assert [str(n) for n in known._sessions] == ["s1"]


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
        assert client.admin.sessions() == ["s1"]


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


def test_episodes_in_embedded_mode(tmp_path: Path, settings: Settings) -> None:
    from datetime import UTC, datetime, timedelta

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    with MemoryClient.local(tmp_path / "mem", settings, embedder=HashingEmbedder(1024)) as client:
        with pytest.raises(ValidationError) as info:
            client.close_episode("never-seen")
        assert info.value.field == "session_id"
        for i in range(8):
            client.ingest("s1", "user", f"Let's go with Postgres for table {i}",
                          timestamp=t0 + timedelta(minutes=i))
        client.ingest("s1", "user", "a fresh topic after lunch about hiking trails",
                      timestamp=t0 + timedelta(hours=3))
        client.close_episode("s1")
        client.ingest("s1", "user", "one more about hiking boots",
                      timestamp=t0 + timedelta(hours=3, minutes=2))
        stats = client.wait_until_processed("s1", timeout=10, stage="boundary")
        assert stats.turns_enqueued == 10 and stats.turns_processed == 10
        assert stats.turns_assigned == 11  # ten turns and one control
        assert stats.episodes == 3 and stats.open_episode_turns == 1
        assert stats.markers.get("decision") == 8  # detected by the embed worker
        assert {s.stage for s in stats.stages} == {"embed", "boundary"}
        # (lag/pending may still show the last batch: the ack follows the commit)
        assert all(s.lag >= 0 and s.pending >= 0 for s in stats.stages)
        reasons = [(e.seq_start, e.seq_end, e.close_reason) for e in client.episodes("s1")]
        assert reasons == [(1, 6, "max_turns"), (7, 8, "time_gap"), (9, 9, "manual")]
        items = client.recall("s1", "hiking")
        current = [i for i in items if i.components.episode == 1.0]
        assert [i.seq for i in current] == [11]


def test_a_fact_that_restates_its_source_turn_stands_for_it(pipeline) -> None:
    """Fact and turn say the same thing (similarity between restates_threshold and the
    dedup threshold): only the fact takes a place; the turn is listed as its duplicate."""
    from datetime import UTC, datetime

    from hivemem import PRESETS
    from hivemem.domain.fact import Fact

    client, drain = pipeline
    turn = ("Caroline: I went to the LGBTQ support group yesterday and it was so powerful,"
            " everyone shared their stories")
    client.ingest("s1", "user", turn, turn_id="D1:3")
    for i in range(10):
        client.ingest("s1", "assistant", f"filler chatter about the weather number {i}")
    drain()
    now = datetime.now(UTC)
    fact = Fact(fact_id=f"{7:032x}", session_id="s1", created_at=now, valid_from=now,
                content="Caroline went to the LGBTQ support group", source_turn_ids=["D1:3"])
    emb = HashingEmbedder(1024)
    similarity = float(emb.embed_documents([fact.content])[0] @ emb.embed_documents([turn])[0])
    assert 0.5 <= similarity < 0.95  # a restatement, not a near-duplicate text
    client.vector_store().upsert_facts([fact], emb.embed_documents([fact.content]))
    query = "when did Caroline go to the support group"
    result = client.recall("s1", query, token_budget=2000, explain=True)
    ids = [i.source_id for i in result]
    assert fact.fact_id in ids and "D1:3" not in ids
    dropped = next(x for x in result.excluded if x.source_id == "D1:3")
    assert dropped.reason == "duplicate" and fact.fact_id in dropped.detail
    both = PRESETS["balanced"].model_copy(update={"restates_threshold": 1.0})
    ids = [i.source_id for i in client.recall("s1", query, token_budget=2000, preset=both)]
    assert fact.fact_id in ids and "D1:3" in ids


def test_recall_searches_facts_only_once_a_session_has_some(pipeline) -> None:
    """Before the first fact the two fact searches are skipped (they would find nothing);
    the first fact written is searched and recalled on the next call."""
    from datetime import UTC, datetime

    from hivemem.domain.fact import Fact

    client, drain = pipeline
    client.ingest("s1", "user", "we deploy the billing service on Fridays")
    drain()
    vectors = client._service.reads.recaller().vectors
    searched: list[str] = []
    for name in ("search_facts", "search_facts_lexical"):
        inner = getattr(vectors, name)

        def spy(*args: object, _inner=inner, _name=name, **kwargs: object) -> object:
            searched.append(_name)
            return _inner(*args, **kwargs)

        setattr(vectors, name, spy)
    query = "when do we deploy billing"
    assert [i.source_type for i in client.recall("s1", query)] == ["turn"]
    assert searched == []
    now = datetime.now(UTC)
    fact = Fact(fact_id=f"{9:032x}", session_id="s1", created_at=now, valid_from=now,
                content="billing deploys happen on Fridays")
    vectors.upsert_facts([fact], HashingEmbedder(1024).embed_documents([fact.content]))
    ids = [i.source_id for i in client.recall("s1", query)]
    assert sorted(searched) == ["search_facts", "search_facts_lexical"]
    assert fact.fact_id in ids


def test_the_lexical_searches_run_while_the_query_is_embedded(pipeline) -> None:
    """The caller embeds the query; the BM25 search runs meanwhile on the helper thread.
    The embedder here returns only once that search has begun on another thread (it would
    wait out its timeout, and the test fail, if recall ran the search before or after the
    embedding on the caller). With the helper busy, or an embedder that holds the GIL, a
    recall does it all on its own thread and recalls the same."""
    import threading

    client, drain = pipeline
    client.ingest("s1", "user", "the llama farm ships wool on Tuesdays")
    client.ingest("s1", "assistant", "noted, Tuesdays for the wool")
    drain()
    recaller = client._service.reads.recaller()
    before = [i.source_id for i in client.recall("s1", "when does the llama wool ship")]
    vectors, embedder = recaller.vectors, recaller.embedder
    searching = threading.Event()
    threads: list[str] = []
    inner_search, inner_embed = vectors.search_turns_lexical, embedder.embed_query

    def search(*args: object, **kwargs: object) -> object:
        threads.append(threading.current_thread().name)
        searching.set()
        return inner_search(*args, **kwargs)

    overlapped: list[bool] = []

    def embed(text: str) -> object:
        overlapped.append(searching.wait(timeout=10))
        return inner_embed(text)

    vectors.search_turns_lexical = search  # type: ignore[method-assign]
    embedder.embed_query = embed  # type: ignore[method-assign]
    embedder.releases_gil = True  # as ONNX's (the hashing embedder holds it: no helper)
    try:
        during = [i.source_id for i in client.recall("s1", "when does the llama wool ship")]
        assert overlapped == [True] and threads[0] != threading.current_thread().name
        recaller._inflight += 1  # as if another recall's lexical work were on the helper
        searching.set()  # (the embedding does not wait on it here)
        busy = [i.source_id for i in client.recall("s1", "when does the llama wool ship")]
        recaller._inflight -= 1
        assert threads[1] == threading.current_thread().name
        del embedder.releases_gil  # an embedder that holds the GIL: all on the caller
        held = [i.source_id for i in client.recall("s1", "when does the llama wool ship")]
        assert threads[2] == threading.current_thread().name
    finally:
        del vectors.search_turns_lexical, embedder.embed_query
        vars(embedder).pop("releases_gil", None)
    assert before == during == busy == held and before


def test_recall_takes_its_lexical_work_back_from_a_helper_that_has_not_begun(pipeline) -> None:
    """On an overloaded machine the helper may not have begun by the time the query is
    embedded: the caller then does the work itself instead of waiting for it. Here the
    helper thread is held by another task until after the recall has returned."""
    import threading

    client, drain = pipeline
    client.ingest("s1", "user", "the llama farm ships wool on Tuesdays")
    drain()
    recaller = client._service.reads.recaller()
    embedder = recaller.embedder
    before = [i.source_id for i in client.recall("s1", "when does the llama wool ship")]
    release = threading.Event()
    order: list[str] = []

    def hold() -> None:
        release.wait(timeout=10)
        order.append("helper free")

    embedder.releases_gil = True  # as ONNX's (the hashing embedder holds it: no helper)
    held = recaller._helper.submit(hold)
    try:
        items = [i.source_id for i in client.recall("s1", "when does the llama wool ship")]
        order.append("recalled")
    finally:
        release.set()
        held.result()
        del embedder.releases_gil
    assert order == ["recalled", "helper free"]
    assert items == before and items
    assert recaller._inflight == 0
