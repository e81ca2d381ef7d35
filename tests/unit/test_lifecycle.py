"""Memory lifecycle through the client, on fakeredis and a real redis-server: compaction
(preview == applied diff, the lock, the audit log), lifecycle-aware reads, sessions,
timelines, related sessions, and the scheduled compaction job."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from support.lifecycle_data import T0, fid, seed

from hivemem import MemoryClient, Settings
from hivemem.domain.audit import AuditEvent
from hivemem.domain.episode import Episode
from hivemem.domain.fact import Fact, FactStatus
from hivemem.domain.timeline import TimelineEvent, TimelinePage
from hivemem.errors import RetryLater, ValidationError
from hivemem.providers.embedders import HashingEmbedder
from hivemem.store.audit import AuditLog
from hivemem.store.reflection import ReflectionState
from hivemem.store.sessions import SessionStore
from hivemem.store.vectors.base import TURNS

Pipeline = tuple[MemoryClient, Callable[[], None]]


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """Staleness prunes even these small sessions (by default only above 200 facts), and a
    held session lock is given up on after 0.1 s (not 30)."""
    return settings.model_copy(update={
        "compaction": settings.compaction.model_copy(update={"stale_above": 0}),
        "reflection": settings.reflection.model_copy(update={"lock_wait_s": 0.1})})


def test_preview_then_compact_applies_exactly_the_preview(pipeline: Pipeline) -> None:
    client, drain = pipeline
    seed(client, drain)
    before = client.facts("s1", include_history=True)
    preview = client.admin.preview_compaction("s1")
    assert client.facts("s1", include_history=True) == before  # a preview writes nothing
    assert client.admin.audit_log("s1") == []
    assert [(e.fact_id, e.into) for e in preview.merged] == [(fid("s1-a"), fid("s1-b"))]
    assert [e.fact_id for e in preview.archived] == [fid("s1-mug")]
    assert [(e.fact_id, e.to_layer) for e in preview.promoted] == [(fid("s1-goal"), "operational")]

    applied = client.admin.compact("s1", expect=preview)
    assert applied == preview
    current = {f.fact_id: f for f in client.facts("s1")}
    assert set(current) == {fid("s1-b"), fid("s1-goal")}
    assert current[fid("s1-b")].source_turn_ids == ["t0", "t1"]
    assert current[fid("s1-goal")].layer == "operational"
    archived = {f.fact_id for f in client.facts("s1", include_archived=True)} - set(current)
    assert archived == {fid("s1-a"), fid("s1-mug")}
    assert len(client.facts("s1", include_history=True)) == 4  # nothing deleted

    log = client.admin.audit_log("s1")
    assert [e.seq for e in log] == list(range(1, len(log) + 1))
    assert {(e.fact_id, e.action) for e in log} == {
        (fid("s1-a"), "merged"), (fid("s1-b"), "reinforced"), (fid("s1-mug"), "archived"),
        (fid("s1-goal"), "moved")}
    why = client.admin.audit(fid("s1-a"))
    assert why[0].action == "merged" and why[0].related == [fid("s1-b")]
    assert why[0].cause == f"compaction {preview.run_id} (on demand)"
    assert {e.fact_id for e in client.admin.audit(fid("s1-b"))} == {fid("s1-a"), fid("s1-b")}
    assert client.admin.preview_compaction("s1").changes == 0  # settled


def test_compact_refuses_a_stale_preview_and_waits_for_reflection(pipeline: Pipeline) -> None:
    client, drain = pipeline
    facts = seed(client, drain)
    preview = client.admin.preview_compaction("s1")
    changed = facts[2].model_copy(update={"confidence": 0.95})
    client.vector_store().upsert_facts([changed], HashingEmbedder(1024).embed_documents(
        [changed.content]))
    with pytest.raises(ValidationError, match="changed since that preview"):
        client.admin.compact("s1", expect=preview.fingerprint)
    assert client.admin.audit_log("s1") == []

    lock = ReflectionState(client._redis, client.keys).lock("s1", 5000)
    lock.acquire(1)
    try:
        with pytest.raises(RetryLater):
            client.admin.compact("s1")
    finally:
        lock.release()
    assert client.admin.compact("s1").changes > 0


def test_recall_leaves_archived_facts_out_unless_asked(pipeline: Pipeline) -> None:
    client, drain = pipeline
    seed(client, drain)
    client.admin.compact("s1")

    def fact_ids(**kwargs: bool) -> set[str]:
        result = client.recall("s1", "blue mug mentioned", token_budget=2000, **kwargs)
        return {i.source_id for i in result if i.source_type == "fact"}

    assert fid("s1-mug") not in fact_ids()
    assert fid("s1-mug") in fact_ids(include_archived=True)
    with pytest.raises(ValidationError):
        client.facts("bad id!", include_archived=True)


def test_session_metadata_and_info(pipeline: Pipeline) -> None:
    client, drain = pipeline
    seed(client, drain)
    info = client.admin.set_session_info("s1", title="DB migration", agent_id="planner")
    assert (info.title, info.agent_id) == ("DB migration", "planner")
    assert info.last_active == T0 + timedelta(days=3)
    assert info.turns == 4 and info.facts_active == 4 and info.created_at is not None
    assert client.admin.session_info("s1").title == "DB migration"
    with pytest.raises(ValidationError, match="title"):
        client.admin.set_session_info("s1", title="  ")
    with pytest.raises(ValidationError, match="unknown session"):
        client.admin.session_info("nope")
    fresh = client.admin.set_session_info("planned", title="Later")
    assert fresh.turns == 0 and "planned" in client.admin.sessions()


def test_timeline_orders_turns_episodes_and_fact_changes(pipeline: Pipeline) -> None:
    client, drain = pipeline
    seed(client, drain)
    episode = Episode(episode_id="ep1", session_id="s1", index=1, turn_ids=("t0", "t1"),
                      seq_start=1, seq_end=2, started_at=T0,
                      ended_at=T0 + timedelta(days=1), close_reason="manual")
    SessionStore(client._redis, client.keys).add_episodes("s1", [episode])
    client.admin.compact("s1")
    events = client.admin.timeline(["s1"])
    # (The boundary stage closed episodes of its own too: a day's gap between turns.)
    assert [e.ref_id for e in events if e.ref_id in ("t0", "t1", "ep1")] == ["t0", "t1", "ep1"]
    assert [e.ref_id for e in events if e.kind == "turn"] == ["t0", "t1", "t2", "t3"]
    assert sum(e.kind == "fact" for e in events) == 4
    assert events == sorted(events, key=lambda e: e.sort_key())
    assert client.admin.timeline(["s1"]) == events
    episodes = client.admin.timeline(["s1"], kinds=["episode"])
    assert {e.kind for e in episodes} == {"episode"} and "ep1" in {e.ref_id for e in episodes}
    assert len(client.admin.timeline(["s1"], limit=2)) == 2
    with pytest.raises(ValidationError):
        client.admin.timeline(["s1"], kinds=["nope"])


def _busy_session(client: MemoryClient, drain: Callable[[], None], session: str = "s1",
                  turns: int = 40) -> None:
    """`seed`'s four turns and facts, then `turns` more (every third bob's private one),
    episodes closing every ten turns, and a compaction's fact changes."""
    seed(client, drain, session)
    for i in range(turns):
        private = i % 3 == 0
        client.ingest(session, "user", f"{session} note {i}", turn_id=f"n{i}",
                      agent_id="bob" if private else "alice",
                      visibility="private" if private else "shared",
                      timestamp=T0 + timedelta(days=5, minutes=i))
    drain()
    SessionStore(client._redis, client.keys).add_episodes(session, [
        Episode(episode_id=f"{session}-ep{k}", session_id=session, index=k,
                turn_ids=("t0",), seq_start=5 + 10 * k, seq_end=14 + 10 * k,
                started_at=T0 + timedelta(days=5, minutes=10 * k),
                ended_at=T0 + timedelta(days=5, minutes=10 * k + 9, seconds=30),
                close_reason="manual", agent_id="bob" if k == 2 else None,
                visibility="private" if k == 2 else "shared")
        for k in range(4)])
    client.admin.compact(session)
    # Bob's private fact, and changes about it and naming it (alice sees the second, without
    # the name or the reason).
    secret = Fact(fact_id=fid(f"{session}-secret"), session_id=session, agent_id="bob",
                  visibility="private", content="bob's secret", created_at=T0, valid_from=T0)
    client.vector_store().upsert_facts([secret], HashingEmbedder(1024).embed_documents(
        [secret.content]))
    AuditLog(client._redis, client.keys).append([
        AuditEvent(at=T0 + timedelta(days=5, minutes=20, seconds=i), session_id=session,
                   fact_id=fact, action="archived", actor="compaction", reason="because",
                   related=related)
        for i, (fact, related) in enumerate([
            (secret.fact_id, []), (fid(f"{session}-goal"), [secret.fact_id]),
            (secret.fact_id, [fid(f"{session}-goal")])])])


