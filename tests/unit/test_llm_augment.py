"""An LLM on top of the heuristic reflector: a weak model cannot make the result worse than
the rules alone, a good one's extra facts are kept. The model is played by a scripted HTTP
server; its replies go through the real reflector, parser and consolidation."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.scripted_llm import Reply, ScriptedLLM

from hivemem import MemoryClient, Settings
from hivemem.domain.augment import plan_with_additions
from hivemem.domain.consolidation import Plan, PlanContext, plan_actions
from hivemem.domain.episode import Episode
from hivemem.domain.fact import Fact, FactAction, FactKind, FactStatus
from hivemem.domain.models import Role, Turn
from hivemem.providers.embedders import HashingEmbedder
from hivemem.providers.heuristic import HeuristicReflector
from hivemem.providers.llm import (
    AugmentedReflector,
    AugmentedResult,
    LLMConfig,
    OpenAICompatibleReflector,
    reflector_for,
)
from hivemem.providers.reflector import ReflectionRequest

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
PG = "We decided to use PostgreSQL for the database."
STAGING = "The staging cluster gets wiped every night."
MYSQL = "Change of plan: we switch the database to MySQL, ops only supports it."
PRIOR_ID = "a1b2c3d4e5f60718293a4b5c6d7e8f90"


def turns_of(*texts: str) -> list[Turn]:
    return [Turn(turn_id=f"t{i + 1}", session_id="s1", agent_id="sam", role=Role.USER,
                 content=text, timestamp=T0 + timedelta(minutes=i), seq=i + 1,
                 token_count=len(text.split()))
            for i, text in enumerate(texts)]


def request_of(turns: list[Turn], prior: list[Fact] | None = None) -> ReflectionRequest:
    episode = Episode(episode_id="ep1", session_id="s1", index=1,
                      turn_ids=tuple(t.turn_id for t in turns), seq_start=1,
                      seq_end=len(turns), started_at=turns[0].timestamp,
                      ended_at=turns[-1].timestamp, close_reason="manual", agent_ids=("sam",))
    return ReflectionRequest(session_id="s1", episode=episode, turns=turns,
                             prior_facts=prior or [])


def prior_mysql() -> Fact:
    return Fact(fact_id=PRIOR_ID, session_id="s1", agent_id="sam", content=MYSQL,
                kind=FactKind.DECISION, subject="database", source_turn_ids=["t0"],
                created_at=T0, valid_from=T0 - timedelta(days=1))


WHERE = PlanContext(session_id="s1", episode_id="ep1", namespace="default", now=T0,
                    valid_from=T0 + timedelta(hours=1), similarity=lambda _c, _f: 0.0)


def where(turns: list[Turn]) -> PlanContext:
    return dataclasses.replace(WHERE, turns=turns)


def outcome(plan: Plan, prior: list[Fact]) -> set[tuple[str, str, str | None]]:
    """Every fact after the plan: content, status, successor."""
    facts = {f.fact_id: f for f in prior} | plan.writes
    return {(f.content, f.status.value, f.superseded_by) for f in facts.values()}


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        yield server


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client() as c:
        yield c


def augmented(llm: ScriptedLLM, client: httpx.Client) -> AugmentedReflector:
    config = LLMConfig(provider="openai", base_url=llm.url, model="m", timeout_s=5,
                       max_retries=0)
    return AugmentedReflector(OpenAICompatibleReflector(config, client), HeuristicReflector())


def both(llm: ScriptedLLM, client: httpx.Client, reply: str, turns: list[Turn],
         prior: list[Fact] | None = None) -> tuple[Plan, Plan, AugmentedResult]:
    """(the heuristic alone, the scripted LLM on top of it, the reflector's result)."""
    prior = prior or []
    request = request_of(turns, prior)
    alone = plan_actions(prior, HeuristicReflector().reflect(request).actions, WHERE)
    llm.push(Reply(text=reply))
    result = augmented(llm, client).reflect(request)
    on_top = plan_with_additions(prior, result.rule_actions, result.actions, where(turns))
    return alone, on_top, result


def actions(*items: dict[str, Any]) -> str:
    return json.dumps({"actions": list(items)})


def add(content: str, *turn_ids: str, subject: str = "", kind: str = "decision"
        ) -> dict[str, Any]:
    return {"op": "add", "content": content, "kind": kind, "subject": subject,
            "source_turn_ids": list(turn_ids), "confidence": 0.9}


# -- a weak model changes nothing ----------------------------------------------------------

WEAK_EXTRACT = {
    # The prompt's example and an invented fact, with the placeholder copied as provenance.
    "hallucinating": actions(add("Use PostgreSQL as the database.", "<turn id>"),
                             add("We deploy with Kubernetes on AWS.", "<turn id>")),
    # The update is missed: only the old value, read again from its turn.
    "dropped update": actions(add("The team database is PostgreSQL.", "t1",
                                  subject="database")),
    "nothing": '{"actions": []}',
    # Claims the wrong turn for a stale value and removes a fact it cannot name.
    "wrong provenance": actions(add("The database is PostgreSQL.", "t3", subject="database"),
                                {"op": "remove", "target": "f1"}),
}


@pytest.mark.parametrize("name", sorted(WEAK_EXTRACT))
def test_a_weak_llm_leaves_the_heuristic_result_as_it_is(
    llm: ScriptedLLM, client: httpx.Client, name: str
) -> None:
    turns = turns_of(PG, "Thanks, sounds good.", MYSQL)
    alone, on_top, _ = both(llm, client, WEAK_EXTRACT[name], turns)
    assert outcome(on_top, []) == outcome(alone, [])
    current = [f.content for f in on_top.writes.values() if f.status == FactStatus.ACTIVE]
    assert current == [MYSQL]


WEAK_CONSOLIDATE = {
    # Tries to undo the known change: the old value back, by update and by remove.
    "reverting": actions({"op": "update", "target": "f1", "content": PG, "kind": "decision",
                          "subject": "database", "source_turn_ids": ["t1"]}),
    "removing": actions({"op": "remove", "target": "f1", "reason": "no longer"}),
    # Takes a question for a decision ("What if...?" changes nothing by the rules).
    "question as fact": actions(add("We use MongoDB for the database.", "t1",
                                    subject="database")),
}


@pytest.mark.parametrize("name", sorted(WEAK_CONSOLIDATE))
def test_a_weak_llm_cannot_undo_what_the_rules_decided(
    llm: ScriptedLLM, client: httpx.Client, name: str
) -> None:
    prior = [prior_mysql()]
    turns = turns_of("What if we used MongoDB for the database?", "Let's keep it as is.")
    alone, on_top, _ = both(llm, client, WEAK_CONSOLIDATE[name], turns, prior)
    assert outcome(on_top, prior) == outcome(alone, prior)
    assert (on_top.writes.get(PRIOR_ID) or prior[0]).status == FactStatus.ACTIVE
    assert any(d.startswith("llm 0:") for d in on_top.dropped), on_top.dropped


def test_weak_llm_drops_are_explained_by_ids_and_kinds(
    llm: ScriptedLLM, client: httpx.Client
) -> None:
    turns = turns_of(PG, "Thanks, sounds good.", MYSQL)
    _, on_top, result = both(llm, client, WEAK_EXTRACT["dropped update"], turns)
    retired = next(f.fact_id for f in on_top.writes.values()
                   if f.status == FactStatus.SUPERSEDED)
    assert f"llm 0: restates retired {retired}" in on_top.dropped
    _, on_top, result = both(llm, client, WEAK_EXTRACT["hallucinating"], turns)
    # The invented fact is the parser's to reject; the prompt's example (its words are in
    # the episode) is the old value read again.
    assert result.dropped == ["llm 1: content not stated in the episode"]
    assert f"llm 0: restates retired {retired}" in on_top.dropped


# -- a good model adds ---------------------------------------------------------------------


def test_a_good_llms_extra_facts_are_kept(llm: ScriptedLLM, client: httpx.Client) -> None:
    turns = turns_of(PG, STAGING, MYSQL)
    reply = actions(
        add("The team database is PostgreSQL.", "t1", subject="database"),
        add("The staging cluster is wiped every night.", "t2", subject="staging cluster"),
        {"op": "update", "target": "new:0", "content": "The team database is MySQL.",
         "kind": "decision", "subject": "database", "source_turn_ids": ["t3"]},
    )
    alone, on_top, result = both(llm, client, reply, turns)
    assert outcome(alone, []) <= outcome(on_top, [])
    active = {f.content for f in on_top.writes.values() if f.status == FactStatus.ACTIVE}
    assert "The staging cluster is wiped every night." in active
    assert MYSQL in active and PG not in active
    staging = next(f for f in on_top.writes.values() if "staging" in f.content)
    assert staging.source_turn_ids == ["t2"]
    # The heuristic found nothing in t2: the staging fact is the model's addition.
    assert not any("staging" in (a.content or "") for a in result.rule_actions)


def test_the_llms_own_facts_follow_the_change_rules(
    llm: ScriptedLLM, client: httpx.Client
) -> None:
    """A slot the rules missed: the model's old and new value are one version chain (applied
    in the order the turns were said, whatever order the model listed them in)."""
    turns = turns_of("The staging cluster gets wiped every night.",
                     "Correction: the staging cluster now gets wiped every Sunday.")
    reply = actions(
        add("The staging cluster gets wiped every Sunday.", "t2", subject="staging wipe"),
        add("The staging cluster gets wiped every night.", "t1", subject="staging wipe"),
    )
    alone, on_top, _ = both(llm, client, reply, turns)
    assert outcome(alone, []) <= outcome(on_top, [])
    night = next(f for f in on_top.writes.values() if f.content.endswith("every night."))
    assert night.status == FactStatus.SUPERSEDED


def test_update_of_a_rules_fact_is_judged_by_the_rules() -> None:
    """An explicit update of a fact the rules left is only an add on its slot: it cannot
    supersede it (that would undo the rules' outcome)."""
    prior = [prior_mysql()]
    turns = turns_of("Ops keeps the MySQL replicas in Frankfurt.")
    update = FactAction(op="update", target=PRIOR_ID, content="The database is in Frankfurt.",
                        subject="database", source_turn_ids=["t1"], agent_id="sam")
    plan = plan_with_additions(prior, [], [update], where(turns))
    assert PRIOR_ID not in plan.superseded
    assert (plan.writes.get(PRIOR_ID) or prior[0]).status == FactStatus.ACTIVE


# -- through the pipeline ------------------------------------------------------------------


def _good(request_json: Any) -> Reply:
    prompt = request_json["messages"][-1]["content"]
    wanted = [add("The staging cluster is wiped every night.", "t2",
                  subject="staging cluster")] if "staging" in prompt else []
    return Reply(text=actions(*wanted))


def _one_episode_through(llm: ScriptedLLM, tmp_path: Path, settings: Settings
                         ) -> tuple[dict[str, FactStatus], dict[str, Any]]:
    """PG, STAGING, MYSQL said by sam, the episode closed and reflected through the LLM
    `llm` serves: the facts' statuses and the reflection's trace."""
    configured = settings.model_copy(update={"llm": LLMConfig(
        provider="openai", base_url=llm.url, model="m", timeout_s=5, max_retries=0)})
    with MemoryClient.local(tmp_path / "m", configured,
                            embedder=HashingEmbedder(1024)) as memory:
        for text in (PG, STAGING, MYSQL):
            memory.ingest("s", "user", text, agent_id="sam")
        memory.close_episode("s")
        memory.wait_until_reflected("s", 30)
        facts = {f.content: f.status for f in memory.facts("s", include_history=True)}
        [trace] = memory.traces(5, session_id="s")
    assert llm.requests  # the model was asked
    return facts, trace


def test_a_configured_llm_reflects_on_top_of_the_heuristic(
    tmp_path: Path, settings: Settings
) -> None:
    with ScriptedLLM(default=Reply(body=_good)) as llm:
        facts, trace = _one_episode_through(llm, tmp_path, settings)
    assert facts[MYSQL] == FactStatus.ACTIVE and facts[PG] == FactStatus.SUPERSEDED
    assert facts["The staging cluster is wiped every night."] == FactStatus.ACTIVE
    assert trace["reflector"] == "openai:m+heuristic"
    assert [a["content"] for a in trace["rule_actions"]] == [PG, MYSQL]


def test_reflector_for() -> None:
    assert isinstance(reflector_for(None), HeuristicReflector)
    both = reflector_for(LLMConfig(provider="openai", base_url="http://127.0.0.1:9", model="m"))
    assert isinstance(both, AugmentedReflector)
    assert isinstance(both.llm, OpenAICompatibleReflector)
    both.close()


def test_a_copy_of_a_rules_fact_is_not_kept() -> None:
    """A second fact holding a value the rules hold would outlive their next change of it
    (a later "back to Jenkins" replaces one fact): the copy adds nothing and is dropped."""
    turns = turns_of("We're switching CI to GitHub Actions, the hosted runners are simpler.")
    rules = HeuristicReflector().reflect(request_of(turns, [prior_mysql()])).actions
    copy = FactAction(op="add", content="CI runs on GitHub Actions.", subject="ci system",
                      source_turn_ids=["t1"], agent_id="sam")
    plan = plan_with_additions([prior_mysql()], rules, [copy], where(turns))
    [kept] = [plan.writes[i] for i in plan.added]
    assert "switching CI" in kept.content
    assert any(d.startswith(f"llm 0: restates {kept.fact_id}") for d in plan.dropped)


@pytest.mark.parametrize("failure", ["unusable output", "http 400"])
def test_a_failing_llm_leaves_the_heuristic_facts(
    tmp_path: Path, settings: Settings, failure: str
) -> None:
    """The LLM only ever adds: when it fails for good (an unusable reply after the repair
    round, a 4xx), the episode still gets the rules' facts, as without an LLM."""
    bad = (Reply(text="no JSON here") if failure == "unusable output"
           else Reply(status=400, body={"error": "bad request"}))
    with ScriptedLLM(default=bad) as llm:
        facts, trace = _one_episode_through(llm, tmp_path, settings)
    assert facts[MYSQL] == FactStatus.ACTIVE and facts[PG] == FactStatus.SUPERSEDED
    assert not trace.get("failed")
    assert any(d.startswith("llm failed:") for d in trace["dropped"]), trace["dropped"]


def test_a_word_for_word_cut_of_a_turn_is_not_kept() -> None:
    """A fact stands for the turn it restates in recall: a cut of a turn that says more
    would hand over less than the turn (the slice's "What happened to the load test?"
    lost "off"). A sentence of the model's own words is an addition; the cut is not."""
    said = ("Load test cancelled, not rescheduled. I posted a follow-up in #staging that "
            "Tuesday's test is off.")
    turns = turns_of(said)
    rules = HeuristicReflector().reflect(request_of(turns)).actions
    cut = FactAction(op="add", content="Load test cancelled, not rescheduled.",
                     subject="load test", source_turn_ids=["t1"], agent_id="sam")
    reworded = FactAction(op="add", content="A follow-up on the load test is posted in #staging.",
                          subject="load test", source_turn_ids=["t1"], agent_id="sam")
    plan = plan_with_additions([], rules, [cut, reworded], where(turns))
    contents = {plan.writes[i].content for i in plan.added}
    assert "Load test cancelled, not rescheduled." not in contents
    assert "A follow-up on the load test is posted in #staging." in contents
    assert "llm 0: copies part of turn t1" in plan.dropped
