"""Results: `bench/results/latest/<name>.json` (+ .md), the run it replaces moved to
`bench/results/archive/<YYYY-MM-DD>/` (the date the replaced run was generated).

A `--quick` run is a smoke test, not a number to quote: it goes to `bench/results/quick/`
(not committed), overwriting the last one."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness.paths import ARCHIVE, LATEST, QUICK

# Where a file's own date is not known (today's 99 carried-over results had none).
UNDATED = "2026-12-05-and-before"


def run_date(json_path: Path) -> str:
    """The YYYY-MM-DD a result was generated: its `generated_at` / `started`, else the file's
    modification time."""
    try:
        data = json.loads(json_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = None
    if isinstance(data, dict):
        for key in ("generated_at", "started"):
            value = data.get(key)
            if isinstance(value, str) and len(value) >= 10 and value[4] == "-":
                return value[:10]
    try:
        return datetime.fromtimestamp(json_path.stat().st_mtime, UTC).strftime("%Y-%m-%d")
    except OSError:
        return UNDATED


def archive_latest(name: str, *, latest: Path = LATEST, archive: Path = ARCHIVE) -> list[Path]:
    """Move latest/<name>.* to archive/<its date>/ (a name already there gets a -N suffix)."""
    siblings = sorted(p for p in latest.glob(f"{name}.*") if p.is_file())
    if not siblings:
        return []
    json_path = latest / f"{name}.json"
    folder = archive / (run_date(json_path) if json_path.exists() else UNDATED)
    folder.mkdir(parents=True, exist_ok=True)
    moved = []
    for path in siblings:
        target = folder / path.name
        n = 1
        while target.exists():
            target = folder / f"{path.stem}-{n}{path.suffix}"
            n += 1
        shutil.move(str(path), target)
        moved.append(target)
    return moved


def results_dir(quick: bool) -> Path:
    """Where a run's files go: latest/, or quick/ for a --quick run."""
    return QUICK if quick else LATEST


def write_result(name: str, result: dict[str, Any], markdown: str | None = None, *,
                 quick: bool = False, latest: Path = LATEST, archive: Path = ARCHIVE) -> Path:
    """Save a goal's run as latest/<name>.json (+ .md), archiving the run it replaces
    (`quick`: quick/<name>.json, nothing archived).

    `generated_at` is stamped when the result has none, so the archive can date it later."""
    result.setdefault("generated_at", datetime.now(UTC).isoformat(timespec="seconds"))
    if quick:
        latest = QUICK
    else:
        archive_latest(name, latest=latest, archive=archive)
    latest.mkdir(parents=True, exist_ok=True)
    path = latest / f"{name}.json"
    path.write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")
    if markdown is not None:
        (latest / f"{name}.md").write_text(markdown, encoding="utf-8")
    return path