def _all_pages(read: Callable[[str | None], TimelinePage]) -> list[TimelineEvent]:
    out: list[TimelineEvent] = []
    cursor: str | None = None
    while True:
        page = read(cursor)
        out = page.events + out  # each page is older than the one before
        if page.next_cursor is None:
            return out
        cursor = page.next_cursor


def test_timeline_pages_return_every_event_once_in_order_with_scope(
    pipeline: Pipeline,
) -> None:
    client, drain = pipeline
    _busy_session(client, drain, "s1")
    _busy_session(client, drain, "s2", turns=13)
    everything = client.admin.timeline(["s1"])
    assert sum(e.kind == "turn" for e in everything) == 44
    assert sum(e.kind == "episode" for e in everything) == 4
    assert any(e.kind == "fact" for e in everything)
    for limit in (1, 7, 100):
        paged = _all_pages(lambda c, n=limit: client.admin.timeline_page(  # type: ignore[misc]
            ["s1"], limit=n, cursor=c))
        assert paged == everything, limit
    assert client.admin.timeline(["s1"], limit=9) == everything[-9:]
    both = client.admin.timeline(["s1", "s2"])
    assert _all_pages(lambda c: client.admin.timeline_page(["s1", "s2"], limit=6,
                                                           cursor=c)) == both
    turns_only = _all_pages(lambda c: client.admin.timeline_page(
        ["s1"], kinds=["turn"], limit=5, cursor=c))
    assert turns_only == [e for e in everything if e.kind == "turn"]

    alice = client.scoped(agent_id="alice")
    seen = alice.timeline("s1")
    paged = _all_pages(lambda c: alice.timeline_page("s1", limit=4, cursor=c))
    assert paged == seen
    assert not [e for e in paged if e.detail.get("visibility") == "private"]
    assert "s1-ep2" not in {e.ref_id for e in paged}  # bob's private episode
    assert len([e for e in paged if e.kind == "turn"]) == 44 - 14  # bob's 14 private turns
    assert fid("s1-secret") not in {e.ref_id for e in paged}
    named = [e for e in paged if e.kind == "fact" and e.detail["cause"] == ""
             and e.ref_id == fid("s1-goal")]
    assert len(named) == 1
    assert "because" not in named[0].summary and fid("s1-secret") not in named[0].summary
    assert fid("s1-secret") in {e.ref_id for e in everything}
    bob = client.scoped(agent_id="bob")
    assert _all_pages(lambda c: bob.timeline_page("s1", limit=4, cursor=c)) == bob.timeline(
        "s1")
    assert len([e for e in bob.timeline("s1") if e.kind == "turn"]) == 44


