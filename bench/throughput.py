#!/usr/bin/env python
"""Throughput: how fast turns go in, get embedded, and become recallable.

    python bench/throughput.py            # ingest 5k calls; embed 2000 LoCoMo turns; 50 turns/s for 30 s
    python bench/throughput.py --quick    # 200 calls; 40 turns; 10 turns/s for 3 s
    python bench/throughput.py --only freshness --rate 100 --seconds 60

Sections (bench/suites/pipeline.py; saved to bench/results/latest/throughput.json):
- ingest: `ingest` p50/p99 next to bare XADD and PING on the same redis-server;
  `ingest_many` turns/s.
- embed: the embedded deployment's embed workers (real model) vs raw fastembed on the same
  texts: turns/s and their ratio (`--embed-workers 1,default`: one row per embed thread
  count; one ONNX thread each).
- freshness: ingest -> processed latency at a steady rate.
The stream-worker micro-benchmarks (a handler alone, the Lua script alone, a step breakdown)
need internals: bench/probes/pipeline_stages.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import PausedBackground, machine_facts, offline_model_env, write_result
from harness.cli import goal_parser, run_sections
from suites import pipeline

RESULT: dict[str, Any] = {"benchmark": "throughput"}


def ingest(args: argparse.Namespace) -> dict[str, Any]:
    RESULT["ingest"] = pipeline.bench_ingest(200 if args.quick else args.calls,
                                             1000 if args.quick else args.calls * 2)
    return RESULT["ingest"]


def embed(args: argparse.Namespace) -> dict[str, Any]:
    runs = {}
    for w in args.embed_workers.split(","):
        workers = None if w == "default" else int(w)
        with PausedBackground(args.pause_niced) as paused:
            runs[w] = pipeline.bench_embed(40 if args.quick else args.embed_turns, workers,
                                           raw=not args.skip_raw)
        runs[w]["paused_niced_processes"] = paused.paused
    # The first count's run under the old keys; every count's under "by_workers".
    RESULT["embed"] = {**next(iter(runs.values())), "by_workers": runs}
    return RESULT["embed"]


def freshness(args: argparse.Namespace) -> dict[str, Any]:
    with PausedBackground(args.pause_niced) as paused:
        RESULT["freshness"] = pipeline.bench_freshness(10.0 if args.quick else args.rate,
                                                       3.0 if args.quick else args.seconds)
    RESULT["freshness"]["paused_niced_processes"] = paused.paused
    return RESULT["freshness"]


def summary(name: str, r: dict[str, Any]) -> str:
    if name == "ingest":
        return (f"ingest p50 {r['ingest_ms']['p50']:.2f} ms p99 {r['ingest_ms']['p99']:.2f} ms"
                f" (bare XADD p50 {r['bare_xadd_ms']['p50']:.2f}); ingest_many"
                f" {r['ingest_many']['turns_per_s']:,.0f} turns/s")
    if name == "embed":
        return "; ".join(
            f"{w} embed worker(s): {x['pipeline_turns_per_s']:.0f} turns/s"
            + ("" if x["ratio"] is None else f" vs {x['raw_fastembed_turns_per_s']:.0f} raw"
               f" fastembed (ratio {x['ratio']:.2f})")
            for w, x in r["by_workers"].items())
    return (f"{r['turns']} turns at {r['rate_per_s']:.0f}/s: fresh p50 {r['fresh_ms']['p50']:.0f}"
            f" ms p95 {r['fresh_ms']['p95']:.0f} ms ({r['unseen']} unseen)")


def main() -> int:
    ap = goal_parser(__doc__, ["ingest", "embed", "freshness"])
    ap.add_argument("--calls", type=int, default=5000, help="single ingest calls")
    ap.add_argument("--embed-turns", type=int, default=2000)
    ap.add_argument("--embed-workers", default="default",
                    help="embed: comma-separated embed thread counts, e.g. 1,default")
    ap.add_argument("--skip-raw", action="store_true",
                    help="embed: no raw fastembed run (an A/B of two trees: the same on both)")
    ap.add_argument("--rate", type=float, default=50.0, help="freshness: turns per second")
    ap.add_argument("--seconds", type=float, default=30.0, help="freshness: how long")
    ap.add_argument("--pause-niced", action="store_true",
                    help="embed, freshness: stop other work's niced processes while each runs"
                         " (a shared machine; the count is recorded)")
    args = ap.parse_args()
    offline_model_env()
    code = run_sections(args, {"ingest": ingest, "embed": embed, "freshness": freshness},
                        summary)
    RESULT["machine"] = machine_facts()
    print(f"saved {write_result('throughput', RESULT, quick=args.quick)}")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
