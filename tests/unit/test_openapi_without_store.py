"""The OpenAPI document is built without a store, and fakeredis is a test dependency only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from hivemem.errors import ConfigurationError
from hivemem.store.redis import unconnected

pytest.importorskip("fastapi")

REPO = Path(__file__).resolve().parents[2]

_BUILD = """
import json, sys
from hivemem.api.spec import openapi
spec = openapi()
print(json.dumps({"spec": spec, "fakeredis": "fakeredis" in sys.modules}))
"""


def test_the_spec_module_builds_the_checked_in_document_without_fakeredis() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", _BUILD], capture_output=True, text=True,
                         env=env, cwd=REPO, timeout=120, check=True)
    built = json.loads(out.stdout.strip().splitlines()[-1])
    assert built["fakeredis"] is False
    assert built["spec"] == json.loads((REPO / "docs" / "openapi.json").read_text())


def test_the_stand_in_client_refuses_every_command() -> None:
    client = unconnected()
    with pytest.raises(ConfigurationError, match="no server"):
        client.ping()
    with pytest.raises(ConfigurationError, match="no server"):
        client.set("k", "v")


def test_fakeredis_is_not_a_runtime_dependency() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if d.startswith("fakeredis")]
    assert [d for d in project["optional-dependencies"]["dev"] if d.startswith("fakeredis")]
    imports = [p.relative_to(REPO).as_posix() for p in (REPO / "hivemem").rglob("*.py")
               if "import fakeredis" in p.read_text(encoding="utf-8")]
    assert imports == ["hivemem/testing.py"]


def test_the_spec_command_answers_help_without_writing_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from hivemem.api import spec

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as done:
        spec.main(["--help"])
    assert done.value.code == 0
    assert "usage: python -m hivemem.api.spec" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []  # before: a file named "--help"
    spec.main([str(tmp_path / "openapi.json")])
    assert json.loads((tmp_path / "openapi.json").read_text())["openapi"].startswith("3.")