def test_a_timeline_page_rejects_a_cursor_it_did_not_make(pipeline: Pipeline) -> None:
    client, drain = pipeline
    seed(client, drain)
    for bad in ("nope", "", "W10", "WzEsMl0"):
        with pytest.raises(ValidationError) as err:
            client.admin.timeline_page(["s1"], cursor=bad)
        assert err.value.field == "cursor"
    with pytest.raises(ValidationError):
        client.admin.timeline_page(["s1"], limit=0)


def test_the_first_timeline_page_reads_only_the_turns_it_shows(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch,
) -> None:
    client, drain = pipeline
    for i in range(400):
        client.ingest("long", "user", f"note {i}", timestamp=T0 + timedelta(minutes=i))
    drain()
    store = client.vector_store()
    read: list[int] = []
    scroll = store.scroll

    def counting(collection: str, where: Any, **kw: Any) -> Iterator[Any]:
        for hit in scroll(collection, where, **kw):
            if collection == TURNS:
                read.append(hit.payload["seq"])
            yield hit

    monkeypatch.setattr(store, "scroll", counting)
    page = client.admin.timeline_page(["long"], limit=20)
    assert [e.seq for e in page.events] == list(range(381, 401))
    assert len(read) <= 21  # the page and one more (is there an older page?)
    read.clear()
    older = client.admin.timeline_page(["long"], limit=20, cursor=page.next_cursor)
    assert [e.seq for e in older.events] == list(range(361, 381))
    assert len(read) <= 21 and max(read) <= 380  # from the cursor down, not the end
    read.clear()
    assert len(client.admin.timeline(["long"], limit=20)) == 20
    assert len(read) <= 21
    read.clear()
    assert len(client.admin.timeline(["long"])) == 400  # no limit: the whole session
    assert len(read) == 400


