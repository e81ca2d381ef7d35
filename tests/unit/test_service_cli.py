"""The service's CLI surface: ingest/recall with scopes, `serve --workers` needs a deployment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from hivemem.cli.main import cli


@pytest.fixture
def local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    for name in ("HIVEMEM_REDIS__URL", "HIVEMEM_QDRANT__URL", "HIVEMEM_QDRANT__PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HIVEMEM_EMBEDDING__PROVIDER", "hashing")
    return ["--local", str(tmp_path / "mem")]


def test_ingest_and_recall_with_namespace_and_agent(local: list[str]) -> None:
    runner = CliRunner()
    for args in (["Ship on Friday", "-s", "s", "--namespace", "team-a", "--agent", "pm"],
                 ["PM secret: it slips", "-s", "s", "--namespace", "team-a", "--agent", "pm",
                  "--private"]):
        result = runner.invoke(cli, [*local, "ingest", *args])
        assert result.exit_code == 0, result.output

    def recall(*extra: str) -> list[str]:
        result = runner.invoke(cli, [*local, "recall", "ship", "-s", "s", "--json", *extra])
        assert result.exit_code == 0, result.output
        return [i["content"] for i in json.loads(result.stdout)["items"]]

    assert recall("--namespace", "team-a") == ["Ship on Friday"]
    assert sorted(recall("--namespace", "team-a", "--agent", "pm")) == [
        "PM secret: it slips", "Ship on Friday"]
    other = runner.invoke(cli, [*local, "recall", "ship", "-s", "s"])  # the default namespace
    assert other.exit_code == 1 and "no such session" in other.output


def test_serve_workers_needs_a_deployment(local: list[str]) -> None:
    result = CliRunner().invoke(cli, [*local, "serve", "--workers", "2"])
    assert result.exit_code == 2 and "deployment" in result.output
