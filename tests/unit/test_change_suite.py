"""The change suite: its data, the strict/ranked judge, scoring, and a short end-to-end play."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from hivemem.config import Settings
from hivemem.evaluation import change as ch
from hivemem.evaluation.change_runner import load_change_suite, run_change_suite
from hivemem.providers.embedders import HashingEmbedder


def _probe(expected: tuple[str, ...], stale: tuple[str, ...] = (), *,
           history: bool = False) -> ch.ChangeProbe:
    return ch.ChangeProbe(query="q?", expected=expected, stale=stale,
                          category="history" if history else "supersede_plain", history=history)


# -- the data -----------------------------------------------------------------------------


def test_suite_is_big_enough_and_covers_every_rule() -> None:
    suite = load_change_suite()
    assert len(suite.conversations) >= 40
    probes = [p for c in suite.conversations for p in c.probes]
    counts = Counter(p.category for p in probes)
    assert set(counts) == set(ch.CATEGORIES)
    assert all(n >= 4 for n in counts.values()), counts
    assert Counter(c.category for c in suite.conversations).keys() == set(ch.CATEGORIES)
    speakers = {t.agent for c in suite.conversations for t in c.turns if t.agent}
    assert {"sam", "priya"} <= speakers


def test_every_probe_value_is_stated_and_never_given_away_by_the_query() -> None:
    for conv in load_change_suite().conversations:
        assert ch.MIN_TURNS <= len(conv.turns) <= ch.MAX_TURNS
        texts = [t.content for t in conv.turns]
        for probe in conv.probes:
            assert probe.query not in texts  # probes are never part of the conversation
            for value in (*probe.expected, *probe.stale):
                assert any(ch.mentions(t, value) for t in texts), (conv.id, value)
                assert probe.history or not ch.mentions(probe.query, value), (conv.id, value)
            if probe.history:
                assert not probe.stale, conv.id  # the old value is the answer, nothing is stale
            # a superseded value was stated before its successor (for non-changes and other
            # speakers the misleading value comes after the one that stays true)
            changes = ("supersede_update_words", "supersede_plain", "retraction", "revert")
            for stale in probe.stale if probe.category in changes else ():
                first_stale = min(i for i, t in enumerate(texts) if ch.mentions(t, stale))
                last_current = max(i for i, t in enumerate(texts)
                                   if any(ch.mentions(t, e) for e in probe.expected))
                assert first_stale <= last_current, (conv.id, stale)


def test_the_issue_example_is_in_the_suite() -> None:
    conv = load_change_suite().select(ids=["db-postgres-to-mysql"]).conversations[0]
    probe = conv.probes[0]
    assert probe.query == "which database are we using now?"
    assert probe.expected == ("MySQL",) and probe.stale == ("PostgreSQL",)
    assert any("switch the database to MySQL" in t.content for t in conv.turns)


def test_malformed_suites_are_refused() -> None:
    turn = {"role": "user", "content": "hello"}
    good = {"id": "a", "category": "revert", "turns": [turn] * 10,
            "probes": [{"query": "q", "expected": ["x"], "category": "revert"}]}
    ch.parse_suite({"version": 1, "conversations": [good]})
    with pytest.raises(ValueError):
        ch.parse_suite({"version": 1, "conversations": [good, good]})  # duplicate ids
    with pytest.raises(ValueError):
        ch.parse_suite({"version": 1, "conversations": [{**good, "turns": [turn] * 9}]})
    with pytest.raises(ValueError):
        ch.parse_suite({"version": 1, "conversations": [
            {**good, "probes": [{"query": "q", "expected": ["x"], "stale": ["X"],
                                 "category": "revert"}]}]})
    with pytest.raises(ValueError):
        ch.parse_suite({"version": 1, "conversations": [
            {**good, "probes": [{"query": "q", "expected": ["x"], "category": "nope"}]}]})


# -- the judge ----------------------------------------------------------------------------


def test_strict_and_ranked_when_only_the_current_value_is_shown() -> None:
    verdict = ch.judge_change(_probe(("MySQL",), ("PostgreSQL",)),
                              ["We run MySQL in production", "the API must stay fast"])
    assert verdict.strict and verdict.ranked
    assert verdict.rank == 1 and verdict.stale_rank is None and verdict.items == 2


def test_a_stale_item_below_the_current_one_is_ranked_but_not_strict() -> None:
    verdict = ch.judge_change(_probe(("MySQL",), ("PostgreSQL",)),
                              ["we switch the database to MySQL", "We decided on PostgreSQL"])
    assert verdict.ranked and not verdict.strict
    assert verdict.rank == 1 and verdict.stale_rank == 2 and verdict.stale_items == 1


def test_a_stale_item_above_the_current_one_fails_both() -> None:
    verdict = ch.judge_change(_probe(("MySQL",), ("PostgreSQL",)),
                              ["We decided on PostgreSQL", "we switch the database to MySQL"])
    assert not verdict.ranked and not verdict.strict
    assert verdict.rank == 2 and verdict.stale_rank == 1


def test_an_item_carrying_both_values_counts_as_current() -> None:
    verdict = ch.judge_change(_probe(("MySQL",), ("PostgreSQL",)),
                              ["switch from PostgreSQL to MySQL", "unrelated"])
    assert verdict.strict and verdict.ranked and verdict.stale_rank is None


def test_missing_values_fail_strict_and_a_missing_answer_fails_ranked() -> None:
    both = _probe(("PostgreSQL", "Redis"))
    half = ch.judge_change(both, ["we use postgresql for everything"])
    assert half.ranked and not half.strict and half.missing == ("Redis",)
    assert ch.judge_change(both, ["Redis caches sessions", "PostgreSQL stores orders"]).strict
    nothing = ch.judge_change(_probe(("MySQL",), ("PostgreSQL",)), [])
    assert not nothing.ranked and not nothing.strict and nothing.rank is None
    unrelated = ch.judge_change(_probe(("MySQL",)), ["the API must stay fast"])
    assert not unrelated.ranked and not unrelated.strict


def test_whole_words_case_insensitive() -> None:
    probe = _probe(("Node 22",), ("Node 18",))
    assert not ch.judge_change(probe, ["node 220 is not a thing"]).ranked
    assert ch.judge_change(probe, ["the build uses NODE 22."]).strict
    assert not ch.judge_change(_probe(("3 seconds",)), ["a 30 seconds timeout"]).ranked


def test_history_probes_tolerate_old_values() -> None:
    past = _probe(("PostgreSQL",), history=True)
    verdict = ch.judge_change(past, ["we switch to MySQL", "We decided on PostgreSQL"])
    assert verdict.strict and verdict.ranked and verdict.rank == 2
    # a history probe with stale values still ranks, but stale items do not break strict
    mixed = _probe(("PostgreSQL",), ("MySQL",), history=True)
    verdict = ch.judge_change(mixed, ["MySQL now", "PostgreSQL before"])
    assert verdict.strict and not verdict.ranked
    assert not ch.judge_change(past, ["we switch to MySQL"]).strict


def test_score_and_table_per_category() -> None:
    suite = ch.parse_suite({"version": 1, "conversations": [{
        "id": "a", "category": "revert",
        "turns": [{"role": "user", "content": "Jenkins"}] * 10,
        "probes": [
            {"query": "ci?", "expected": ["Jenkins"], "stale": ["Travis"],
             "category": "revert"},
            {"query": "ci before?", "expected": ["Travis"], "category": "history",
             "history": True},
        ]}]})
    conv = suite.conversations[0]
    run = ch.ChangeRun(system="x", version="1", reflector="none", token_budget=300)
    run.probes.append(ch.probe_result("x", conv, conv.probes[0], ["Travis", "Jenkins"], 5, 1.0))
    run.probes.append(ch.probe_result("x", conv, conv.probes[1], ["Travis"], 2, 1.0))
    scored = ch.score(run)
    assert scored.overall.probes == 2 and scored.overall.strict == 1
    assert scored.overall.ranked == 1 and scored.overall.ranked_rate == 0.5
    assert set(scored.categories) == {"revert", "history"}
    assert scored.categories["revert"].ranked == 0 and scored.categories["history"].strict == 1
    table = ch.markdown_table([scored])
    assert "| x 1 | 0% / 0% | 100% / 100% | 50% / 50% |" in table
    assert "revert 1, history 1" in table


# -- end to end ---------------------------------------------------------------------------


def test_three_conversations_play_end_to_end(tmp_path: Path) -> None:
    settings = Settings.model_validate({
        "embedding": {"provider": "hashing", "dim": 1024}, "worker": {"block_ms": 50}})
    suite = load_change_suite().select(
        ids=["db-postgres-to-mysql", "addition-redis-cache", "speakers-conflict-release-day"])
    seen: list[str] = []
    run = run_change_suite(settings, suite=suite, folder=tmp_path / "m",
                           embedder=HashingEmbedder(1024), token_budget=300,
                           on_done=lambda conv, _results: seen.append(conv.id))
    assert seen == [c.id for c in suite.conversations]
    assert run.system == "hivemem" and run.reflector == "heuristic" and run.token_budget == 300
    assert len(run.probes) == sum(len(c.probes) for c in suite.conversations) == 4
    assert [p.turns for p in run.conversations] == [len(c.turns) for c in suite.conversations]
    assert all(p.episodes and p.episodes >= 1 for p in run.conversations)
    by_probe = {(c.id, p.query): p for c in suite.conversations for p in c.probes}
    for result in run.probes:
        assert result.context and 0 < result.used_tokens <= 300
        # the stored verdict is the judge's verdict on the stored context
        probe = by_probe[(result.conversation, result.query)]
        verdict = ch.judge_change(probe, result.context)
        assert (result.strict, result.ranked) == (verdict.strict, verdict.ranked)
    # short conversations fit the budget whole: every stated value is in the context
    history = next(r for r in run.probes if r.category == "history")
    assert history.strict and history.ranked
    assert all(r.ranked for r in run.probes if r.category in ("addition", "speakers"))
