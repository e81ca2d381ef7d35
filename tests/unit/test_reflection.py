"""Reflection: consolidation rules, the heuristic reflector, the progressive-requirements
scenario end to end (heuristic and scripted LLM), serialisation, failures and traces."""

from __future__ import annotations

import json
import re
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import pytest
import redis
from support.scripted_llm import Reply, ScriptedLLM

from hivemem import MemoryClient, Settings
from hivemem.config import LLMConfig
from hivemem.domain.consolidation import PlanContext, plan_actions
from hivemem.domain.fact import Fact, FactAction, FactKind, FactStatus
from hivemem.errors import ReflectionFailed
from hivemem.providers.embedders import HashingEmbedder
from hivemem.providers.heuristic import HeuristicReflector, subject_of
from hivemem.providers.llm import build_reflector

T0 = datetime(2026, 2, 1, 9, 0, tzinfo=UTC)


def fact(fid: str, content: str, subject: str, kind: FactKind = FactKind.DECISION) -> Fact:
    return Fact(fact_id=fid, session_id="s", content=content, subject=subject, kind=kind,
                created_at=T0, valid_from=T0)


def plan(prior: list[Fact], actions: list[FactAction], sim: float = 0.0) -> Any:
    return plan_actions(prior, actions, PlanContext(
        session_id="s", episode_id="ep2", namespace="default", now=T0,
        valid_from=T0 + timedelta(hours=1), similarity=lambda _c, _f: sim))


def test_update_supersedes_with_an_audit_trail() -> None:
    old = fact("f1", "We use PostgreSQL", "database")
    p = plan([old], [FactAction(op="update", target="f1", content="We use MySQL",
                                subject="database", kind=FactKind.DECISION, reason="ops")])
    assert p.superseded == ["f1"] and len(p.added) == 1
    new_id = p.added[0]
    assert p.writes["f1"].status == FactStatus.SUPERSEDED
    assert p.writes["f1"].superseded_by == new_id
    assert p.writes["f1"].reason == f"superseded_by:{new_id}"  # ids only, never content
    assert p.writes["f1"].valid_to == T0 + timedelta(hours=1)
    assert p.writes[new_id].supersedes == "f1" and p.writes[new_id].version == 2


def test_paraphrase_merges_instead_of_copying() -> None:
    old = fact("f1", "The database is PostgreSQL", "database")
    p = plan([old], [FactAction(op="add", content="PostgreSQL is our database",
                                subject="database", kind=FactKind.DECISION,
                                source_turn_ids=["t9"])], sim=0.95)
    assert p.added == [] and p.merged == [("0", "f1")]
    assert "t9" in p.writes["f1"].source_turn_ids


def test_contradiction_without_update_language_conflicts_both() -> None:
    old = fact("f1", "We use PostgreSQL", "database")
    p = plan([old], [FactAction(op="add", content="We use MySQL", subject="database",
                                kind=FactKind.DECISION)])
    new_id = p.added[0]
    assert set(p.conflicted) == {"f1", new_id}
    assert p.writes["f1"].status == p.writes[new_id].status == FactStatus.CONFLICTED
    assert p.writes[new_id].conflicts_with == ["f1"]


def test_update_language_without_a_target_still_supersedes() -> None:
    old = fact("f1", "We use PostgreSQL", "database")
    p = plan([old], [FactAction(op="add", content="Switch to MySQL instead", subject="database",
                                kind=FactKind.DECISION)])
    assert p.superseded == ["f1"] and p.conflicted == []


def test_remove_archives_and_unknown_targets_are_dropped() -> None:
    old = fact("f1", "Deadline is Friday", "deadline", FactKind.CONSTRAINT)
    p = plan([old], [FactAction(op="remove", target="f1", reason="cancelled"),
                     FactAction(op="update", target="nope", content="x y z", subject="q")])
    assert p.archived == ["f1"] and p.writes["f1"].status == FactStatus.ARCHIVED
    assert any("nope" in d for d in p.dropped)


