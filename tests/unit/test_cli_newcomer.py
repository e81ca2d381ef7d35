"""What a newcomer ran into on the CLI (issue 33), each through the real command: an unknown
session, fact ids to audit, one way to give the session, `ingest -`, `--version`, emoji codes
in user text, read-only commands on a folder with no store, the workspace's embedder in
`demo` and `eval`, the demo's temporary folder, `serve` saying where it listens, and the
remote client's retries."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner, Result
from support.cli_env import isolate

import hivemem
from hivemem.cli.main import cli

ENV = {
    "HIVEMEM_EMBEDDING__PROVIDER": "hashing",
    "HIVEMEM_EMBEDDING__DIM": "256",
    "HIVEMEM_WORKER__BLOCK_MS": "50",
    "HIVEMEM_EPISODES__MAX_TURNS": "2",
}
EMOJI = "\u274c"  # what rich makes of ":x:"


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    isolate(monkeypatch, tmp_path, ENV)
    yield tmp_path


def run(*args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)


def ok(*args: str, input: str | None = None) -> Result:
    result = run(*args, input=input)
    assert result.exit_code == 0, (args, result.output)
    return result


@pytest.fixture
def store(env: Path) -> Path:
    """An embedded store with one session, s1, whose two decisions were reflected."""
    folder = env / "store"
    for text in ("We decided to use PostgreSQL for the database",
                 "We decided the API returns at most 100 orders per page"):
        ok("--local", str(folder), "ingest", text, "-s", "s1", "--kind", "decision")
    return folder


# Every command that reads a session, given one this store has never seen.
UNKNOWN_SESSION = [
    ("recent", "-s", "nope"),
    ("recall", "anything", "-s", "nope"),
    ("search", "anything", "-s", "nope"),
    ("facts", "-s", "nope"),
    ("episodes", "-s", "nope"),
    ("stats", "-s", "nope"),
    ("timeline", "-s", "s1", "-s", "nope"),
    ("compact", "-s", "nope", "--preview"),
    ("session", "-s", "nope"),
    ("status", "-s", "nope"),
    ("traces", "-s", "nope"),
    ("reflect", "-s", "nope"),
    ("close-episode", "-s", "nope"),
    ("export", "-s", "nope", "-o", "out.jsonl"),
    ("recall", "anything", "-s", "s1", "--related", "nope"),
]


def test_an_unknown_session_is_not_found_with_exit_1(store: Path) -> None:
    for args in UNKNOWN_SESSION:
        result = run("--local", str(store), *args)
        assert result.exit_code == 1, (args, result.output)
        assert re.search(r"no (such )?session|unknown session", result.output), (args,
                                                                                 result.output)
    assert not (store.parent / "out.jsonl").exists()
    known = ok("--local", str(store), "recent", "-s", "s1", "--json")
    assert json.loads(known.stdout)["session_id"] == "s1"


def test_facts_recent_and_recall_print_the_id_audit_takes(store: Path) -> None:
    local = ("--local", str(store))
    facts = json.loads(ok(*local, "facts", "-s", "s1", "--json").stdout)
    assert facts, "the two decisions were reflected into facts"
    ids = {f["fact_id"][:12] for f in facts}
    for command in (("facts", "-s", "s1"), ("recent", "-s", "s1"),
                    ("timeline", "-s", "s1", "--kind", "fact")):
        printed = set(re.findall(r"\b[0-9a-f]{12}\b", ok(*local, *command).stdout))
        assert ids <= printed, (command, ids, printed)
    recalled = ok(*local, "recall", "which database", "-s", "s1", "--budget", "2000").stdout
    shown = re.findall(r"fact ([0-9a-f]{12})", recalled)
    assert shown and set(shown) <= ids
    audit = ok(*local, "audit", shown[0], "--json")
    assert json.loads(audit.stdout)["fact"]["fact_id"][:12] == shown[0]


def _session_params(command: Any, name: str = "hivemem") -> Iterator[tuple[str, Any]]:
    for sub in getattr(command, "commands", {}).values():
        yield from _session_params(sub, f"{name} {sub.name}")
    for param in command.params:
        if param.name in ("session", "sessions"):
            yield name, param


def test_every_command_takes_the_session_as_session_or_s(env: Path) -> None:
    found = dict(_session_params(cli))
    assert {"hivemem ingest", "hivemem recall", "hivemem facts", "hivemem timeline",
            "hivemem export", "hivemem chat", "hivemem status"} <= set(found)
    for name, param in found.items():
        assert param.param_type_name == "option", name
        assert sorted(param.opts) == ["--session", "-s"], (name, param.opts)
        assert param.multiple == (param.name == "sessions"), name
    usage = {name: run(*name.split()[1:], "--help").stdout for name in found}
    assert not any("SESSION_ID" in text or "[SESSION]" in text for text in usage.values())


def test_ingest_dash_reads_standard_input(env: Path) -> None:
    ok("init")
    added = ok("ingest", "-", "-s", "notes", "--json", input="read from stdin\n")
    assert json.loads(added.stdout)["seq"] == 1
    turns = json.loads(ok("recent", "-s", "notes", "--json").stdout)["turns"]
    assert [t["content"] for t in turns] == ["read from stdin"]
    empty = run("ingest", "-", "-s", "notes", input="  \n")
    assert empty.exit_code == 2 and "must not be empty" in empty.output


def test_version() -> None:
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"hivemem {hivemem.__version__}"


def test_emoji_codes_and_markup_in_user_text_print_as_typed(env: Path) -> None:
    ok("init")
    ok("ingest", "Deploy :x: the [bold]api[/bold] on fridays", "-s", "ops:x:")
    outputs = [
        ok("recall", "deploy :x: [red]now", "-s", "ops:x:").stdout,
        ok("recent", "-s", "ops:x:").stdout,
        ok("stats", "-s", "ops:x:").stdout,
        ok("episodes", "-s", "ops:x:").stdout,
        ok("timeline", "-s", "ops:x:").stdout,
        ok("status").stdout,
        run("facts", "-s", "nope:x:").output,
    ]
    for output in outputs:
        assert EMOJI not in output
        assert ":x:" in output
    assert "deploy :x: [red]now" in outputs[0]
    assert "[bold]api[/bold]" in outputs[1]


READ_ONLY = [
    ("status",), ("recent",), ("recall", "anything"), ("facts",), ("stats",),
    ("timeline",), ("episodes",), ("traces",), ("audit", "abcdef012345"),
    ("session",), ("export", "-o", "x.jsonl"), ("backup",), ("dlq", "list"),
    ("apikey", "list"), ("compact", "--preview"),
]


def test_read_only_commands_on_a_folder_with_no_store_create_nothing(env: Path) -> None:
    missing = env / "no" / "such" / "folder"
    empty = env / "empty"
    empty.mkdir()
    for folder in (missing, empty):
        for args in READ_ONLY:
            result = run("--local", str(folder), *args)
            assert result.exit_code == 1, (args, result.output)
            assert f"no hivemem store in {folder}" in " ".join(result.output.split()), args
        assert not missing.exists() and not list(empty.iterdir())
    assert not (env / "no").exists()
    ok("--local", str(missing), "ingest", "writing creates the store")
    assert json.loads(ok("--local", str(missing), "status", "--json").stdout)["sessions"]


@pytest.fixture
def workspace_with_hashing(env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A workspace made with the hashing embedder, and an environment whose own embedder
    cannot load (an unknown model, offline): a command that ignored the workspace's
    embedding settings would fail."""
    monkeypatch.setenv("HIVEMEM_EMBEDDING__DIM", "64")
    ok("init")
    monkeypatch.setenv("HIVEMEM_EMBEDDING__PROVIDER", "fastembed")
    monkeypatch.setenv("HIVEMEM_EMBEDDING__MODEL", "nobody/no-such-model")
    monkeypatch.setenv("HIVEMEM_EMBEDDING__OFFLINE", "true")
    # Short: the store's Unix sockets live under it (at most 107 bytes of path).
    scratch = Path(tempfile.mkdtemp(prefix="hmt-"))
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    yield scratch
    shutil.rmtree(scratch, ignore_errors=True)


