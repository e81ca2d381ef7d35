#!/usr/bin/env python
"""A goal script against a baseline source tree, interleaved in one run: the ratio, not a guess.

    git worktree add --detach /tmp/base c9fb972          # the baseline's source tree
    python bench/ab.py --baseline /tmp/base --rounds 2 -- throughput.py --only ingest
    python bench/ab.py --baseline /tmp/base -- quality.py --only locomo --skip-reference

The goal scripts use only hivemem's public API (tests/unit/test_bench_layout.py), so the same
script runs against either tree: PYTHONPATH picks which `hivemem` it imports. Rounds alternate
baseline, this tree, baseline, ... so both see the same machine load. Each run writes to a
folder of its own (HIVEMEM_BENCH_RESULTS); the JSON documents of every round are collected in
bench/results/latest/ab-<script>.json with the commit of each side.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness.paths import LATEST, REPO  # noqa: E402


def commit_of(tree: Path) -> str:
    done = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=False)
    return done.stdout.strip() or "unknown"


def run_once(tree: Path, script: list[str], out: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree), "HIVEMEM_BENCH_RESULTS": str(out)}
    started = time.perf_counter()
    # Run from the tree measured: the embedded mode starts its reflection process with
    # `python -m`, which puts the working directory first on sys.path, so from another
    # checkout the baseline's reflection would run that checkout's code.
    done = subprocess.run([sys.executable, str(HERE / script[0]), *script[1:]], env=env,
                          cwd=tree, check=False)
    docs = {p.stem: json.loads(p.read_text()) for p in sorted((out / "latest").glob("*.json"))}
    if done.returncode != 0 and not docs:
        raise SystemExit(f"{script[0]} on {tree} failed (exit {done.returncode}), no results")
    # A crash after the results were saved (e.g. at interpreter exit) keeps them, noted.
    return {"wall_s": round(time.perf_counter() - started, 1), "exit": done.returncode,
            "results": docs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, required=True,
                        help="a source tree of the baseline (a git worktree of an older commit)")
    parser.add_argument("--rounds", type=int, default=1, help="baseline/this pairs to run")
    parser.add_argument("script", nargs=argparse.REMAINDER,
                        help="-- GOAL.py [its options]: a goal script of bench/")
    args = parser.parse_args()
    script = [s for s in args.script if s != "--"]
    if not script or not (HERE / script[0]).is_file():
        parser.error("give a goal script after --, e.g. -- throughput.py --only ingest")
    if not (args.baseline / "hivemem" / "__init__.py").is_file():
        parser.error(f"--baseline {args.baseline}: no hivemem package there")
    sides = {"baseline": args.baseline.resolve(), "this": REPO}
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="hivemem-ab-") as work:
        for i in range(args.rounds):
            for side, tree in sides.items():
                print(f"== round {i + 1}/{args.rounds}: {side} ({commit_of(tree)})", flush=True)
                out = Path(work) / f"{side}-{i}"
                rounds.append({"round": i + 1, "side": side, **run_once(tree, script, out)})
    result = {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "script": script,
        "commits": {side: commit_of(tree) for side, tree in sides.items()},
        "rounds": rounds,
    }
    LATEST.mkdir(parents=True, exist_ok=True)
    path = LATEST / f"ab-{Path(script[0]).stem}.json"
    path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"saved {path}")


if __name__ == "__main__":
    main()