def test_chained_update_within_one_episode() -> None:
    p = plan([], [
        FactAction(op="add", content="Use REST", subject="api style", kind=FactKind.DECISION),
        FactAction(op="update", target="new:0", content="Use GraphQL instead",
                   subject="api style", kind=FactKind.DECISION),
    ])
    first, second = p.added
    assert p.writes[first].status == FactStatus.SUPERSEDED
    assert p.writes[first].superseded_by == second


def test_heuristic_subjects() -> None:
    # Slots come from the sentence (what the value is for), not from a vocabulary of values.
    assert subject_of("Let's use PostgreSQL for storage", FactKind.DECISION) == "storage"
    assert subject_of("We'll use GraphQL for the API", FactKind.DECISION) == "api"
    assert subject_of("The deadline is March 3", FactKind.CONSTRAINT) == "deadline"
    assert subject_of("Let's go with Jenkins", FactKind.DECISION) != "language"
    assert HeuristicReflector().name == "heuristic"


# -- end to end ---------------------------------------------------------------------------

SCRIPT = [
    ("user", "We need to build an inventory service for the warehouse team."),
    ("assistant", "Decision: we'll use PostgreSQL for the database."),
    ("user", "Let's go with REST for the API."),
    ("assistant", "OK, and the frontend will use React."),
    ("user", "I prefer small, type-annotated functions."),
    ("assistant", "Noted."),
    ("user", "Actually, let's switch to MySQL for the database instead, ops already runs it."),
    ("assistant", "Switching the database to MySQL then."),
    ("user", "And we'll use GraphQL instead of REST for the API."),
    ("assistant", "Got it, GraphQL replaces REST."),
]


def run_scenario(client: MemoryClient, session: str = "p1") -> None:
    for i, (role, text) in enumerate(SCRIPT):
        client.ingest(session, role, text, timestamp=T0 + timedelta(minutes=3 * i),
                      turn_id=f"turn-{i}")
        if i == 5:
            client.close_episode(session)
    client.close_session(session)
    client.wait_until_processed(session, 20, stage="boundary")
    client.wait_until_reflected(session, 20)


def check_progressive(client: MemoryClient, session: str = "p1") -> None:
    current = {f.subject: f for f in client.facts(session)}
    assert "MySQL" in current["database"].content
    assert "GraphQL" in current["api"].content
    assert "React" in current["frontend"].content
    history = [f for f in client.facts(session, include_history=True) if f.subject == "database"]
    old = next(f for f in history if "PostgreSQL" in f.content)
    new = next(f for f in history if "MySQL" in f.content)
    assert old.status == FactStatus.SUPERSEDED and old.superseded_by == new.fact_id
    assert old.valid_to is not None and old.valid_to <= new.valid_from
    items = client.recall(session, "which database are we using?", token_budget=120)
    facts = [i for i in items if i.source_type == "fact"]
    assert any("MySQL" in i.content for i in facts)  # (hashing embedder: not semantic)
    assert not any("PostgreSQL" in i.content for i in facts)
    # The turn that chose PostgreSQL is history now: it ranks below the current state.
    pg_turn = [i for i in items if i.source_id == "turn-1"]
    assert not pg_turn or pg_turn[0].components.stale == 1.0
    with_history = client.recall(session, "which database are we using?", include_history=True)
    versions = [i for i in with_history if i.source_type == "fact"
                and i.metadata["subject"] == "database"]
    assert {i.metadata["status"] for i in versions} == {"active", "superseded"}
    assert all(i.metadata["valid_from"] for i in versions)


