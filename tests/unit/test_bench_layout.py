"""bench/ is a harness: goal scripts and their shared code use only hivemem's public API.

Internals move (the service layer is being refactored while this runs); a benchmark that
reached into them would break silently. Probes (bench/probes/) may use internals and say so.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import hivemem

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
GOALS = ("quality", "latency", "throughput", "scale", "faults")
# The public modules: top-level names of `hivemem`, and these modules (and below).
PUBLIC_MODULES = ("hivemem.evaluation", "hivemem.testing", "hivemem.config")
# Bench-local packages a goal may import; never bench/probes (internals) nor the old helpers.
LOCAL_ALLOWED = ("harness", "suites", "adapters")
LOCAL_FORBIDDEN = ("probes", "common", "locomo_ref", "eval_gleanr", "locomo_mneno")


def public_side() -> list[Path]:
    files = [BENCH / f"{goal}.py" for goal in GOALS]
    files += sorted((BENCH / "harness").rglob("*.py")) + sorted((BENCH / "suites").rglob("*.py"))
    return files


def is_public(module: str, names: list[str]) -> bool:
    if module == "hivemem":
        return all(name in hivemem.__all__ or name == "__version__" for name in names)
    return any(module == m or module.startswith(m + ".") for m in PUBLIC_MODULES)


def violations(path: Path) -> list[str]:
    label = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            modules = [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [(node.module, [alias.name for alias in node.names])]
        else:
            continue
        for module, names in modules:
            root = module.split(".")[0]
            if root == "hivemem" and not (
                    is_public(module, names) if names else module in ("hivemem", *PUBLIC_MODULES)):
                found.append(f"{label}:{node.lineno}: {module} {names or ''}")
            if root in LOCAL_FORBIDDEN:
                found.append(f"{label}:{node.lineno}: bench-local {module}")
    return found


def test_goal_scripts_exist_and_the_public_side_is_scanned() -> None:
    files = public_side()
    assert all(f.exists() for f in files), [str(f) for f in files if not f.exists()]
    assert len(files) > len(GOALS) + 5  # the harness and suites modules are scanned too


def test_goals_harness_and_suites_import_only_the_public_api() -> None:
    found = [v for path in public_side() for v in violations(path)]
    assert not found, "internals imported outside bench/probes/:\n" + "\n".join(found)


def test_the_scan_catches_an_internal_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from hivemem.store.state import SessionState\nimport hivemem.workers.embed\n"
                   "from hivemem import Settings, _private\nfrom hivemem.config import Settings\n"
                   "from probes import scale_fill\n")
    assert len(violations(bad)) == 4


@pytest.mark.parametrize("goal", GOALS)
def test_every_goal_script_has_quick(goal: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, str(BENCH / f"{goal}.py"), "--help"], env=env,
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert "--quick" in out.stdout


def test_probes_say_they_may_break() -> None:
    readme = (BENCH / "probes" / "README.md").read_text(encoding="utf-8")
    assert "diagnostic" in readme
    assert "internals" in readme


def test_results_replace_latest_and_archive_the_previous_run(tmp_path: Path) -> None:
    sys.path.insert(0, str(BENCH))
    try:
        from harness.results import write_result
    finally:
        sys.path.remove(str(BENCH))
    latest, archive = tmp_path / "latest", tmp_path / "archive"
    latest.mkdir()
    (latest / "latency.json").write_text(json.dumps({"generated_at": "2026-11-30T10:00:00+00:00",
                                                     "p50": 1}))
    (latest / "latency.md").write_text("old")
    (latest / "latency-other.json").write_text("{}")  # another benchmark: left alone
    write_result("latency", {"p50": 2}, "new", latest=latest, archive=archive)
    assert json.loads((latest / "latency.json").read_text())["p50"] == 2
    assert (latest / "latency.md").read_text() == "new"
    assert json.loads((archive / "2026-11-30" / "latency.json").read_text())["p50"] == 1
    assert (archive / "2026-11-30" / "latency.md").read_text() == "old"
    assert (latest / "latency-other.json").exists()
    # A second replacement on the same date keeps both archived runs, and a run without
    # markdown leaves no stale .md in latest/.
    (latest / "latency.json").write_text(json.dumps({"generated_at": "2026-11-30T11:00:00+00:00",
                                                     "p50": 3}))
    write_result("latency", {"p50": 4}, latest=latest, archive=archive)
    assert sorted(p.name for p in (archive / "2026-11-30").iterdir()) == [
        "latency-1.json", "latency-1.md", "latency.json", "latency.md"]
    assert not (latest / "latency.md").exists()
