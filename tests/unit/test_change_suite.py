"""The change suite: its data, the strict/ranked judge, scoring, and a short end-to-end play."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from hivemem.config import Settings
from hivemem.evaluation import change as ch
from hivemem.evaluation.change_parts import (
    PART_FILES,
    is_heldout,
    load_part,
    part_shipped,
    split_heldout,
)
from hivemem.evaluation.change_runner import (
    load_change_suite,
    play_change_suite,
    run_change_suite,
    session_for,
)
from hivemem.producer.client import MemoryClient
from hivemem.providers.embedders import HashingEmbedder

ROOT = Path(__file__).resolve().parents[2]
V1_CATEGORIES = {"supersede_update_words", "supersede_plain", "retraction", "revert",
                 "addition", "non_change", "speakers", "history"}


def _probe(expected: tuple[str, ...], stale: tuple[str, ...] = (), *,
           history: bool = False) -> ch.ChangeProbe:
    return ch.ChangeProbe(query="q?", expected=expected, stale=stale,
                          category="history" if history else "supersede_plain", history=history)


# -- the data -----------------------------------------------------------------------------


def test_suite_is_big_enough_and_covers_every_rule() -> None:
    suite = load_change_suite()  # the legacy v1 part: the first 8 categories, all at the end
    assert suite.version == 1 and len(suite.conversations) >= 40
    probes = [p for c in suite.conversations for p in c.probes]
    counts = Counter(p.category for p in probes)
    assert set(counts) == V1_CATEGORIES < set(ch.CATEGORIES)
    assert all(n >= 4 for n in counts.values()), counts
    assert Counter(c.category for c in suite.conversations).keys() == V1_CATEGORIES
    assert all(p.after_turn is None for p in probes)
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
    turn = {"role": "user", "content": "hello x"}
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
    # an agent ingest would refuse ("Dr Okafor"): refused when the suite is read, not when
    # a benchmark reaches that turn
    with pytest.raises(ValueError, match="agent 'Dr Okafor'"):
        ch.parse_suite({"version": 1, "conversations": [
            {**good, "turns": [{**turn, "agent": "Dr Okafor"}] * 10}]})


# -- schema v2: probes asked mid-conversation ------------------------------------------------


def _v2(turns: list[str], *probes: dict[str, Any], version: int = 2) -> dict[str, Any]:
    return {"version": version, "conversations": [{
        "id": "c", "category": "numbers_dates",
        "turns": [{"role": "user", "content": t} for t in turns],
        "probes": list(probes)}]}


TURNS = ["The limit is 200 requests.", *(f"filler {i}" for i in range(10)),
         "Raise the limit to 500.", "done"]  # 13 turns


def test_v2_probes_carry_their_point_and_the_new_categories() -> None:
    suite = ch.parse_suite(_v2(
        TURNS,
        {"query": "limit?", "after_turn": 1, "expected": ["200"], "category": "numbers_dates"},
        {"query": "limit now?", "after_turn": 12, "expected": ["500"], "stale": ["200"],
         "category": "long_gap"},
        {"query": "limit at the end?", "expected": ["500"], "category": "multi_value"},
        {"query": "and now?", "after_turn": 13, "expected": ["500"],
         "category": "correction_chain"}))
    conv = suite.conversations[0]
    assert [p.point(len(conv.turns)) for p in conv.probes] == [1, 12, 13, 13]
    assert [p.at_end(len(conv.turns)) for p in conv.probes] == [False, False, True, True]
    assert [p.query for p in ch.asked_probes(conv, "reflected")] == [
        "limit at the end?", "and now?"]
    assert [p.query for p in ch.asked_probes(conv, "live")] == [
        "limit?", "limit now?", "limit at the end?", "and now?"]
    # written out of order, asked by point (ties as written)
    shuffled = conv.model_copy(update={"probes": conv.probes[::-1]})
    assert [p.point(13) for p in ch.asked_probes(shuffled, "live")] == [1, 12, 13, 13]
    # 60 turns are fine, 61 are not
    ch.parse_suite(_v2(TURNS + ["more"] * 47, {"query": "q", "expected": ["500"],
                                               "category": "numbers_dates"}))
    with pytest.raises(ValueError, match="61 turns"):
        ch.parse_suite(_v2(TURNS + ["more"] * 48, {"query": "q", "expected": ["500"],
                                                   "category": "numbers_dates"}))


@pytest.mark.parametrize(("probe", "message"), [
    ({"after_turn": 0, "expected": ["200"]}, "after_turn"),
    ({"after_turn": 14, "expected": ["200"]}, "after_turn: 14 is past the last turn"),
    ({"after_turn": 11, "expected": ["500"]}, "expected: '500' is not said in the first 11"),
    ({"after_turn": 1, "expected": ["200"], "stale": ["500"]}, "stale: '500' is not said"),
    ({"expected": ["300"]}, "expected: '300' is not said in the first 13"),
    ({"expected": ["limit to 50"]}, "not said"),  # whole words: "500" is not "50"
    ({"afterturn": 12, "expected": ["500"]}, "afterturn"),  # a misspelt key is refused
])
def test_v2_probes_must_be_answerable_at_their_point(probe: dict[str, Any],
                                                     message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ch.parse_suite(_v2(TURNS, {"query": "q", "category": "numbers_dates", **probe}))


def test_unknown_versions_are_refused_and_v1_files_may_carry_points() -> None:
    probe = {"query": "q", "after_turn": 12, "expected": ["500"], "category": "revert"}
    with pytest.raises(ValueError, match="version 3"):
        ch.parse_suite(_v2(TURNS, probe, version=3))
    assert ch.parse_suite(_v2(TURNS, probe, version=1)).conversations[0].probes[0].after_turn == 12


# -- the parts and the held-out rule ---------------------------------------------------------


def _doc(prefix: str, n: int) -> dict[str, Any]:
    probe = {"query": "q", "after_turn": 10, "expected": ["x"], "category": "revert"}
    return {"version": 2, "conversations": [
        {"id": f"{prefix}-{i}", "category": "revert",
         "turns": [{"role": "user", "content": f"x {i}"}] * 10, "probes": [probe]}
        for i in range(n)]}


def test_every_third_conversation_of_each_source_is_held_out() -> None:
    assert [i for i in range(10) if is_heldout(i)] == [2, 5, 8]
    tuning, heldout = split_heldout([_doc("a", 7), _doc("b", 5)])
    assert [c["id"] for c in heldout] == ["a-2", "a-5", "b-2"]
    assert [c["id"] for c in tuning] == ["a-0", "a-1", "a-3", "a-4", "a-6",
                                         "b-0", "b-1", "b-3", "b-4"]
    assert split_heldout([_doc("a", 2)]) == (_doc("a", 2)["conversations"], [])


def _checker(path: Path, passes: bool) -> Path:
    path.write_text("import sys\nprint('1 conversations')\n"
                    + ("print('OK')\n" if passes else "print('c: 1 errors')\n"))
    return path


def test_the_split_script_writes_both_parts_only_from_checked_sources(tmp_path: Path) -> None:
    sources = []
    for prefix, n in (("a", 6), ("b", 4)):
        sources.append(tmp_path / f"suite_{prefix}.json")
        sources[-1].write_text(json.dumps(_doc(prefix, n)))
    out = tmp_path / "data"
    script = [sys.executable, str(ROOT / "bench" / "change_split.py"), *map(str, sources),
              "--out-dir", str(out)]
    refused = subprocess.run([*script, "--checker", str(_checker(tmp_path / "no.py", False))],
                             capture_output=True, text=True, check=False)
    assert refused.returncode == 1 and "does not pass" in refused.stderr
    assert not out.exists()
    done = subprocess.run([*script, "--checker", str(_checker(tmp_path / "ok.py", True))],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    tuning = ch.parse_suite(json.loads((out / PART_FILES["tuning"]).read_text()))
    heldout = json.loads((out / PART_FILES["heldout"]).read_text())
    assert [c.id for c in tuning.conversations] == ["a-0", "a-1", "a-3", "a-4", "b-0", "b-1",
                                                    "b-3"]
    assert [c["id"] for c in heldout["conversations"]] == ["a-2", "a-5", "b-2"]
    assert heldout["part"] == "heldout" and "i % 3 == 2" in heldout["split_rule"]
    assert heldout["sources"] == ["suite_a.json", "suite_b.json"]
    # the same id in both sources: nothing is written over the parts already there
    (tmp_path / "suite_b.json").write_text(json.dumps(_doc("a", 4)))
    clash = subprocess.run([*script, "--checker", str(tmp_path / "ok.py")],
                           capture_output=True, text=True, check=False)
    assert clash.returncode == 1 and "unique" in clash.stderr
    assert json.loads((out / PART_FILES["heldout"]).read_text()) == heldout


def test_held_out_results_are_written_as_scores_only() -> None:
    suite = ch.parse_suite(_v2(TURNS, {"query": "limit?", "expected": ["500"],
                                       "category": "numbers_dates"}))
    conv = suite.conversations[0]
    run = ch.ChangeRun(system="x", version="1", reflector="none", token_budget=300,
                       mode="live", part="heldout")
    run.probes.append(ch.probe_result("x", conv, conv.probes[0], ["limit 500"], 3, 1.0))
    withheld = ch.run_record(run)
    assert isinstance(withheld["probes"], str) and "withheld" in withheld["probes"]
    assert withheld["part"] == "heldout" and withheld["mode"] == "live"
    assert ch.run_record(run, show_heldout=True)["probes"][0]["context"] == ["limit 500"]
    tuning = ch.run_record(run.model_copy(update={"part": "tuning"}))
    assert tuning["probes"][0]["after_turn"] == 13


@pytest.mark.skipif(not part_shipped("heldout"), reason="the v2 parts are not split yet")
def test_the_shipped_v2_parts_follow_the_rule() -> None:
    tuning, heldout = load_part("tuning"), load_part("heldout")
    assert tuning.version == heldout.version == 2
    ids = [c.id for c in (*tuning.conversations, *heldout.conversations)]
    assert len(ids) == len(set(ids)) and len(ids) >= 150
    assert 0.3 <= len(heldout.conversations) / len(ids) <= 0.36
    assert all(p.after_turn is not None for c in tuning.conversations for p in c.probes)


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
        "turns": [{"role": "user", "content": "Travis then Jenkins"}] * 10,
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
    assert (scored.mode, scored.part) == ("reflected", "legacy")
    table = ch.markdown_table([scored])
    assert "| x 1 | reflected | legacy | 2 | 0% / 0% | 100% / 100% | 50% / 50% |" in table
    assert "reflected legacy: revert 1, history 1" in table
    live = ch.score(run.model_copy(update={"mode": "live", "part": "heldout",
                                           "probes": run.probes[:1]}))
    both = ch.markdown_table([scored, live])
    assert "| x 1 | live | heldout | 1 | 0% / 0% | - | 0% / 0% |" in both
    assert "live heldout: revert 1." in both


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


HOSTING = [
    "Let's host the service on AWS, in eu-west-1.",
    "Decision: AWS eu-west-1 it is.",
    "What should the health endpoint be called?",
    "Use /healthz, it is the common convention.",
    "Can you add a README section about local setup?",
    "Sure, I'll describe the docker compose file.",
    "And list the env variables it reads.",
    "Done: DATABASE_URL, LOG_LEVEL and PORT.",
    "Actually we're moving the hosting to GCP, the AWS credits ran out.",
    "Understood, GCP from now on.",
    "Thanks, that's all for today.",
    "Have a good evening.",
]


def test_live_mode_asks_each_probe_at_its_point_without_closing(tmp_path: Path) -> None:
    settings = Settings.model_validate({
        "embedding": {"provider": "hashing", "dim": 1024}, "worker": {"block_ms": 50}})
    suite = ch.parse_suite({"version": 2, "conversations": [{
        "id": "hosting", "category": "supersede_update_words",
        "turns": [{"role": "user" if i % 2 == 0 else "assistant", "content": text}
                  for i, text in enumerate(HOSTING)],
        "probes": [  # written out of order on purpose
            {"query": "Where is the service hosted?", "after_turn": 9, "expected": ["GCP"],
             "stale": ["AWS"], "category": "supersede_update_words"},
            {"query": "What is the health check path?", "expected": ["/healthz"],
             "category": "non_change"},
            {"query": "Which cloud do we deploy to?", "after_turn": 2, "expected": ["AWS"],
             "category": "supersede_update_words"},
        ]}]})
    conv = suite.conversations[0]
    with MemoryClient.local(tmp_path / "m", settings, embedder=HashingEmbedder(1024)) as client:
        live = play_change_suite(client, suite, 300, reflector="heuristic", mode="live",
                                 part="tuning")
        open_turns = client.wait_until_processed(
            session_for(conv, "live"), 60, stage="boundary").open_episode_turns
        reflected = play_change_suite(client, suite, 300, reflector="heuristic")
        closed_turns = client.wait_until_processed(
            session_for(conv, "reflected"), 60, stage="boundary").open_episode_turns
    assert (live.mode, live.part, reflected.mode, reflected.part) == (
        "live", "tuning", "reflected", "legacy")
    # live: every probe, in the order asked, each seeing only the turns said by its point
    assert [(r.after_turn, r.query) for r in live.probes] == [
        (2, "Which cloud do we deploy to?"), (9, "Where is the service hosted?"),
        (12, "What is the health check path?")]
    said_later = {2: ("healthz", "GCP", "evening"), 9: ("Thanks", "evening"), 12: ()}
    for result in live.probes:
        assert result.context, result
        # nothing said after the probe's point is in its context (turns or facts drawn from
        # them: reflection may run in the background, the test does not depend on it)
        for word in said_later[result.after_turn or 0]:
            assert not any(ch.mentions(text, word) for text in result.context), result
        verdict = ch.judge_change(next(p for p in conv.probes if p.query == result.query),
                                  result.context)
        assert (result.strict, result.ranked) == (verdict.strict, verdict.ranked)
    before = live.probes[0]
    assert before.strict and before.ranked  # only AWS was said by then
    assert any("GCP" in text for text in live.probes[1].context)
    # no close in live mode: the last episode is still open; reflected mode closed it
    assert open_turns >= 1 and closed_turns == 0
    # reflected: only the probe at the end, asked once the session was closed and reflected
    assert [(r.after_turn, r.query) for r in reflected.probes] == [
        (12, "What is the health check path?")]
    assert reflected.probes[0].strict
    assert [p.turns for p in (*live.conversations, *reflected.conversations)] == [12, 12]
