"""Memory that stays current, as a user sees it from the CLI: the issue's example, and
`hivemem eval --suite change`."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from hivemem.cli.main import cli


@pytest.fixture
def workspace(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    for name in list(os.environ):
        if name.startswith("HIVEMEM_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HIVEMEM_WORKER__BLOCK_MS", "50")
    monkeypatch.chdir(tmp_path)
    yield tmp_path


def run(*args: str) -> Result:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


@pytest.mark.model
def test_context_after_a_change_leads_with_the_new_state(
    workspace: Path, fastembed_env: Path
) -> None:
    """The three adds of the issue, with the real model: MySQL first, PostgreSQL left out."""
    run("init")
    run("ingest", "We decided to use PostgreSQL for the database", "--kind", "decision")
    run("ingest", "The API must stay under 200 ms p95", "--kind", "constraint")
    run("ingest", "Change of plan: we switch the database to MySQL, ops only supports it")
    found: dict[str, Any] = json.loads(
        run("recall", "which database are we using now?", "--budget", "40", "--json").stdout)
    contents = [item["content"] for item in found["items"]]
    assert contents, found
    assert "MySQL" in contents[0], contents
    assert not any("PostgreSQL" in c and "MySQL" not in c for c in contents), contents
    # Left out, and said why; the history is still there when asked for the past.
    reasons = {e.get("reason") for e in found["excluded"]
               if "PostgreSQL" in (e.get("content") or "")}
    assert "superseded" in reasons, found["excluded"]
    past: dict[str, Any] = json.loads(
        run("recall", "which database did we use before?", "--budget", "60", "--json").stdout)
    assert any("PostgreSQL" in item["content"] for item in past["items"]), past["items"]


def test_eval_change_suite_reports_strict_and_ranked_per_rule_and_mode(
    workspace: Path, tmp_path: Path
) -> None:
    os.environ["HIVEMEM_EMBEDDING__PROVIDER"] = "hashing"
    os.environ["HIVEMEM_EMBEDDING__DIM"] = "256"
    out = tmp_path / "results"
    result = run("eval", "--suite", "change", "--part", "legacy", "--mode", "both",
                 "--out", str(out))
    assert "reflected legacy: overall strict" in result.stdout
    assert "live legacy: overall strict" in result.stdout
    for category in ("supersede_update_words", "retraction", "revert", "addition",
                     "non_change", "speakers", "history"):
        assert category in result.stdout
    saved = json.loads((out / "change.json").read_text())
    assert [(s["mode"], s["part"]) for s in saved["scores"]] == [
        ("reflected", "legacy"), ("live", "legacy")]
    # the legacy part asks every probe at the end: both modes ask the same probes
    assert saved["scores"][0]["overall"]["probes"] == saved["scores"][1]["overall"]["probes"]
    assert saved["scores"][0]["overall"]["probes"] >= 40
    live = saved["runs"][1]
    assert live["mode"] == "live" and all(p["context"] for p in live["probes"])
    assert (out / "change.md").read_text().startswith("| system | mode | part |")


def test_eval_change_suite_names_a_part_not_shipped(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("hivemem.evaluation.change_parts.PART_FILES",
                        {"tuning": "missing.json", "heldout": "missing.json",
                         "legacy": "missing.json"})
    result = CliRunner().invoke(cli, ["eval", "--suite", "change", "--part", "tuning"])
    assert result.exit_code != 0 and "run bench/change_split.py" in result.output
