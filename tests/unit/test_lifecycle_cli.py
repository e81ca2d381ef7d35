"""The lifecycle commands end to end on an embedded store: session, compact, timeline,
audit, export/import, backup/restore, and bad input."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from hivemem.cli.main import cli

ENV = {
    "HIVEMEM_EMBEDDING__PROVIDER": "hashing",
    "HIVEMEM_EMBEDDING__DIM": "256",
    "HIVEMEM_WORKER__BLOCK_MS": "50",
    "HIVEMEM_EPISODES__MAX_TURNS": "2",
}


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in list(os.environ):
        if name.startswith("HIVEMEM_"):
            monkeypatch.delenv(name)
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    return tmp_path / "store"


def run(store: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--local", str(store), *args], catch_exceptions=False)


def run_json(store: Path, *args: str) -> Any:
    result = run(store, *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_lifecycle_commands(store: Path, tmp_path: Path) -> None:
    for text in ("We decided to use PostgreSQL for the database",
                 "The API must never return more than 100 orders per page"):
        run_json(store, "ingest", text, "--session", "s1", "--kind", "decision")
    info = run_json(store, "session", "-s", "s1", "--title", "Backend", "--agent", "planner")
    assert info["title"] == "Backend" and info["turns"] == 2 and info["episodes"] == 1
    assert info["facts_active"] >= 1

    preview = run_json(store, "compact", "-s", "s1", "--preview")
    assert preview["preview"] is True and preview["active_before"] == info["facts_active"]
    applied = run_json(store, "compact", "--session", "s1")
    assert applied["run_id"] == preview["run_id"]
    assert "kept" in run(store, "compact", "-s", "s1").stdout

    events = run_json(store, "timeline", "-s", "s1")
    kinds = [e["kind"] for e in events]
    assert kinds[:3] == ["turn", "turn", "episode"] and "fact" in kinds
    fact_id = next(e["ref_id"] for e in events if e["kind"] == "fact")
    audit = run_json(store, "audit", fact_id)
    assert audit["fact"]["fact_id"] == fact_id
    assert audit["events"][0]["action"] == "created"
    assert audit["events"][0]["actor"] == "reflection"
    assert "audit log" in run(store, "audit", fact_id).stdout

    out = tmp_path / "s1.jsonl"
    exported = run_json(store, "export", "-s", "s1", "-o", str(out), "--vectors")
    assert exported["counts"]["turn"] == 2 and exported["vectors"] is True
    imported = run_json(store, "import", str(out))
    assert imported["sessions"] == {"s1": "s1.2"}
    backup = tmp_path / "b.jsonl.gz"
    assert run_json(store, "backup", str(backup))["sessions"] == ["s1", "s1.2"]
    restored = run_json(store, "restore", str(backup))
    assert restored["mode"] == "replace" and restored["written"]["turn"] == 4
    assert "restored 2 session(s)" in run(store, "restore", str(backup)).stdout


def test_bad_input_exits_before_writing(store: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"format": "something.else", "version": 1}\n')
    result = run(store, "import", str(bad))
    assert result.exit_code == 1 and "unknown format" in result.output
    assert run(store, "timeline", "-s", "bad id!").exit_code == 2
    assert not (store / "qdrant").exists()  # refused before the store was opened
    assert run(store, "ingest", "one turn", "-s", "s1").exit_code == 0
    unknown = run(store, "compact", "-s", "nope", "--json")
    assert unknown.exit_code == 1 and "no session 'nope'" in unknown.output