def test_progressive_requirements_heuristic(tmp_path: Path, settings: Settings) -> None:
    with MemoryClient.local(tmp_path / "m", settings, embedder=HashingEmbedder(1024)) as client:
        run_scenario(client)
        check_progressive(client)
        traces = client.traces(10, session_id="p1")
        assert traces and traces[0]["reflector"] == "heuristic"
        assert any(t["superseded"] for t in traces)
    # Facts persist across a restart of the embedded store.
    with MemoryClient.local(tmp_path / "m", settings, embedder=HashingEmbedder(1024)) as client:
        check_progressive(client)


_KNOWN = re.compile(r"\[(f\d+)\] (\w+), ([a-z ]+):")  # facts are shown by alias


def scripted_model(request: dict[str, Any]) -> Reply:
    """A stand-in LLM: reads the prompt the reflector sent and answers like a model would."""
    prompt = "\n".join(m["content"] for m in request["messages"] if m["role"] == "user")
    known = {subject: fid for fid, _kind, subject in _KNOWN.findall(prompt)}
    lines = re.findall(r"\[(t\d+)\][^\n]*?\) (.*)", prompt)  # turns too
    actions: list[dict[str, Any]] = []

    def act(op: str, subject: str, content: str, said: str, target: str | None = None) -> None:
        sources = [tid for tid, text in lines if said in text][:1]
        actions.append({"op": op, "target": target, "content": content, "kind": "decision",
                        "subject": subject, "confidence": 0.9, "source_turn_ids": sources,
                        "reason": "changed" if target else None})

    # (each fact only from the episode that states it: an add the turns do not support
    # is rejected as invented)
    if "PostgreSQL for the database" in prompt:
        act("add", "database", "The database is PostgreSQL.", "PostgreSQL")
    if "REST for the API" in prompt:
        act("add", "api", "The API is REST.", "REST for the API")
    if "will use React" in prompt:
        act("add", "frontend", "The frontend uses React.", "React")
    if "switch to MySQL" in prompt:
        act("update", "database", "The database is MySQL.", "switch to MySQL",
            known.get("database"))
    if "GraphQL instead of REST" in prompt:
        act("update", "api", "The API is GraphQL.", "GraphQL instead",
            known.get("api"))
    return Reply(text="```json\n" + json.dumps({"actions": actions}) + "\n```")


def test_progressive_requirements_scripted_llm(tmp_path: Path, settings: Settings) -> None:
    with ScriptedLLM(default=Reply(body=scripted_model)) as llm:
        reflector = build_reflector(LLMConfig(provider="openai", base_url=llm.url,
                                              model="scripted", timeout_s=5))
        with MemoryClient.local(tmp_path / "m", settings, embedder=HashingEmbedder(1024),
                                reflector=reflector) as client:
            run_scenario(client)
            check_progressive(client)
            assert client.traces(1)[0]["reflector"] != "heuristic"
        assert len(llm.requests) >= 2


def test_a_broken_llm_fails_the_job_keeps_the_output_and_recall_still_works(
    tmp_path: Path, settings: Settings
) -> None:
    with ScriptedLLM(default=Reply(text="I am not JSON at all, sorry")) as llm:
        reflector = build_reflector(LLMConfig(provider="openai", base_url=llm.url,
                                              model="scripted", timeout_s=5))
        with MemoryClient.local(tmp_path / "m", settings, embedder=HashingEmbedder(1024),
                                reflector=reflector) as client:
            # The pointer moves past failed episodes, and the wait says they failed.
            with pytest.raises(ReflectionFailed):
                run_scenario(client)
            assert client.get_session_stats("p1").reflections_failed
            assert client.facts("p1") == []
            traces = client.traces(5, session_id="p1")
            assert traces and "not JSON" in (traces[0]["raw_output"] or "")
            assert traces[0]["error"]
            from rq import Queue
            from rq.registry import FailedJobRegistry

            queue = Queue(settings.episodes.reflect_queue, connection=client._redis)
            failed = FailedJobRegistry(queue=queue)
            assert failed.count >= 1
            # Recall keeps answering from turns.
            items = client.recall("p1", "which database?")
            assert any("MySQL" in i.content for i in items)
            # Once the LLM is fixed, replay brings the facts.
            llm.default = Reply(body=scripted_model)
            client.admin.replay_reflection("p1")
            deadline = time.monotonic() + 20
            while not client.facts("p1") and time.monotonic() < deadline:
                time.sleep(0.05)
            assert client.facts("p1")


