#!/usr/bin/env python
"""Latency: how long one recall takes, by memory size and on real conversations.

    python bench/latency.py            # sizes 10k and 100k turns in one session; LoCoMo (5 conv.)
    python bench/latency.py --quick    # 300 turns; the first 80 turns of one LoCoMo conversation
    python bench/latency.py --only sizes --c-turns 20000
    python bench/latency.py --only load --load-turns 100000 --catchup-s 120

Sections (saved to bench/results/latest/latency.json; --quick: results/quick/):
- sizes: `recall(limit=20)` p50/p95 with N turns in one session, filled through the public
  pipeline with the hashing embedder (bench/suites/recall_sizes.py): rows c (--c-turns) and
  a (--a-turns), the rows c and a of bench/probes/recall_scale.py, once reflection is idle
  (--sizes-settle-s), with the session's facts and episodes. The bare engine search and
  recall excl./incl. the query model's embedding on the same fills: bench/probes/
  recall_pipeline.py (internals).
- load: recall while the pipeline catches up (reflection working through the episodes, by
  the embedded default in a process of its own) against recall once it is idle, filled through the pipeline
  (bench/suites/recall_load.py): rows `turns` (--load-turns in one session) and `facts`
  (--load-facts turns that are nearly all new facts); episodes and facts next to each window.
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
from suites import locomo, recall_load, recall_sizes

RESULT: dict[str, Any] = {"benchmark": "latency"}


def sizes(args: argparse.Namespace) -> dict[str, Any]:
    rows = [("c", args.c_turns)] if args.quick else [("c", args.c_turns), ("a", args.a_turns)]
    out = {"setup": recall_sizes.describe(), "rows": [
        recall_sizes.run_row(row, sessions=1, per_session=300 if args.quick else n,
                             queries=20 if args.quick else args.queries,
                             settle_s=args.sizes_settle_s)
        for row, n in rows if n]}
    RESULT["sizes"] = out
    return out


def load(args: argparse.Namespace) -> dict[str, Any]:
    quick = args.quick
    shapes = [("turns", 3000 if quick else args.load_turns, 0.25, False),
              ("facts", 1500 if quick else args.load_facts, 0.95, True)]
    out = {"setup": recall_load.describe(), "rows": [
        recall_load.run_row(name, turns=n, fact_share=share, distinct=distinct,
                            queries=10 if quick else 20,
                            catchup_s=20 if quick else args.catchup_s,
                            settle_s=120 if quick else args.settle_s,
                            pause_niced=args.pause_niced)
        for name, n, share, distinct in shapes if n]}
    RESULT["load"] = out
    return out


def locomo_latency(args: argparse.Namespace) -> dict[str, Any]:
    only = [locomo.locomo_conversations()[0]["name"]] if args.quick else None
    convs, notes = locomo.load_dataset(only, locomo.QUICK_TURNS if args.quick else None)
    scores = locomo.Scores()
    info = locomo.run_hivemem(convs, scores, print, variants=False,
                              pause_niced=args.pause_niced)
    hivemem = locomo.aggregate(scores, convs)["hivemem"]
    out = {"conversations": [c["name"] for c in convs], "turns": notes["turns"],
           "questions": notes["questions_scored"], "recall_ms": hivemem["latency_ms"],
           "budget_call_ms": hivemem["budget_call_latency_ms"], "ingest": info.get("ingest"),
           "recall_overall": hivemem["overall"],
           "paused_niced_processes": info.get("paused_niced_processes", 0)}
    RESULT["locomo"] = out
    return out


def _split(r: dict[str, Any]) -> str:
    if "bare_search_ms" not in r:
        return ""
    return (f" (bare p95 {r['bare_search_ms']['p95']:.2f}, excl. embedding p95"
            f" {r['recall_excl_embedding_ms']['p95']:.2f}, incl. p95"
            f" {r['recall_incl_embedding_ms']['p95']:.2f} ms)")


def summary(name: str, result: dict[str, Any]) -> str:
    if name == "sizes":
        return "; ".join(f"row {r['row']} {r['sessions'] * r['turns_per_session']:,} turns:"
                         f" p50 {r['recall_ms']['p50']:.1f} ms p95 {r['recall_ms']['p95']:.1f} ms"
                         + _split(r) for r in result["rows"])
    if name == "load":
        return "; ".join(
            f"{r['row']} {r['turns']:,} turns: catch-up p95"
            f" {(r['catchup']['recall_ms'] or {}).get('p95', float('nan')):.1f} ms, idle p95"
            f" {r['idle']['recall_ms']['p95']:.1f} ms ({r['idle']['facts_active']:,} facts,"
            f" {r['idle']['episodes']:,} episodes)" for r in result["rows"])
    lat = result["recall_ms"]
    return (f"{result['turns']} turns, {lat['n']} questions: p50 {lat['p50']:.1f} ms"
            f" p95 {lat['p95']:.1f} ms")


def main() -> int:
    ap = goal_parser(__doc__, ["sizes", "load", "locomo"])
    ap.add_argument("--c-turns", type=int, default=10_000)
    ap.add_argument("--a-turns", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--sizes-settle-s", type=float, default=1800.0,
                    help="sizes: wait (at most this long) for reflection to catch up before"
                         " timing (0: time right after every turn is recallable)")
    ap.add_argument("--load-turns", type=int, default=100_000,
                    help="load row `turns`: turns in its one session (0: skip)")
    ap.add_argument("--load-facts", type=int, default=12_000,
                    help="load row `facts`: turns, nearly every one a new fact (0: skip)")
    ap.add_argument("--catchup-s", type=float, default=120.0,
                    help="load: seconds of recalls while reflection catches up")
    ap.add_argument("--settle-s", type=float, default=3600.0,
                    help="load: how long to wait for reflection before the idle recalls")
    ap.add_argument("--pause-niced", action="store_true",
                    help="locomo, load: stop other work's niced processes while recalls are"
                         " timed (a shared machine; the count is recorded)")
    args = ap.parse_args()
    offline_model_env()
    code = run_sections(args, {"sizes": sizes, "load": load, "locomo": locomo_latency},
                        summary)
    RESULT["machine"] = machine_facts()
    path = write_result("latency", RESULT, quick=args.quick)
    print(f"saved {path}")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
