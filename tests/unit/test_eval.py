"""`hivemem eval`: the pure scenario generator, the judge, and `hivemem eval --quick`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from hivemem.cli.main import cli
from hivemem.evaluation import scenarios as sc
from hivemem.evaluation.report import percentile


@pytest.mark.parametrize("name", list(sc.SCENARIOS))
@pytest.mark.parametrize("turns", [10, 20, 40, 80])
def test_conversations_are_seeded_and_probes_come_later(name: str, turns: int) -> None:
    conv = sc.generate(name, turns, iteration=1, seed=7)
    assert conv == sc.generate(name, turns, iteration=1, seed=7)
    assert conv != sc.generate(name, turns, iteration=2, seed=7)
    assert len(conv.turns) == turns
    assert [t.role for t in conv.turns[:2]] == ["user", "assistant"]
    texts = [t.content for t in conv.turns]
    assert conv.probes
    for probe in conv.probes:
        assert probe.query not in texts  # probes are never part of the conversation
        assert not sc.mentions(probe.query, probe.expected)
        assert sc.mentions(texts[probe.planted_at], probe.expected)
        assert probe.planted_at < turns * sc.PLANT_REGION + 1
    planted = {t.content for t in conv.turns if t.planted}
    values = sc.all_values()
    for turn in conv.turns:
        if turn.content not in planted:
            assert not any(sc.mentions(turn.content, v) for v in values), turn.content


def test_progressive_requirements_probe_the_latest_value() -> None:
    conv = sc.generate("progressive_requirements", 40, 0, 0)
    assert len(conv.probes) == 2
    for probe in conv.probes:
        assert len(probe.stale) == 2 and probe.expected not in probe.stale
        first_stale = min(i for i, t in enumerate(conv.turns)
                          if sc.mentions(t.content, probe.stale[0]))
        assert first_stale < probe.planted_at


def test_judge() -> None:
    probe = sc.Probe(label="x", query="limit?", expected="200", stale=("50",), planted_at=0)
    assert sc.judge(probe, ["limit is 200 rows, not 50"]).hit
    assert sc.judge(probe, ["the limit is 200 rows", "it was 50"]).hit
    late = sc.judge(probe, ["at most 50 rows", "now 200 rows"])
    assert not late.hit and late.rank == 2 and late.stale_rank == 1
    assert not sc.judge(probe, ["2000 rows"]).hit  # whole words only
    assert not sc.judge(probe, []).hit
    plain = sc.Probe(label="y", query="db?", expected="PostgreSQL", planted_at=0)
    assert sc.judge(plain, ["filler", "we use postgresql"]).rank == 2


def test_percentile() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([float(i) for i in range(1, 101)], 95) == 95.0


def test_eval_quick_writes_json_and_markdown(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in list(os.environ):
        if name.startswith("HIVEMEM_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HIVEMEM_EMBEDDING__PROVIDER", "hashing")
    monkeypatch.setenv("HIVEMEM_EMBEDDING__DIM", "1024")
    monkeypatch.setenv("HIVEMEM_WORKER__BLOCK_MS", "50")
    runner = CliRunner()
    listed = runner.invoke(cli, ["eval", "--list-scenarios", "--json"])
    assert set(json.loads(listed.stdout)) == set(sc.SCENARIOS)
    bad = runner.invoke(cli, ["eval", "--scenario", "nope"])
    assert bad.exit_code == 2 and "unknown nope" in bad.output
    result = runner.invoke(cli, ["eval", "--quick", "--json", "--out", str(tmp_path)],
                           catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["turn_counts"] == [10] and report["iterations"] == 1
    summary = report["summaries"][0]
    assert summary["system"] == "hivemem" and summary["reflector"] == "heuristic"
    assert set(summary["cells"]) == set(sc.SCENARIOS)
    assert summary["overall"]["probes"] == sum(
        len(sc.generate(n, 10, 0, 0).probes) for n in sc.SCENARIOS)
    assert {"ingest", "recall", "embed_lag", "reflect_lag"} <= set(summary["latency_ms"])
    assert (tmp_path / "eval.json").is_file()
    md = (tmp_path / "eval.md").read_text()
    assert "| decision_tracking |" in md and "## Latency" in md