def test_related_sessions_and_session_context(pipeline: Pipeline) -> None:
    client, drain = pipeline
    seed(client, drain, "s1", "database")
    seed(client, drain, "s2", "database")
    for i, text in enumerate(["Bake bread at dawn", "Sourdough needs a starter"]):
        client.ingest("s3", "user", text, turn_id=f"b{i}", timestamp=T0)
    drain()
    related = client.admin.related_sessions("s1", limit=2)
    assert related[0].session_id == "s2" and "database" in related[0].shared_subjects
    assert related[0].score > (related[1].score if len(related) > 1 else 0)
    context = client.admin.session_context("s1", "which database?", 500, related=1)
    assert context.related[0].session_id == "s2"
    assert context.render().startswith("Session s1")
    assert {i.session_id for i in context.result} <= {"s1", "s2"}


def test_related_sessions_stay_in_the_callers_namespace(pipeline: Pipeline) -> None:
    """A second namespace about the same things: the operator's session context (the
    README's `related=2`) once raised "no such session", finding team-b's session related and
    then recalling it in the default namespace. Related sessions are now looked up where
    they can be recalled: the session's own namespace."""
    client, drain = pipeline
    seed(client, drain, "s1", "database")
    seed(client, drain, "s2", "database")
    team_b = client.scoped(namespace="team-b")
    for i, text in enumerate(["We talk about the database today",
                              "The database choice is PostgreSQL"]):
        team_b.ingest("b1", "user", text, turn_id=f"b{i}", timestamp=T0)
    drain()
    assert set(client.admin.sessions()) == {"s1", "s2", "team-b/b1"}  # internal names
    context = client.admin.session_context("s1", "which database?", 500, related=2)
    assert [r.session_id for r in context.related] == ["s2"]
    assert {i.session_id for i in context.result} <= {"s1", "s2"}
    assert [r.session_id for r in client.admin.related_sessions("s1", limit=5)] == ["s2"]
    # The same from the other side: team-b sees only its own sessions as related.
    assert team_b.related_sessions("b1", limit=5) == []
    assert team_b.session_context("b1", "which database?", 500, related=2).related == []
    assert [r.session_id for r in client.admin.related_sessions("team-b/b1")] == []