def test_traces_redact_secrets(tmp_path: Path, settings: Settings) -> None:
    with MemoryClient.local(tmp_path / "m", settings, embedder=HashingEmbedder(1024)) as client:
        client.ingest("s", "user", "Decision: we'll use the key sk-abcdefghijklmnopqrstuv "
                                   "and password: hunter2hunter for the database.")
        client.ingest("s", "assistant", "Okay, using that for the database.")
        client.close_session("s")
        client.wait_until_processed("s", 20, stage="boundary")
        client.wait_until_reflected("s", 20)
        dumped = json.dumps(client.traces(5))
        assert "sk-abcdefghijklmnopqrstuv" not in dumped and "hunter2hunter" not in dumped
        assert "[REDACTED]" in dumped


def test_concurrent_reflect_workers_never_leave_two_current_versions(
    redis_server: Any, settings: Settings
) -> None:
    """3 reflect workers (threads, own connections) on a real redis-server, 12 sessions
    whose episodes all close at once: every subject ends with exactly one current fact."""
    from hivemem.runtime.wiring import Wiring
    from hivemem.store.vectors.server import ServerVectorStore

    base = redis_server.client()
    base.flushall()
    emb = HashingEmbedder(1024)
    vectors = ServerVectorStore(settings.qdrant, emb.dim, location=":memory:")
    client = MemoryClient(settings, redis_client=base, vector_store=vectors, embedder=emb)
    wiring = Wiring(settings, redis=base, vectors=vectors, embedder=emb)

    sessions = [f"c{i}" for i in range(12)]
    for sid in sessions:
        for i, (role, text) in enumerate(SCRIPT):
            client.ingest(sid, role, text, timestamp=T0 + timedelta(minutes=3 * i))
            if i in (3, 5, 7):
                client.close_episode(sid)
        client.close_session(sid)
    wiring.embed_worker().run(burst=True)
    wiring.boundary_worker().run(burst=True)
    wiring.dispatch_worker().run(burst=True)  # the outbox: one reflect job per episode

    workers, threads = [], []
    for _ in range(3):
        # Each worker: its own connection, and a context of its own on it.
        worker = wiring.thread_worker(redis_server.client())
        assert worker.worker.context.redis is worker.connection
        workers.append(worker)
        threads.append(threading.Thread(target=worker.run, daemon=True))
    for t in threads:
        t.start()
    try:
        for sid in sessions:
            client.wait_until_reflected(sid, 60)
    finally:
        for w in workers:
            w.stop()
        for t in threads:
            t.join(5)
    for sid in sessions:
        current = client.facts(sid)
        subjects = [f.subject for f in current if f.subject]
        assert len(subjects) == len(set(subjects)), (sid, subjects)
        assert "MySQL" in next(f.content for f in current if f.subject == "database")
    vectors.close()
    assert isinstance(base, redis.Redis)


def test_wait_until_reflected_waits_for_a_close_the_boundary_stage_has_not_seen(
    tmp_path: Path, settings: Settings
) -> None:
    with MemoryClient.local(tmp_path / "m", settings, embedder=HashingEmbedder(1024)) as client:
        for i, (role, text) in enumerate(SCRIPT[:3]):
            client.ingest("w", role, text, turn_id=f"w{i}")
        client.close_episode("w")
        # Right after the close: before, this returned at once (0 episodes closed yet).
        assert client.wait_until_reflected("w", 20) == 1
        assert client.facts("w")
        assert client.get_session_stats("w").reflections_failed == []


# -- a session past max_unscoped_facts ----------------------------------------------------

