"""Reflection reads a session's superseded facts (its history) only when a statement needs
them, from the worker's copy of the session's facts, not by listing them every episode:
the same facts and audit trail as listing them every time (what reflection did before),
at a cost that does not grow with the history."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from hivemem import MemoryClient, Settings
from hivemem.domain.augment import plan_with_additions
from hivemem.domain.consolidation import PlanContext, plan_actions
from hivemem.domain.fact import Fact, FactAction, FactKind, FactStatus
from hivemem.domain.models import Role, Turn
from hivemem.domain.names import session_name
from hivemem.evaluation.change_parts import load_part
from hivemem.providers.embedders import HashingEmbedder
from hivemem.recall.known_facts import KnownFacts
from hivemem.store.vectors.base import VectorStore
from hivemem.workers.reflect import Reflection, _episode_scope, _seen

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
# Change-suite conversations whose statements reach the history: reverts ("back to
# Jenkins") and chains of corrections, several speakers among them.
CATEGORIES = ("revert", "correction_chain", "speakers")


def _conversations() -> list[Any]:
    return [c for part in ("legacy", "tuning", "heldout") for c in load_part(part).conversations
            if c.category in CATEGORIES]


def _play(client: MemoryClient, session: str) -> None:
    """Every chosen conversation, one after another, in one session (its history grows)."""
    index = 0
    for conversation in _conversations():
        for turn in conversation.turns:
            client.ingest(session, turn.role, turn.content, agent_id=turn.agent,
                          turn_id=f"t{index}", timestamp=T0 + timedelta(seconds=30 * index))
            index += 1
        client.close_episode(session)
    client.close_session(session)
    client.wait_until_processed(session, 120, stage="boundary")
    client.wait_until_reflected(session, 120)


def _outcome(client: MemoryClient, session: str) -> dict[str, Any]:
    """What reflection decided: every fact (less when it was written), the audit trail
    (less when), and each episode's trace of decisions."""
    facts = sorted(
        (f.model_dump(mode="json", exclude={"created_at"}) for f in client.admin.facts(
            session, include_history=True, include_inactive=True, include_archived=True)),
        key=lambda f: f["fact_id"])
    audit = [e.model_dump(mode="json", exclude={"at", "event_id"})
             for e in client.admin.audit_log(session)]
    decided = ("saved", "superseded", "conflicted", "archived", "merged", "kept",
               "retracted", "dropped", "prior_facts", "actions")
    traces = sorted(({k: t.get(k) for k in ("index", *decided)}
                     for t in client.traces(10_000, session_id=session)),
                    key=lambda t: t["index"])
    return {"facts": facts, "audit": audit, "traces": traces}


def _listed_every_episode(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reflection as it was: every episode lists the session's superseded facts (with their
    vectors) and plans over the current facts and those, all known up front."""
    planned = vars(Reflection)["_plan"]

    def eager(self: Reflection, episode: Any, prior: list[Fact], result: Any,
              turns: list[Any], namespace: str, prior_vectors: dict[str, Any],
              history: Any) -> Any:
        name = session_name(episode.namespace, episode.session_id)
        scope = _episode_scope(turns, namespace)
        hits = _seen(
            self.ctx.vectors.list_fact_hits(name, [FactStatus.SUPERSEDED.value]), scope)
        vectors = {**prior_vectors,
                   **{h.fact.fact_id: h.vector for h in hits if h.vector is not None}}
        return planned(self, episode, [*prior, *(h.fact for h in hits)], result, turns,
                       namespace, vectors, lambda: ())

    monkeypatch.setattr(Reflection, "_plan", eager)


def test_a_long_session_reflects_as_it_did_when_every_episode_listed_its_history(
    tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same conversations, reflected with the history read when needed and with it
    listed every episode: the same facts, audit trail and decisions. (Every current fact
    is shown to the reflector: past `max_unscoped_facts` it is shown the nearest ones, and
    with the hashing embedder many facts tie with the episode at 0, so which of them make
    the cut varies from run to run, with or without this change.)"""
    settings = settings.model_copy(update={"reflection": settings.reflection.model_copy(
        update={"max_unscoped_facts": 10_000})})
    listings: list[tuple[str, ...]] = []
    reads: list[str] = []
    list_hits, known_get = VectorStore.list_fact_hits, KnownFacts.get

    def spy_list(self: VectorStore, name: str, statuses: Sequence[str]) -> Any:
        listings.append(tuple(statuses))
        return list_hits(self, name, statuses)

    def spy_get(self: KnownFacts, name: Any) -> Any:
        reads.append(name)
        return known_get(self, name)

    monkeypatch.setattr(VectorStore, "list_fact_hits", spy_list)
    monkeypatch.setattr(KnownFacts, "get", spy_get)
    with MemoryClient.local(tmp_path / "new", settings, embedder=HashingEmbedder(1024)) as c:
        _play(c, "long")
        now = _outcome(c, "long")
    episodes = len(now["traces"])
    assert episodes > 20 and not any(t.get("failed") for t in now["traces"])
    assert any(f["status"] == "superseded" for f in now["facts"])
    # The history was never listed; it was read for the statements that needed it, and
    # those were a few of the episodes (recall's reads of the facts are not counted here:
    # nothing recalls during the run).
    assert ("superseded",) not in listings
    assert 0 < len(reads) < episodes

    listings.clear()
    _listed_every_episode(monkeypatch)
    with MemoryClient.local(tmp_path / "old", settings, embedder=HashingEmbedder(1024)) as c:
        _play(c, "long")
        before = _outcome(c, "long")
    assert listings.count(("superseded",)) == episodes
    assert now == before


