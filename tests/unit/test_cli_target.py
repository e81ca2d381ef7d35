"""Every memory command runs where `hivemem.cli.target` says: inside a workspace they all
read and write the workspace's store (a server URL in the environment, here a dead port,
is never used), and with nothing to run on they exit 1 saying what to do."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from hivemem.cli.main import cli
from hivemem.cli.target import NO_TARGET, NoTarget, resolve_target
from hivemem.config import Settings
from hivemem.runtime.workspace import init_workspace

DEAD_REDIS = "redis://127.0.0.1:1/0"  # nothing listens: a command that used it would fail
DEAD_QDRANT = "http://127.0.0.1:1"
ENV = {
    "HIVEMEM_EMBEDDING__PROVIDER": "hashing",
    "HIVEMEM_EMBEDDING__DIM": "256",
    "HIVEMEM_WORKER__BLOCK_MS": "50",
}


def _clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("HIVEMEM_"):
            monkeypatch.delenv(name)
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def workspace(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    _clean(monkeypatch, tmp_path)
    assert run("init").exit_code == 0
    # Set after init: the environment names a deployment, the workspace must still win.
    monkeypatch.setenv("HIVEMEM_REDIS__URL", DEAD_REDIS)
    monkeypatch.setenv("HIVEMEM_QDRANT__URL", DEAD_QDRANT)
    nested = tmp_path / "src" / "pkg"
    nested.mkdir(parents=True)
    monkeypatch.chdir(nested)  # found by walking up
    yield tmp_path


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def ok(*args: str) -> str:
    result = run(*args)
    assert result.exit_code == 0, (args, result.output)
    return result.stdout


def ok_json(*args: str) -> Any:
    return json.loads(ok(*args))


def test_every_memory_command_uses_the_workspace(workspace: Path) -> None:
    added = ok_json("ingest", "We decided to use PostgreSQL for the database", "--kind",
                    "decision", "--json")
    assert added["mode"] == "workspace" and added["workspace"] == str(workspace.resolve())
    assert added["session_id"] == "default"
    ingested = ok_json("ingest", "The API must never return more than 100 orders per page",
                       "--role", "assistant", "--json")
    assert ingested["seq"] == 2
    closed = ok_json("close-episode", "--json")
    assert closed == {"session_id": "default", "seq": 3}

    stats = ok_json("stats", "--json")
    assert stats["turns_enqueued"] == 2 and stats["turns_processed"] == 2
    assert stats["episodes"] == 1

    episodes = ok_json("episodes", "-s", "default", "--json")
    assert [(e["seq_start"], e["seq_end"]) for e in episodes] == [(1, 2)]

    facts = ok_json("facts", "--session", "default", "--history", "--json")
    assert any("PostgreSQL" in f["content"] for f in facts), facts
    assert "PostgreSQL" in ok("facts")

    traces = [json.loads(line) for line in ok("traces", "--session", "default").splitlines()]
    assert traces and all(t["session_id"] == "default" for t in traces)
    assert ok_json("traces", "-s", "default", "--json") == traces

    recalled = ok_json("recall", "which database do we use", "--json")
    assert any("PostgreSQL" in i["content"] for i in recalled["items"])

    assert ok("dlq", "list") == ""  # "no dead letters" goes to stderr
    assert ok_json("dlq", "list", "--json") == []
    assert ok_json("dlq", "replay") == {"stage": "embed", "replayed": []}

    replayed = ok_json("reflect", "--session", "default", "--json")
    assert replayed["session_id"] == "default" and len(replayed["jobs"]) == 1

    assert ok("rebuild-state").strip() == "rebuilt 1 session(s)"
    assert ok("rebuild-state", "--session", "default").strip() == "rebuilt 1 session(s)"

    recent = ok_json("recent", "--json")
    assert [t["seq"] for t in recent["turns"]] == [2, 1]
    status = ok_json("status", "--json")
    assert status["mode"] == "workspace" and status["redis_url"] is None
    assert status["sessions"]["default"]["turns"] == 2
    assert status["reflect_queue"] == status["pipeline"]["reflect_jobs"]["queued"]


def test_workers_refuse_an_embedded_target(workspace: Path) -> None:
    result = run("worker", "embed", "--burst")
    assert result.exit_code == 2 and "embedded mode runs its own threads" in result.output


MEMORY_COMMANDS = [
    ("ingest", "hello", "-s", "s"),
    ("recall", "anything", "-s", "s"),
    ("stats", "-s", "s"),
    ("facts", "-s", "s"),
    ("episodes", "-s", "s"),
    ("traces",),
    ("close-episode", "-s", "s"),
    ("reflect", "-s", "s"),
    ("rebuild-state",),
    ("dlq", "list"),
    ("dlq", "replay"),
    ("add", "hello"),
    ("recent",),
    ("search", "anything"),
    ("context", "anything"),
    ("status",),
    ("compact", "-s", "s"),
    ("audit", "f1"),
    ("session", "-s", "s"),
    ("timeline", "-s", "s"),
    ("export", "-o", "out.jsonl"),
    ("backup",),
    ("apikey", "list"),
    ("worker", "embed", "--burst"),
    ("serve",),
    ("mcp",),
]


@pytest.mark.parametrize("args", MEMORY_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_no_target_exits_1_and_says_what_to_do(
    args: tuple[str, ...], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _clean(monkeypatch, tmp_path)
    result = run(*args)
    assert result.exit_code == 1, result.output
    assert NO_TARGET in result.output
    assert not list(tmp_path.iterdir())  # nothing was created


def test_precedence_flags_local_workspace_environment(tmp_path: Path) -> None:
    settings = Settings.model_validate({"embedding": {"provider": "hashing", "dim": 64}})
    workspace, _ = init_workspace(tmp_path / "ws", settings)
    inside = tmp_path / "ws" / "deep"
    inside.mkdir()
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = {"HIVEMEM_REDIS__URL": DEAD_REDIS}

    flags = resolve_target(settings, local=tmp_path / "l", redis_url="redis://r:1/0",
                           start=inside, environ=env)
    assert flags.mode == "server" and flags.settings.redis.url == "redis://r:1/0"
    qdrant = resolve_target(settings, qdrant_url="http://q:6333", start=inside, environ=env)
    assert qdrant.mode == "server" and qdrant.settings.qdrant.url == "http://q:6333"

    local = resolve_target(settings, local=tmp_path / "l", start=inside, environ=env)
    assert local.mode == "local" and local.store == tmp_path / "l"

    found = resolve_target(settings, start=inside, environ=env)
    assert found.mode == "workspace" and found.workspace == workspace
    assert found.store == workspace.store_path and found.embedded

    server = resolve_target(settings, start=outside, environ=env)
    assert server.mode == "server" and not server.embedded
    assert server.settings == settings  # the environment's Settings, as they came

    with pytest.raises(NoTarget, match="hivemem init"):
        resolve_target(settings, start=outside, environ={})
