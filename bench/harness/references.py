"""The reference systems (gleanr, mneno): their venvs, versions, and running an adapter in them.

Each adapter (bench/adapters/<system>.py) runs inside the system's own venv, which has the
system, fastembed and numpy but not hivemem; the goal scripts hand it a JSON job file and read
a JSON answer back.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from harness.paths import BENCH

ADAPTERS = BENCH / "adapters"
DEFAULT_PYTHON = {"gleanr": "/work/venv-gleanr/bin/python", "mneno": "/work/venv-mneno/bin/python"}

# The reference systems' versions, each in its own venv (see bench/locomo.py's docstring).
REFERENCE_VERSIONS = {"gleanr": "0.5.0", "mneno": "0.4.0"}


def exit_unless_references_run(systems: list[tuple[str, str]]) -> None:
    """Stop before a benchmark starts when a reference venv exists but cannot import its
    package or fastembed (its driver's imports), naming the install command; a missing venv
    is left to the benchmark (skipped, noted). Checked up front, not after minutes of
    hivemem: a venv without fastembed once left a "full" LoCoMo run saved without them."""
    problems = []
    for system, python in systems:
        if not Path(python).exists():
            continue
        check = subprocess.run([python, "-c", f"import {system}, fastembed"],
                               capture_output=True, text=True, check=False)
        if check.returncode != 0:
            missing = (check.stderr.strip().splitlines() or ["?"])[-1]
            problems.append(f"  {system} ({python}): {missing}; install with:"
                            f" {Path(python).parent / 'pip'} install"
                            f" {system}=={REFERENCE_VERSIONS[system]} fastembed==0.9.1")
    if problems:
        sys.exit("reference venvs cannot run their drivers:\n" + "\n".join(problems))


def run_adapter(system: str, task: str, job: dict[str, Any], workdir: Path, *,
                python: str | None = None, timeout: float | None = None) -> dict[str, Any]:
    """Run `bench/adapters/<system>.py <task> JOB OUT` in the system's venv; its answer."""
    job_path, out_path = workdir / f"{system}-{task}-job.json", workdir / f"{system}-{task}-out.json"
    job_path.write_text(json.dumps(job), encoding="utf-8")
    subprocess.run([python or DEFAULT_PYTHON[system], str(ADAPTERS / f"{system}.py"), task,
                    str(job_path), str(out_path)], check=True, timeout=timeout)
    answer: dict[str, Any] = json.loads(out_path.read_text(encoding="utf-8"))
    return answer
