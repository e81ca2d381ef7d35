"""The behavioural tests every way of connecting must pass (`support.connections`): each
takes a `way` (a `Connection`) and never asks which one it is. A test module imports them
and defines the `way` fixture: tests/unit/test_behaviour_all_clients.py (embedded, server,
remote on an in-thread API), tests/integration/test_behaviour_serve.py (a `hivemem serve`
process)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from hivemem import (
    AuditEvent,
    ContextItem,
    Episode,
    ExcludedItem,
    ExportSummary,
    Fact,
    NotFound,
    RecallResult,
    SessionContext,
    SessionInfo,
    SessionStats,
    TimelineEvent,
    Turn,
    ValidationError,
)
from support.connections import Connection


def _sid() -> str:
    return f"s-{uuid.uuid4().hex[:8]}"


def test_ingest_then_recall_returns_the_same_types(way: Connection) -> None:
    memory = way.handle("alice")
    sid = _sid()
    turn = memory.ingest(sid, "user", "The deploy target is Kubernetes on GKE",
                         markers=["goal", "goal"], metadata={"k": 1})
    assert isinstance(turn, Turn)
    assert (turn.seq, turn.session_id, turn.agent_id, turn.namespace) == (1, sid, "alice",
                                                                         "team-a")
    assert turn.markers == ("goal",) and turn.metadata == {"k": 1} and not turn.duplicate
    assert turn.token_count > 0 and turn.timestamp.tzinfo is not None
    memory.ingest(sid, "assistant", "Noted: GKE, region europe-west1")
    stats = memory.wait_until_processed(sid, 20)
    assert isinstance(stats, SessionStats) and stats.turns_processed == 2
    assert memory.get_session_stats(sid).turns_enqueued == 2
    result = memory.recall(sid, "where do we deploy?", explain=True)
    assert isinstance(result, RecallResult) and result.preset
    assert all(isinstance(i, ContextItem) for i in result)
    assert all(isinstance(e, ExcludedItem) for e in result.excluded)
    assert any("Kubernetes" in i.content for i in result)
    assert "Kubernetes" in result.render()
    cheap = memory.recall(sid, "deploy", 50, preset="cheap")
    assert cheap.preset == "cheap" and cheap.token_budget == 50
    assert sid in memory.sessions()


def test_a_resent_turn_id_is_a_duplicate(way: Connection) -> None:
    memory = way.handle(None)
    sid = _sid()
    first = memory.ingest(sid, "user", "hello", turn_id="t-1")
    again = memory.ingest(sid, "user", "hello", turn_id="t-1")
    assert again.duplicate and again.seq == first.seq == 1


def test_ingest_many_keeps_order_and_writes_nothing_when_one_is_bad(way: Connection) -> None:
    memory = way.handle("alice")
    sid = _sid()
    turns = memory.ingest_many([
        {"session_id": sid, "role": "user", "content": "one"},
        {"session_id": sid, "role": "assistant", "content": "two"},
    ])
    assert [t.seq for t in turns] == [1, 2] and all(t.agent_id == "alice" for t in turns)
    with pytest.raises(ValidationError) as bad:
        memory.ingest_many([
            {"session_id": sid, "role": "user", "content": "three"},
            {"session_id": sid, "role": "robot", "content": "four"},
        ])
    assert bad.value.field == "turns[1].role"
    with pytest.raises(ValidationError) as other_agent:
        memory.ingest_many([{"session_id": sid, "role": "user", "content": "x",
                             "agent_id": "bob"}])
    assert other_agent.value.field == "turns[0].agent_id"
    assert memory.get_session_stats(sid).turns_enqueued == 2


def test_bad_input_names_the_field(way: Connection) -> None:
    memory = way.handle(None)
    with pytest.raises(ValidationError) as role:
        memory.ingest(_sid(), "robot", "hi")
    assert role.value.field == "role"
    with pytest.raises(ValidationError) as sid:
        memory.ingest("no spaces allowed", "user", "hi")
    assert sid.value.field == "session_id"
    with pytest.raises(ValidationError) as private:
        memory.ingest(_sid(), "user", "hi", visibility="private")
    assert private.value.field == "visibility"


def test_unknown_and_foreign_sessions_are_not_found(way: Connection) -> None:
    memory = way.handle(None)
    theirs = _sid()
    way.other.ingest(theirs, "user", "team b's secret: zebra")
    for sid in ("never-written", theirs):
        for call in (memory.get_session_stats,
                     lambda s: memory.recall(s, "zebra"),
                     memory.facts,
                     memory.timeline,
                     memory.session_info,
                     memory.close_episode):
            with pytest.raises(NotFound):
                call(sid)
    assert theirs not in memory.sessions()
    # A write to their id starts this namespace's own session of that id (as any new id).
    mine = memory.ingest(theirs, "user", "my own session of that id")
    assert mine.seq == 1
    assert theirs in memory.sessions()
    assert "zebra" not in str(memory.timeline(theirs))
    with pytest.raises(NotFound) as fact:
        memory.audit("no-such-fact")
    assert fact.value.field == "fact_id"


def test_private_turns_stay_with_their_agent(way: Connection) -> None:
    alice, bob = way.handle("alice"), way.handle("bob")
    sid = _sid()
    alice.ingest(sid, "user", "shared plan: ship the walrus feature on friday")
    alice.ingest(sid, "user", "alice's private note: the walrus password is hunter2",
                 visibility="private")
    alice.wait_until_processed(sid, 20)
    mine = alice.recall(sid, "walrus password")
    theirs = bob.recall(sid, "walrus password")
    assert any("hunter2" in i.content for i in mine)
    assert not any("hunter2" in i.content for i in theirs)
    assert any("friday" in i.content for i in theirs)
    assert all("hunter2" not in e.summary for e in bob.timeline(sid))


def test_episodes_facts_timeline_and_audit(way: Connection) -> None:
    memory = way.handle("alice")
    sid = _sid()
    memory.ingest(sid, "user", "We decided to use Postgres 16 as the primary database",
                  markers=["decision"])
    memory.ingest(sid, "assistant", "Agreed: Postgres 16 it is, decision recorded")
    seq = memory.close_episode(sid)
    assert seq == 3
    assert memory.wait_until_reflected(sid, 30) == 1
    episodes = memory.episodes(sid)
    assert len(episodes) == 1 and isinstance(episodes[0], Episode)
    assert episodes[0].seq_end >= 2
    facts = memory.facts(sid, include_history=True)
    assert facts and all(isinstance(f, Fact) for f in facts)
    assert any("Postgres" in f.content for f in facts)
    events = memory.timeline(sid)
    assert all(isinstance(e, TimelineEvent) for e in events)
    assert {"turn", "episode", "fact"} <= {e.kind for e in events}
    assert [e.kind for e in memory.timeline(sid, kinds=["turn"])] == ["turn", "turn"]
    audit = memory.audit(facts[0].fact_id)
    assert audit and all(isinstance(e, AuditEvent) for e in audit)
    assert all(facts[0].fact_id in (e.fact_id, *e.related) for e in audit)
    traces = memory.traces(5, sid)
    assert traces and all(isinstance(t, dict) for t in traces)


def test_session_info_title_related_and_context(way: Connection) -> None:
    memory = way.handle("planner")
    sid = _sid()
    memory.ingest(sid, "user", "Plan the Lisbon offsite in May")
    memory.wait_until_processed(sid, 20)
    info = memory.set_session_info(sid, title="Offsite")
    assert isinstance(info, SessionInfo)
    assert (info.title, info.agent_id, info.turns) == ("Offsite", "planner", 1)
    assert memory.session_info(sid).title == "Offsite"
    assert isinstance(memory.related_sessions(sid), list)
    context = memory.session_context(sid, "where is the offsite?")
    assert isinstance(context, SessionContext)
    assert context.info.session_id == sid and isinstance(context.result, RecallResult)
    assert any("Lisbon" in i.content for i in context.result)


def test_close_session_and_export(way: Connection, tmp_path: Path) -> None:
    memory = way.handle(None)
    sid, other = _sid(), _sid()
    memory.ingest(sid, "user", "remember the export")
    memory.ingest(other, "user", "and this one too")
    assert memory.close_session(sid) == 2
    memory.wait_until_processed(sid, 20, stage="boundary")
    memory.wait_until_processed(other, 20)
    seen: list[int] = []
    summary = memory.export(tmp_path / "one.jsonl.gz", [sid], progress=seen.append)
    assert isinstance(summary, ExportSummary)
    assert summary.sessions == [sid] and summary.counts["turn"] == 1
    assert Path(summary.path).stat().st_size == summary.bytes > 0 and sum(seen) > 0
    everything = memory.export(tmp_path / "all.jsonl")  # every session of the namespace
    assert {sid, other} <= set(everything.sessions) == set(memory.sessions())
    lines = [json.loads(x) for x in Path(everything.path).read_text().splitlines()]
    contents: list[Any] = [r["turn"]["content"] for r in lines if r.get("type") == "turn"
                           and r["turn"]["session_id"] in (sid, other)]
    assert sorted(contents) == ["and this one too", "remember the export"]
    with pytest.raises(NotFound):
        memory.export(tmp_path / "x.jsonl", ["never-written"])
