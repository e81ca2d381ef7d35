#!/usr/bin/env python
"""Latency: how long one recall takes, by memory size and on real conversations.

    python bench/latency.py            # sizes 10k and 100k turns in one session; LoCoMo (5 conv.)
    python bench/latency.py --quick    # 300 turns; the first 80 turns of one LoCoMo conversation
    python bench/latency.py --only sizes --c-turns 20000

Sections (saved to bench/results/latest/latency.json; --quick: results/quick/):
- sizes: `recall(limit=20)` p50/p95 with N turns in one session, filled through the public
  pipeline with the hashing embedder (bench/suites/recall_sizes.py): rows c (--c-turns) and
  a (--a-turns), the rows c and a of bench/probes/recall_scale.py.
- locomo: `recall(limit=20)` p50/p95 on LoCoMo with the real model (all-MiniLM-L6-v2; the
  query's embedding included), after the pipeline has processed every turn.
Component timings (the bare engine search, a recall's steps) are probes: bench/probes/.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import machine_facts, offline_model_env, write_result
from harness.cli import goal_parser, run_sections
from suites import locomo, recall_sizes

RESULT: dict[str, Any] = {"benchmark": "latency"}


def sizes(args: argparse.Namespace) -> dict[str, Any]:
    rows = [("c", args.c_turns)] if args.quick else [("c", args.c_turns), ("a", args.a_turns)]
    out = {"setup": recall_sizes.describe(), "rows": [
        recall_sizes.run_row(row, sessions=1, per_session=300 if args.quick else n,
                             queries=20 if args.quick else args.queries)
        for row, n in rows]}
    RESULT["sizes"] = out
    return out


def locomo_latency(args: argparse.Namespace) -> dict[str, Any]:
    only = [locomo.locomo_conversations()[0]["name"]] if args.quick else None
    convs, notes = locomo.load_dataset(only, locomo.QUICK_TURNS if args.quick else None)
    scores = locomo.Scores()
    info = locomo.run_hivemem(convs, scores, print, variants=False)
    hivemem = locomo.aggregate(scores, convs)["hivemem"]
    out = {"conversations": [c["name"] for c in convs], "turns": notes["turns"],
           "questions": notes["questions_scored"], "recall_ms": hivemem["latency_ms"],
           "budget_call_ms": hivemem["budget_call_latency_ms"], "ingest": info.get("ingest")}
    RESULT["locomo"] = out
    return out


def summary(name: str, result: dict[str, Any]) -> str:
    if name == "sizes":
        return "; ".join(f"row {r['row']} {r['sessions'] * r['turns_per_session']:,} turns:"
                         f" p50 {r['recall_ms']['p50']:.1f} ms p95 {r['recall_ms']['p95']:.1f} ms"
                         for r in result["rows"])
    lat = result["recall_ms"]
    return (f"{result['turns']} turns, {lat['n']} questions: p50 {lat['p50']:.1f} ms"
            f" p95 {lat['p95']:.1f} ms")


def main() -> int:
    ap = goal_parser(__doc__, ["sizes", "locomo"])
    ap.add_argument("--c-turns", type=int, default=10_000)
    ap.add_argument("--a-turns", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=100)
    args = ap.parse_args()
    offline_model_env()
    code = run_sections(args, {"sizes": sizes, "locomo": locomo_latency}, summary)
    RESULT["machine"] = machine_facts()
    path = write_result("latency", RESULT, quick=args.quick)
    print(f"saved {path}")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