# -- the planner reads the history only when a statement needs it ------------------------

def _fact(fid: str, content: str, subject: str, status: FactStatus = FactStatus.ACTIVE,
          **update: Any) -> Fact:
    return Fact(fact_id=fid, session_id="s", content=content, subject=subject,
                kind=FactKind.DECISION, status=status, created_at=T0, valid_from=T0, **update)


WHERE = PlanContext(session_id="s", episode_id="ep9", namespace="default", now=T0,
                    valid_from=T0 + timedelta(hours=1), similarity=lambda _c, _f: 0.0)
# CI went from Jenkins to GitHub Actions; a plain fact without a slot is current.
HISTORY = [_fact("f1", "CI runs on Jenkins", "", FactStatus.SUPERSEDED, superseded_by="f2")]
PRIOR = [_fact("f2", "CI runs on GitHub Actions", "", supersedes="f1")]


class Counted:
    def __init__(self, facts: list[Fact]) -> None:
        self.facts, self.calls = facts, 0

    def __call__(self) -> list[Fact]:
        self.calls += 1
        return self.facts


def test_a_revert_reads_the_history_and_plans_as_with_it_known_up_front() -> None:
    back = [FactAction(op="add", content="We're going back to Jenkins",
                       kind=FactKind.DECISION, source_turn_ids=["t9"])]
    history = Counted(HISTORY)
    plan = plan_actions(PRIOR, back, WHERE, history)
    assert history.calls == 1
    assert plan.superseded == ["f2"]  # found through the history: Jenkins was f1's value
    assert plan == plan_actions([*PRIOR, *HISTORY], back, WHERE)


def test_statements_that_do_not_look_back_never_read_the_history() -> None:
    stated = [FactAction(op="add", content="The deploy window is Friday at 5pm",
                         subject="deploy window", kind=FactKind.DECISION),
              FactAction(op="add", content="We also use Buildkite for mobile builds",
                         kind=FactKind.DECISION)]
    history = Counted(HISTORY)
    assert plan_actions(PRIOR, stated, WHERE, history) == plan_actions(
        [*PRIOR, *HISTORY], stated, WHERE)
    # The LLM's additions, when there are none to judge, read nothing either.
    assert plan_with_additions(PRIOR, stated, [], WHERE, history) == plan_with_additions(
        [*PRIOR, *HISTORY], stated, [], WHERE)
    assert history.calls == 0


def test_an_llm_addition_restating_a_retired_value_is_judged_against_the_history() -> None:
    old = [FactAction(op="add", content="CI runs on Jenkins", kind=FactKind.DECISION,
                      source_turn_ids=["t1"])]
    turns = [Turn(turn_id="t1", session_id="s", seq=1, role=Role.USER, token_count=4,
                  content="CI runs on Jenkins", timestamp=T0)]
    where = PlanContext(**{**WHERE.__dict__, "turns": turns})
    history = Counted(HISTORY)
    plan = plan_with_additions(PRIOR, [], old, where, history)
    assert history.calls >= 1
    assert plan == plan_with_additions([*PRIOR, *HISTORY], [], old, where)
    assert any("restates retired f1" in d for d in plan.dropped)
