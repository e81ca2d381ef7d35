"""`hivemem --local DIR recall ...` with presets, explain and JSON (hashing embedder via env)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from hivemem.cli.main import cli


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HIVEMEM_EMBEDDING__PROVIDER", "hashing")
    monkeypatch.setenv("HIVEMEM_EMBEDDING__DIM", "256")


def run(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.usefixtures("env")
def test_recall_cli_json_explain_and_preset(tmp_path: Path) -> None:
    local = str(tmp_path / "mem")
    for text in ["We deploy with Helm on Kubernetes", "We deploy with Helm on Kubernetes",
                 "lunch is at noon"]:
        run("--local", local, "ingest", text, "--session", "s1")
    data = json.loads(run("--local", local, "recall", "how do we deploy", "-s", "s1", "--json",
                          "--explain", "--preset", "cheap", "--budget", "200"))
    assert data["preset"] == "cheap" and data["token_budget"] == 200
    assert data["items"][0]["content"] == "We deploy with Helm on Kubernetes"
    assert data["used_tokens"] == sum(i["token_count"] for i in data["items"])
    assert any(x["reason"] == "duplicate" for x in data["excluded"])
    text = run("--local", local, "recall", "how do we deploy", "-s", "s1", "--explain")
    assert "balanced" in text and "left out" in text and "duplicate" in text
    bad = CliRunner().invoke(cli, ["--local", local, "recall", "q", "-s", "s1", "--preset",
                                   "nope"])
    assert bad.exit_code == 2 and "nope" in bad.output


@pytest.mark.usefixtures("env")
def test_the_old_positional_forms_still_work_for_one_release(tmp_path: Path) -> None:
    local = str(tmp_path / "mem")
    result = CliRunner().invoke(cli, ["--local", local, "ingest", "s1", "assistant",
                                      "We deploy with Helm", "--json"])
    assert result.exit_code == 0, result.output
    assert "deprecated" in result.stderr
    assert json.loads(result.stdout)["session_id"] == "s1"
    data = json.loads(run("--local", local, "recall", "s1", "how do we deploy", "--json"))
    assert data["session_id"] == "s1"
    assert [i["content"] for i in data["items"]] == ["We deploy with Helm"]
    assert data["items"][0]["role"] == "assistant"
    facts = CliRunner().invoke(cli, ["--local", local, "facts", "s1", "--json"])
    assert facts.exit_code == 0 and "deprecated" in facts.stderr
    twice = CliRunner().invoke(cli, ["--local", local, "facts", "s1", "-s", "s1"])
    assert twice.exit_code == 2
