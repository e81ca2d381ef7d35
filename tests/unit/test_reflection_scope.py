"""Visibility in reflection is decided by the data (issue 17): a fact is as private as the
turns it came from (checked against the episode, whatever a model claims); a statement only
supersedes, retracts or conflicts facts in a scope it may write to (a private statement of
one agent leaves the shared fact current for everyone else); the LLM sees only the prior
facts the episode's scope may see; audit reasons carry ids and kinds, never content."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.scripted_llm import Reply, ScriptedLLM

from hivemem import MemoryClient, Settings
from hivemem.domain.audit import reflection_events
from hivemem.domain.consolidation import Plan, PlanContext, plan_actions
from hivemem.domain.episode import Episode
from hivemem.domain.fact import Fact, FactAction, FactKind, FactStatus
from hivemem.domain.models import Role, Turn
from hivemem.providers.embedders import HashingEmbedder
from hivemem.providers.heuristic import HeuristicReflector
from hivemem.providers.llm import LLMConfig, OpenAICompatibleReflector, build_reflector
from hivemem.providers.reflector import ReflectionRequest

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
SHARED_ID = "a1b2c3d4e5f60718293a4b5c6d7e8f90"
PG = "We decided to use PostgreSQL for the database."
SWITCH = "Change of plan: we switch the database to MySQL, ops only supports it."


def turn(i: int, text: str, agent: str, visibility: str = "shared") -> Turn:
    return Turn(turn_id=f"t{i}", session_id="s1", agent_id=agent, role=Role.USER,
                content=text, timestamp=T0 + timedelta(minutes=i), seq=i,
                token_count=len(text.split()), visibility=visibility)  # type: ignore[arg-type]


def shared_fact(content: str = PG, subject: str = "database", agent: str = "yara") -> Fact:
    return Fact(fact_id=SHARED_ID, session_id="s1", agent_id=agent, content=content,
                kind=FactKind.DECISION, subject=subject, source_turn_ids=["t0"],
                created_at=T0, valid_from=T0 - timedelta(days=1))


def request_of(turns: list[Turn], prior: list[Fact]) -> ReflectionRequest:
    episode = Episode(episode_id="ep1", session_id="s1", index=1,
                      turn_ids=tuple(t.turn_id for t in turns), seq_start=turns[0].seq,
                      seq_end=turns[-1].seq, started_at=turns[0].timestamp,
                      ended_at=turns[-1].timestamp, close_reason="manual")
    return ReflectionRequest(session_id="s1", episode=episode, turns=turns, prior_facts=prior)


def planned(prior: list[Fact], actions: list[FactAction], turns: list[Turn]) -> Plan:
    return plan_actions(prior, actions, PlanContext(
        turns=turns, session_id="s1", episode_id="ep1", namespace="default", now=T0,
        valid_from=T0 + timedelta(hours=1), similarity=lambda _c, _f: 0.0))


def heuristic(prior: list[Fact], turns: list[Turn]) -> Plan:
    return planned(prior, HeuristicReflector().reflect(request_of(turns, prior)).actions, turns)


def status_after(plan: Plan, fact: Fact) -> FactStatus:
    return (plan.writes.get(fact.fact_id) or fact).status


def new_facts(plan: Plan) -> list[Fact]:
    return [plan.writes[i] for i in plan.added]


# -- the heuristic ----------------------------------------------------------------------------


def test_a_private_change_leaves_the_shared_fact_current_for_everyone_else() -> None:
    prior = [shared_fact()]
    plan = heuristic(prior, [turn(1, SWITCH, "xavi", "private")])
    assert status_after(plan, prior[0]) == FactStatus.ACTIVE
    assert SHARED_ID not in plan.writes  # not one byte of the shared fact changes
    [successor] = new_facts(plan)
    assert successor.visibility == "private" and successor.agent_id == "xavi"
    assert successor.supersedes == SHARED_ID  # xavi's own successor: current for xavi only


def test_a_private_statement_does_not_conflict_a_shared_fact() -> None:
    prior = [shared_fact("The weekly deploy is run by Priya.", "weekly deploy")]
    plan = heuristic(prior, [turn(1, "The weekly deploy is run by Tomasz.", "xavi", "private")])
    assert SHARED_ID not in plan.writes and plan.conflicted in ([], [plan.added[0]])
    [mine] = new_facts(plan)
    assert mine.visibility == "private" and mine.agent_id == "xavi"


def test_a_private_retraction_does_not_archive_a_shared_fact() -> None:
    prior = [shared_fact()]
    plan = heuristic(prior, [turn(1, "Scrap that, we're not using PostgreSQL.", "xavi",
                                  "private")])
    assert SHARED_ID not in plan.writes and plan.archived == []


def test_a_shared_change_still_supersedes_the_shared_fact() -> None:
    prior = [shared_fact()]
    plan = heuristic(prior, [turn(1, SWITCH, "xavi")])
    assert status_after(plan, prior[0]) == FactStatus.SUPERSEDED


def test_a_shared_statement_leaves_another_agents_private_fact_alone() -> None:
    private = shared_fact().model_copy(update={"visibility": "private", "agent_id": "xavi"})
    plan = heuristic([private], [turn(1, SWITCH, "yara")])
    assert SHARED_ID not in plan.writes
    [new] = new_facts(plan)
    assert new.visibility == "shared" and new.supersedes is None


def test_a_private_question_leaves_no_trace_on_a_shared_fact() -> None:
    prior = [shared_fact()]
    plan = heuristic(prior, [turn(1, "What if we used MongoDB for the database?", "xavi",
                                  "private")])
    assert SHARED_ID not in plan.writes  # no private turn id or value on the shared fact


# -- the LLM's claims ---------------------------------------------------------------------------


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        yield server


def bare(llm: ScriptedLLM, client: httpx.Client) -> OpenAICompatibleReflector:
    return OpenAICompatibleReflector(
        LLMConfig(provider="openai", base_url=llm.url, model="m", timeout_s=5, max_retries=0),
        client)


def test_an_llm_update_of_a_shared_fact_from_a_private_turn_stays_private(
    llm: ScriptedLLM
) -> None:
    prior = [shared_fact()]
    turns = [turn(1, "Thanks, noted.", "yara"), turn(2, SWITCH, "xavi", "private")]
    # The model names the shared fact as the target and claims the shared turn.
    llm.push(Reply(text=json.dumps({"actions": [{
        "op": "update", "target": "f1", "content": "The database is MySQL.",
        "kind": "decision", "subject": "database", "source_turn_ids": ["t1"]}]})))
    with httpx.Client() as client:
        result = bare(llm, client).reflect(request_of(turns, prior))
    plan = planned(prior, result.actions, turns)
    assert status_after(plan, prior[0]) == FactStatus.ACTIVE and SHARED_ID not in plan.writes
    [new] = new_facts(plan)
    assert new.visibility == "private" and new.agent_id == "xavi"


def test_a_fact_is_as_private_as_the_turn_that_states_it_whatever_the_claim() -> None:
    turns = [turn(1, "Morning all.", "yara"),
             turn(2, "Our launch date moved to May 3.", "xavi", "private")]
    claim = FactAction(op="add", content="The launch date is May 3.", subject="launch date",
                       source_turn_ids=["t1"])
    [new] = new_facts(planned([], [claim], turns))
    assert new.visibility == "private" and new.agent_id == "xavi"


# -- audit reasons ---------------------------------------------------------------------------


def test_reasons_carry_ids_and_kinds_never_content() -> None:
    prior = [shared_fact(), shared_fact("The freeze on Friday deploys is in place.",
                                        "friday deploy").model_copy(
        update={"fact_id": "f" * 32})]
    turns = [turn(1, SWITCH, "yara"), turn(2, "Friday deploys are fine again.", "yara")]
    plan = heuristic(prior, turns)
    assert plan.superseded == [SHARED_ID] and plan.archived == ["f" * 32]
    events = reflection_events(plan, prior, episode_id="ep1", at=T0)
    successor = plan.writes[SHARED_ID].superseded_by
    assert plan.writes[SHARED_ID].reason == f"superseded_by:{successor}"
    assert plan.writes["f" * 32].reason == "retracted_by:t2"
    for event in events:
        for word in ("MySQL", "ops", "Friday", "fine", "PostgreSQL", "database"):
            assert word not in event.reason and word not in event.describe(), event
    llm_update = FactAction(op="update", target=SHARED_ID, content="The database is MySQL.",
                            subject="database", reason="ops only supports MySQL",
                            source_turn_ids=["t1"])
    plan = planned([shared_fact()], [llm_update], [turn(1, SWITCH, "yara")])
    assert "MySQL" not in (plan.writes[SHARED_ID].reason or "")
    assert all("MySQL" not in e.reason for e in reflection_events(
        plan, [shared_fact()], episode_id="ep1", at=T0))


# -- through the pipeline --------------------------------------------------------------------


def test_private_supersedes_shared_end_to_end(tmp_path: Path, settings: Settings) -> None:
    with MemoryClient.local(tmp_path / "m", settings, embedder=HashingEmbedder(1024)) as memory:
        memory.ingest("s", "user", PG, agent_id="yara")
        memory.close_episode("s")
        memory.wait_until_reflected("s", 30)
        memory.ingest("s", "user", SWITCH, agent_id="xavi", visibility="private")
        memory.close_episode("s")
        memory.wait_until_reflected("s", 30)
        yara = memory.scoped(agent_id="yara")
        xavi = memory.scoped(agent_id="xavi")
        assert [f.content for f in yara.facts("s")] == [PG]
        assert {f.content for f in xavi.facts("s")} >= {SWITCH}
        for event in yara.timeline("s"):
            assert "MySQL" not in event.summary and "MySQL" not in json.dumps(event.detail)


def test_the_llm_sees_only_the_prior_facts_the_episode_may_see(
    tmp_path: Path, settings: Settings
) -> None:
    secret = "My private deploy token rotates every Monday."

    def answer(request_json: Any) -> Reply:
        prompt = request_json["messages"][-1]["content"]
        if "rotates" in prompt and "Monday" in prompt and "Morning" not in prompt:
            return Reply(text=json.dumps({"actions": [{
                "op": "add", "content": secret, "kind": "fact", "subject": "deploy token",
                "source_turn_ids": ["t1"]}]}))
        return Reply(text='{"actions": []}')

    with ScriptedLLM(default=Reply(body=answer)) as llm:
        reflector = build_reflector(LLMConfig(provider="openai", base_url=llm.url, model="m",
                                              timeout_s=5, max_retries=0))
        with MemoryClient.local(tmp_path / "m", settings, embedder=HashingEmbedder(1024),
                                reflector=reflector) as memory:
            memory.ingest("s", "user", secret, agent_id="xavi", visibility="private")
            memory.close_episode("s")
            memory.wait_until_reflected("s", 30)
            assert [f.visibility for f in memory.scoped(agent_id="xavi").facts("s")] == [
                "private"]
            memory.ingest("s", "user", "Morning all, standup in five.", agent_id="yara")
            memory.close_episode("s")
            memory.wait_until_reflected("s", 30)
        shared_prompt = llm.requests[-1].json["messages"][-1]["content"]
        assert "Morning all" in shared_prompt and "rotates" not in shared_prompt
