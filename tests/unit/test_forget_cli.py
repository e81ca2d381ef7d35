"""`hivemem forget` on an embedded store: asks before it acts (and does nothing when told
no), prints the receipt, takes turns and facts (short fact ids too), refuses an unknown
session; `hivemem status` shows the last forget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from hivemem.cli.main import cli
from tests.support.cli_env import isolate

ENV = {
    "HIVEMEM_EMBEDDING__PROVIDER": "hashing",
    "HIVEMEM_EMBEDDING__DIM": "256",
    "HIVEMEM_WORKER__BLOCK_MS": "50",
    "HIVEMEM_EPISODES__MAX_TURNS": "2",
    "HIVEMEM_LIFECYCLE__FORGET_SETTLE_S": "0",
}


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    isolate(monkeypatch, tmp_path, ENV)
    return tmp_path / "store"


def run(store: Path, *args: str, answer: str | None = None) -> Result:
    return CliRunner().invoke(cli, ["--local", str(store), *args], input=answer,
                              catch_exceptions=False)


def test_forget_asks_then_prints_the_receipt(store: Path) -> None:
    for text in ("We decided to use PostgreSQL for the database",
                 "The staging password is hunter2-kiwi"):
        assert run(store, "ingest", text, "-s", "s1", "--kind", "decision").exit_code == 0
    refused = run(store, "forget", "-s", "s1", answer="n\n")
    assert refused.exit_code != 0 and "Forget session 's1'" in refused.output
    assert json.loads(run(store, "session", "-s", "s1", "--json").stdout)["turns"] == 2

    facts = json.loads(run(store, "facts", "-s", "s1", "--json").stdout)
    fact_list = facts["facts"] if isinstance(facts, dict) else facts
    kiwi = next(f for f in fact_list if "kiwi" in f["content"])
    done = run(store, "forget", "-s", "s1", "--fact", kiwi["fact_id"][:12], "--yes", "--json")
    assert done.exit_code == 0, done.output
    receipt = json.loads(done.stdout)
    assert receipt["target"] == "facts" and receipt["removed"]["vectors"]["facts"] >= 1

    table = run(store, "forget", "-s", "s1", answer="y\n")
    assert table.exit_code == 0, table.output
    assert "forgotten (session" in table.stdout and "on disk: redis AOF rewritten" in \
        table.stdout
    status = json.loads(run(store, "status", "--json").stdout)
    assert status["forgets"]["last"][0]["target"] == "session"
    assert not status["forgets"]["pending"]
    unknown = run(store, "forget", "-s", "s1", "--yes")
    assert unknown.exit_code == 1 and "unknown session" in unknown.output
