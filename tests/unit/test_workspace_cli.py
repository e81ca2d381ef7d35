"""The workspace CLI: discovery, init, every command's --json, bad input, server mode."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from hivemem.cli.main import cli
from hivemem.config import Settings
from hivemem.runtime.workspace import (
    CONFIG_NAME,
    DIRNAME,
    WorkspaceError,
    find_workspace,
    init_workspace,
)
from hivemem.testing import RedisServer

TEST_ENV = {
    "HIVEMEM_EMBEDDING__PROVIDER": "hashing",
    "HIVEMEM_EMBEDDING__DIM": "1024",
    "HIVEMEM_WORKER__BLOCK_MS": "50",
}


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """No HIVEMEM_* from the outside (a server URL is the target outside a workspace)."""
    for name in list(os.environ):
        if name.startswith("HIVEMEM_"):
            monkeypatch.delenv(name)
    for name, value in TEST_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    yield tmp_path


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def run_json(*args: str) -> Any:
    result = run(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_find_workspace_walks_up_to_the_nearest(tmp_path: Path) -> None:
    settings = Settings.model_validate({"embedding": {"provider": "hashing", "dim": 64}})
    outer, created = init_workspace(tmp_path, settings)
    assert created
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    assert find_workspace(deep) == outer
    inner, _ = init_workspace(tmp_path / "a", settings)
    assert find_workspace(deep) == inner
    assert find_workspace(tmp_path) == outer
    assert inner.config.embedding.dim == 64  # the store's embedder is recorded
    assert find_workspace(tmp_path.parent) is None or find_workspace(tmp_path.parent) != outer


def test_workspace_config_is_versioned(tmp_path: Path) -> None:
    workspace, _ = init_workspace(tmp_path, Settings())
    raw = json.loads((tmp_path / DIRNAME / CONFIG_NAME).read_text())
    assert raw["format"] == "hivemem.workspace" and raw["version"] == 1
    assert workspace.store_path.is_dir()
    raw["version"] = 99
    (tmp_path / DIRNAME / CONFIG_NAME).write_text(json.dumps(raw))
    with pytest.raises(WorkspaceError, match="version 99"):
        find_workspace(tmp_path)


def test_init_twice_keeps_data_and_nested_folders_find_it(clean_env: Path) -> None:
    first = run_json("init")
    assert first["created"] is True
    assert first["config"]["format"] == "hivemem.workspace"
    nested = clean_env / "src" / "deep"
    nested.mkdir(parents=True)
    os.chdir(nested)
    added = run_json("ingest", "We decided to use PostgreSQL for the database", "--kind",
                     "decision", "--tag", "db")
    assert added["workspace"] == str(clean_env.resolve())
    assert added["mode"] == "workspace"
    os.chdir(clean_env)
    again = run_json("init")
    assert again["created"] is False
    recent = run_json("recent")
    assert [t["content"] for t in recent["turns"]] == [
        "We decided to use PostgreSQL for the database"
    ]
    result = run("init")
    assert "Reinitialized existing" in result.stdout


def test_every_command_prints_json(clean_env: Path) -> None:
    run_json("init")
    added = run_json("ingest", "The API must never return more than 100 orders per page",
                     "--kind", "constraint", "--tag", "api", "--tag", "mobile",
                     "--session", "s1")
    assert added["seq"] == 1 and added["session_id"] == "s1"
    assert added["markers"] == ["constraint"]
    assert added["metadata"] == {"source": "cli", "tags": ["api", "mobile"],
                                 "kind": "constraint"}
    pref = run_json("ingest", "I prefer short answers", "--kind", "preference", "-s", "s1")
    assert pref["markers"] == ["custom:preference"]
    run_json("add", "Deploy target is Kubernetes", "--session", "s1")  # the hidden alias

    recent = run_json("recent", "--session", "s1", "--limit", "2")
    assert [t["seq"] for t in recent["turns"]] == [3, 2]
    assert recent["statuses"] == ["active", "conflicted"]
    wide = run_json("recent", "--session", "s1", "--include-inactive", "--include-archived")
    assert wide["statuses"] == ["active", "archived", "conflicted", "superseded"]

    found = run_json("recall", "orders per page", "--session", "s1", "--limit", "2")
    assert found["query"] == "orders per page" and found["session_id"] == "s1"
    top = found["items"][0]
    assert top["rank"] == 1 and "orders per page" in top["content"]
    assert top["reasons"][0].startswith("similarity") and top["score"] > 0
    assert len(found["items"]) <= 2

    ctx = run_json("recall", "orders per page", "--session", "s1", "--budget", "20")
    assert ctx["token_budget"] == 20
    assert 0 < ctx["used_tokens"] <= 20
    assert ctx["included_count"] == len(ctx["items"]) >= 1
    assert "excluded_count" in ctx and "excluded" in ctx

    status = run_json("status")
    assert status["mode"] == "workspace"
    assert status["workspace"] == str(clean_env.resolve())
    assert status["sessions"]["s1"]["turns"] == 3
    assert {s["stage"] for s in status["stages"]} == {"embed", "boundary"}
    assert status["reflect_queue"] == 0

    table = run("recall", "orders per page", "--session", "s1")
    assert table.exit_code == 0 and "similarity" in table.stdout
    listing = run("recall", "orders", "--session", "s1", "--budget", "50")
    assert "/50 tokens" in listing.stdout
    # The old spellings are hidden aliases of the same commands, for one release.
    for old in ("search", "context"):
        aliased = run(old, "orders", "--session", "s1", "--budget", "50")
        assert aliased.exit_code == 0 and "/50 tokens" in aliased.stdout
        assert "deprecated" in aliased.stderr
    assert not {"add", "search", "context"} & set(_listed_commands())


def _listed_commands() -> list[str]:
    """The command names `hivemem --help` lists."""
    help_text = run("--help").stdout.split("Commands:")[1]
    return [line.split()[0] for line in help_text.splitlines() if line.startswith("  ")]


BAD_INPUT = [
    ("ingest", "   "),
    ("ingest", ""),
    ("recall", ""),
    ("recall", " \t"),
    ("search", "  "),
    ("ingest", "fine text", "--session", "bad session id"),
    ("ingest", "fine text", "--tag", " "),
    ("recall", "fine", "-s", "bad session id"),
]


def test_bad_input_is_rejected_before_anything_is_stored(clean_env: Path) -> None:
    run_json("init")
    for args in BAD_INPUT:
        result = run(*args)
        assert result.exit_code == 2, args
        assert "must not be empty" in result.output or "must match" in result.output, args
    assert run_json("status")["sessions"] == {}


def test_no_workspace_says_how_to_make_one(clean_env: Path) -> None:
    result = run("recall", "anything")
    assert result.exit_code == 1
    assert "hivemem init" in result.output


def test_server_mode_from_flags(clean_env: Path, redis_server: RedisServer) -> None:
    url = f"unix://{redis_server.socket}"
    added = run_json("ingest", "Remember the staging host is falcon", "--redis-url", url)
    assert added["mode"] == "server" and added["workspace"] is None
    assert added["seq"] == 1


def test_unreachable_server_is_a_clean_error(clean_env: Path) -> None:
    result = run("ingest", "hello", "--redis-url", "redis://127.0.0.1:1/0")
    assert result.exit_code == 1
    assert "Error" in result.output