TOOLS = ["PostgreSQL", "Redis", "Kafka", "React", "GraphQL", "Jenkins", "Terraform", "Grafana"]
AREAS = ["the database", "the cache", "the queue", "the frontend", "the API", "CI",
         "provisioning", "dashboards"]


def _listed_every_time(self: Any, episode: Any, scope: Any) -> list[Any]:
    """Reflection's choice of prior facts before the count: list, then search if too many."""
    from hivemem.domain.fact import VISIBLE
    from hivemem.domain.names import session_name
    from hivemem.workers.reflect import _seen

    name = session_name(episode.namespace, episode.session_id)
    facts = _seen(self.ctx.vectors.list_fact_hits(name, [s.value for s in VISIBLE]), scope)
    if len(facts) <= self.settings.max_unscoped_facts or episode.centroid is None:
        return facts
    return cast(list[Any], self._nearest_facts(episode, scope, name))


def _many_facts(client: MemoryClient) -> tuple[list[list[str]], list[tuple[str, str]]]:
    """Eight episodes of one decision each: each trace's prior facts, and the facts."""
    for i, (tool, area) in enumerate(zip(TOOLS, AREAS, strict=True)):
        client.ingest("big", "user", f"Decision: we'll use {tool} for {area}.",
                      timestamp=T0 + timedelta(minutes=3 * i), turn_id=f"turn-{i}")
        client.close_episode("big")
    client.close_session("big")
    client.wait_until_processed("big", 20, stage="boundary")
    client.wait_until_reflected("big", 20)
    traces = sorted(client.traces(50, session_id="big"), key=lambda t: t["index"])
    shown = [sorted(f["content"] for f in t["prior_facts"]) for t in traces]
    facts = sorted((f.content, f.status.value) for f in client.facts("big",
                                                                      include_history=True))
    return shown, facts


def test_a_session_past_max_unscoped_facts_is_counted_not_listed_and_shown_the_same(
    tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the limit reflection is shown the facts nearest the episode; it counts the
    session's facts to know that instead of listing them all each episode, and what it is
    shown (so what it writes) is what listing them each time gave."""
    from hivemem.store.vectors.base import VectorStore
    from hivemem.workers.reflect import Reflection

    settings = settings.model_copy(update={"reflection": settings.reflection.model_copy(
        update={"max_unscoped_facts": 3})})
    listings: list[tuple[str, ...]] = []
    counts: list[tuple[str, ...]] = []
    list_hits, count_facts = VectorStore.list_fact_hits, VectorStore.count_facts

    def spy_list(self: VectorStore, name: str, statuses: Any) -> Any:
        listings.append(tuple(statuses))
        return list_hits(self, name, statuses)

    def spy_count(self: VectorStore, name: str, statuses: Any = None, scope: Any = None
                  ) -> int:
        counts.append(tuple(statuses or ()))
        return count_facts(self, name, statuses, scope)

    monkeypatch.setattr(VectorStore, "list_fact_hits", spy_list)
    monkeypatch.setattr(VectorStore, "count_facts", spy_count)
    with MemoryClient.local(tmp_path / "new", settings, embedder=HashingEmbedder(1024)) as c:
        shown, facts = _many_facts(c)
    current = ("active", "conflicted")
    assert len(shown) == len(TOOLS) and max(len(s) for s in shown) == 3
    assert len([f for f in facts if f[1] in current]) > 3
    # Listed while small and once more when it grew past 3; counted from then on.
    listed_current = [s for s in listings if "active" in s]
    counted_current = [s for s in counts if "active" in s]
    assert counted_current and len(listed_current) + len(counted_current) == len(TOOLS)
    assert len(listed_current) < len(TOOLS)

    monkeypatch.setattr(Reflection, "_prior_facts", _listed_every_time)
    with MemoryClient.local(tmp_path / "old", settings, embedder=HashingEmbedder(1024)) as c:
        assert _many_facts(c) == (shown, facts)