def test_scheduled_compaction_runs_as_a_job(
    redis_client: redis.Redis, settings: Settings, pipeline: Pipeline
) -> None:
    from rq import Queue

    from hivemem.runtime.wiring import Wiring
    from hivemem.workers.compact import compact_session, schedule_after_reflection

    client, drain = pipeline
    seed(client, drain)
    every = settings.model_copy(update={
        "compaction": settings.compaction.model_copy(update={"every_episodes": 2})})
    wiring = Wiring(every, redis=redis_client, vectors=client.vector_store(),
                    embedder=HashingEmbedder(1024))
    assert schedule_after_reflection(wiring.jobs, every, "s1", 0, 1) is None
    job_id = schedule_after_reflection(wiring.jobs, every, "s1", 1, 2)
    assert job_id == "compact-s1-ep2"
    queue = Queue(settings.episodes.reflect_queue, connection=redis_client)
    assert job_id in queue.job_ids
    context = wiring.job_context()
    summary = compact_session(context, "s1", "schedule")
    assert summary["merged"] == 1 and summary["archived"] == 1
    assert all(e.cause.endswith("(schedule)") for e in client.admin.audit_log("s1"))
    assert {f.status for f in client.facts("s1", include_history=True)} == {
        FactStatus.ACTIVE, FactStatus.ARCHIVED}


def test_embedded_mode_compacts_on_its_schedule(tmp_path: Path, settings: Settings) -> None:
    scheduled = settings.model_copy(update={
        "compaction": settings.compaction.model_copy(update={"every_episodes": 1}),
        "episodes": settings.episodes.model_copy(update={"max_turns": 2})})
    with MemoryClient.local(tmp_path / "m", scheduled, embedder=HashingEmbedder(1024)) as client:
        for i, text in enumerate(["We decided to use PostgreSQL for the database",
                                  "The API must never return more than 100 orders per page"]):
            client.ingest("e1", "user", text, timestamp=T0 + timedelta(minutes=i))
        client.wait_until_processed("e1", timeout=30, stage="boundary")
        client.wait_until_reflected("e1", timeout=30)
        assert client._runtime is not None and client._runtime.drain(30)
        log = client.admin.audit_log("e1")
        assert {e.actor for e in log} == {"reflection", "compaction"}
        assert any(e.cause.endswith("(schedule)") for e in log)
        assert {f.layer for f in client.facts("e1")} == {"operational"}


def test_the_async_client_has_the_lifecycle_methods(pipeline: Pipeline) -> None:
    import asyncio

    from hivemem import AsyncMemoryClient

    client, drain = pipeline
    seed(client, drain)
    memory = AsyncMemoryClient(client=client)

    async def run() -> None:
        preview = await memory.admin.preview_compaction("s1")
        assert (await memory.admin.compact("s1", expect=preview)) == preview
        assert (await memory.admin.audit(fid("s1-a")))[0].action == "merged"
        assert (await memory.admin.set_session_info("s1", title="T")).title == "T"
        assert [e.kind for e in await memory.admin.timeline(["s1"], kinds=["turn"])] == [
            "turn"] * 4

    asyncio.run(run())


def test_the_audit_log_is_append_only_and_reads_a_repeated_event_once(
    redis_client: redis.Redis,
) -> None:
    from hivemem.domain.audit import AuditEvent
    from hivemem.pipeline.topology import Keys
    from hivemem.store.audit import AuditLog

    log = AuditLog(redis_client, Keys("t"))
    events = [AuditEvent(event_id=f"e{i}", at=T0, session_id="x", fact_id=f"f{i}",
                         action="archived", actor="compaction") for i in range(3)]
    log.append(events)
    log.append(events[1:])  # a retried job
    assert log.count("x") == 5
    assert [(e.event_id, e.seq) for e in log.events("x")] == [("e0", 1), ("e1", 2), ("e2", 3)]
    # From the end, a page at a time: each once too (at its last position).
    assert [(e.event_id, e.seq) for e in log.newest_first("x", page=2)] == [
        ("e2", 5), ("e1", 4), ("e0", 1)]
