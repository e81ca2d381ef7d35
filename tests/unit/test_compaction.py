"""Compaction planning (pure): merges, staleness, the cap, layers, the diff and its events."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from hivemem.domain.audit import compaction_events
from hivemem.domain.compaction import (
    CompactionPolicy,
    plan_compaction,
    target_layer,
    value_of,
)
from hivemem.domain.fact import Fact, FactKind, FactStatus

CLOCK = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def fact(fid: str, content: str, *, kind: FactKind = FactKind.FACT, days_old: float = 0.0,
         confidence: float = 0.8, sources: tuple[str, ...] = ("t1",),
         status: FactStatus = FactStatus.ACTIVE, layer: str = "semantic") -> Fact:
    at = CLOCK - timedelta(days=days_old)
    return Fact(fact_id=fid, session_id="s", content=content, kind=kind, confidence=confidence,
                source_turn_ids=list(sources), created_at=at, valid_from=at, status=status,
                layer=layer)


def unit(*values: float) -> np.ndarray:
    v = np.asarray(values, dtype=np.float32)
    return v / np.linalg.norm(v)


def plan(facts: list[Fact], vectors: list[np.ndarray] | None = None,
         **policy: object) -> object:
    matrix = None if vectors is None else np.stack(vectors).astype(np.float32)
    return plan_compaction(facts, matrix, session_id="s", clock=CLOCK,
                           policy=CompactionPolicy.model_validate(policy))


def test_near_duplicates_merge_into_the_best_wording_with_all_provenance() -> None:
    a = fact("a", "The team prefers dark mode in the editor", confidence=0.7, sources=("t1",))
    b = fact("b", "Team likes the editor in dark mode", confidence=0.9, sources=("t2", "t3"))
    c = fact("c", "Deploys happen on Fridays", sources=("t4",))
    p = plan([a, b, c], [unit(1, 0.02, 0), unit(1, 0, 0), unit(0, 0, 1)])
    diff = p.diff
    assert [(e.fact_id, e.into) for e in diff.merged] == [("a", "b")]
    assert diff.merged[0].similarity is not None and diff.merged[0].similarity > 0.99
    keeper = p.writes["b"]
    assert keeper.source_turn_ids == ["t1", "t2", "t3"] and keeper.status == FactStatus.ACTIVE
    dup = p.writes["a"]
    assert dup.status == FactStatus.ARCHIVED and dup.superseded_by == "b"
    assert dup.layer == "archived" and dup.valid_to == CLOCK
    kept = {e.fact_id: e for e in diff.kept}
    assert set(kept) == {"b", "c"} and kept["b"].merged_from == ["a"]
    assert diff.active_before == 3 and diff.active_after == 2


def test_identical_wording_merges_even_without_vectors() -> None:
    a = fact("a", "Use PostgreSQL.", sources=("t1",))
    b = fact("b", "use postgresql", sources=("t2",))
    p = plan([a, b])
    assert len(p.diff.merged) == 1
    keeper = p.diff.merged[0].into
    assert p.writes[keeper].source_turn_ids == ["t1", "t2"]


def test_contradictions_other_kinds_and_conflicted_facts_never_merge() -> None:
    pg = fact("pg", "We use PostgreSQL for storage", kind=FactKind.DECISION)
    my = fact("my", "We use MySQL for storage", kind=FactKind.DECISION)
    goal = fact("goal", "We use PostgreSQL for storage", kind=FactKind.GOAL)
    rival = fact("rival", "We use PostgreSQL for storage", kind=FactKind.DECISION,
                 status=FactStatus.CONFLICTED)
    same = unit(1, 0, 0)
    p = plan([pg, my, goal, rival], [same, same, same, same])
    assert p.diff.merged == []
    assert all(e.fact_id in {"pg", "my", "goal", "rival"} for e in p.diff.kept)


def test_stale_unconfirmed_facts_age_out_and_durable_or_operational_ones_stay() -> None:
    old_note = fact("note", "Someone mentioned a blue mug", days_old=90, confidence=0.6)
    confirmed = fact("conf", "The office is in Berlin", days_old=90, sources=("t1", "t2"))
    goal = fact("goal", "Ship the beta", kind=FactKind.GOAL, days_old=90, confidence=0.6)
    fresh = fact("fresh", "The printer is broken today", days_old=0.2, confidence=0.6)
    assert plan([old_note, confirmed, goal, fresh]).diff.archived == []  # a small session
    p = plan([old_note, confirmed, goal, fresh], stale_above=3)
    assert [e.fact_id for e in p.diff.archived] == ["note"]
    assert "stale" in p.diff.archived[0].reason and p.writes["note"].layer == "archived"
    layers = {e.fact_id: e.to_layer for e in p.diff.kept}
    assert layers == {"conf": "semantic", "goal": "operational", "fresh": "working"}


def test_the_cap_archives_the_lowest_value_first_and_spares_conflicted_facts() -> None:
    facts = [fact(f"f{i}", f"fact number {i}", confidence=0.5 + i * 0.05) for i in range(6)]
    facts.append(fact("x", "contested", confidence=0.1, status=FactStatus.CONFLICTED))
    vectors = [unit(*np.eye(8)[i]) for i in range(7)]
    p = plan(facts, vectors, max_active_facts=4)
    assert sorted(e.fact_id for e in p.diff.archived) == ["f0", "f1", "f2"]
    assert all("max_active_facts" in e.reason for e in p.diff.archived)
    assert p.diff.active_after == 4 and "x" in {e.fact_id for e in p.diff.kept}


def test_layer_moves_are_promotions_or_demotions_with_reasons() -> None:
    goal = fact("goal", "Reach 1k users", kind=FactKind.GOAL, layer="working")
    aging = fact("aging", "The cafe opens at 8", days_old=5, layer="semantic")
    p = plan([goal, aging], [unit(1, 0), unit(0, 1)])
    assert [(e.fact_id, e.from_layer, e.to_layer) for e in p.diff.promoted] == [
        ("goal", "working", "operational")]
    assert [(e.fact_id, e.to_layer) for e in p.diff.demoted] == [("aging", "short_term")]
    assert p.writes["goal"].layer == "operational"


def test_history_is_left_alone_and_the_plan_is_deterministic() -> None:
    old = fact("old", "v1", status=FactStatus.SUPERSEDED, days_old=400)
    gone = fact("gone", "retracted", status=FactStatus.ARCHIVED, layer="archived")
    live = fact("live", "v2", kind=FactKind.DECISION, layer="operational")
    first = plan([old, gone, live], [unit(1, 0), unit(1, 0), unit(1, 0)])
    again = plan([old, gone, live], [unit(1, 0), unit(1, 0), unit(1, 0)])
    assert first.writes == {} and first.diff.changes == 0
    assert first.diff == again.diff and first.diff.facts_seen == 3


def test_compaction_events_cover_every_change() -> None:
    a = fact("a", "same words", sources=("t1",))
    b = fact("b", "same words", sources=("t2",), confidence=0.9)
    note = fact("note", "stale thing", days_old=200, confidence=0.5)
    p = plan([a, b, note], [unit(1, 0), unit(1, 0), unit(0, 1)], stale_above=0)
    events = compaction_events(p, [a, b, note], at=CLOCK)
    actions = sorted((e.fact_id, e.action) for e in events)
    assert ("a", "merged") in actions and ("b", "reinforced") in actions
    assert ("note", "archived") in actions
    merged = next(e for e in events if e.action == "merged")
    assert merged.from_status == "active" and merged.to_status == "archived"
    assert merged.related == ["b"] and merged.actor == "compaction"
    assert merged.cause == f"compaction {p.diff.run_id} (on demand)"


def test_value_and_layer_rules() -> None:
    policy = CompactionPolicy()
    once = fact("a", "x", confidence=0.8, days_old=30)
    twice = fact("b", "x", confidence=0.8, days_old=30, sources=("t1", "t2"))
    assert value_of(once, CLOCK, policy) == pytest.approx(0.4)
    assert value_of(twice, CLOCK, policy) > value_of(once, CLOCK, policy)
    assert target_layer(fact("f", "x", kind=FactKind.FAILURE), CLOCK, policy) == "episodic"
    assert target_layer(fact("p", "x", confidence=0.95, days_old=9), CLOCK, policy) == "semantic"


def test_ten_thousand_facts_plan_quickly() -> None:
    rng = np.random.default_rng(0)
    n = 10_000
    vectors = rng.normal(size=(n, 64)).astype(np.float32)
    facts = [fact(f"f{i}", f"fact {i}", days_old=float(i % 60)) for i in range(n)]
    p = plan_compaction(facts, vectors, session_id="s", clock=CLOCK,
                        policy=CompactionPolicy(max_active_facts=5000))
    assert p.diff.active_after <= 5000
    assert len(p.diff.archived) >= n - 5000


def test_a_retried_reflection_names_the_same_audit_events() -> None:
    from hivemem.domain.audit import reflection_events
    from hivemem.domain.consolidation import PlanContext, plan_actions
    from hivemem.domain.fact import FactAction

    def events() -> list[str]:
        plan = plan_actions([], [FactAction(op="add", content="Use PostgreSQL")], PlanContext(
            session_id="s", episode_id="ep", namespace="default", now=CLOCK,
            valid_from=CLOCK, similarity=lambda _c, _f: 0.0))
        return [e.event_id for e in reflection_events(plan, [], episode_id="ep", at=CLOCK)]

    first = events()
    assert len(first) == 1 and events() == first


def test_reflection_events_record_supersede_conflict_and_archive() -> None:
    from hivemem.domain.audit import reflection_events
    from hivemem.domain.consolidation import PlanContext, plan_actions
    from hivemem.domain.fact import FactAction

    db = fact("db", "We use PostgreSQL", kind=FactKind.DECISION).model_copy(
        update={"subject": "database"})
    api = fact("api", "The API uses Django", kind=FactKind.DECISION).model_copy(
        update={"subject": "api"})
    old = fact("old", "Deadline is Friday", kind=FactKind.CONSTRAINT)
    plan = plan_actions(
        [db, api, old],
        [FactAction(op="update", target="db", content="We use MySQL", subject="database",
                    kind=FactKind.DECISION, reason="ops asked"),
         FactAction(op="add", content="The API uses Flask", subject="api",
                    kind=FactKind.DECISION),
         FactAction(op="remove", target="old", reason="cancelled")],
        PlanContext(session_id="s", episode_id="ep", namespace="default", now=CLOCK,
                    valid_from=CLOCK, similarity=lambda _c, _f: 0.0))
    events = {(e.fact_id, e.action): e for e in reflection_events(
        plan, [db, api, old], episode_id="ep", at=CLOCK)}
    new_db = plan.writes["db"].superseded_by
    assert events[("db", "superseded")].related == [new_db]
    assert events[("db", "superseded")].reason == f"superseded_by:{new_db}"  # ids, no content
    assert events[("db", "superseded")].from_status == "active"
    assert events[("api", "conflicted")].to_status == "conflicted"
    assert events[("old", "archived")].reason == "removed"
    assert events[(new_db, "created")].cause == "episode ep"