def test_demo_uses_the_workspace_embedder_and_cleans_up(workspace_with_hashing: Path) -> None:
    scratch = workspace_with_hashing
    shown = ok("demo")
    assert "Which database are we using?" in shown.stdout
    assert not list(scratch.glob("hivemem-demo-*"))  # its temporary folder is gone
    kept = ok("demo", "--keep")
    folders = list(scratch.glob("hivemem-demo-*"))
    assert len(folders) == 1 and f"memory stays in {folders[0]}" in kept.stderr
    assert (folders[0] / "qdrant").is_dir()  # the demo's store, kept


def test_eval_uses_the_workspace_embedder(workspace_with_hashing: Path) -> None:
    result = ok("eval", "--quick", "--scenario", "decision_tracking", "--json")
    assert json.loads(result.stdout)["summaries"][0]["overall"]["probes"] >= 1
    assert not list(workspace_with_hashing.glob("hivemem-eval-*"))


def test_serve_prints_where_it_listens(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIVEMEM_")}
    env.update(ENV)
    process = subprocess.Popen(
        [sys.executable, "-m", "hivemem", "--local", str(tmp_path / "m"), "serve", "--port",
         "0"], env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        assert process.stderr is not None
        deadline = time.monotonic() + 120
        lines: list[str] = []
        found = None
        while found is None and time.monotonic() < deadline:
            line = process.stderr.readline()
            if not line:
                break
            lines.append(line)
            found = re.search(r"listening on (http://127\.0\.0\.1:(\d+)) \(API docs: (\S+)\)",
                              line)
        assert found is not None, lines
        url, port, docs = found.group(1), int(found.group(2)), found.group(3)
        assert port > 0 and docs == f"{url}/docs"
        assert httpx.get(docs, timeout=10).status_code == 200
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0


def test_the_remote_client_says_one_thing_when_it_gives_up() -> None:
    code = ("import hivemem\n"
            "from hivemem.producer.remote_http import RetryPolicy\n"
            "hivemem.connect('http://127.0.0.1:1', api_key='hm_x',"
            " retry=RetryPolicy(attempts=4, backoff_s=0.01))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 1
    assert done.stdout == ""
    assert "remote.retry" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("hivemem.errors.StoreUnavailable: api unavailable: "
                           "http://127.0.0.1:1")
