#!/usr/bin/env python
"""Scale: does recall stay fast with many tenants, and the API with many agents?

    python bench/scale.py            # 1000 sessions x 100 turns; 20 agents for 60 s
    python bench/scale.py --quick    # 10 sessions x 30 turns; 4 agents for 5 s
    python bench/scale.py --only api --agents 40 --embedder fastembed

Sections (saved to bench/results/latest/scale.json; --quick: results/quick/):
- sessions: the multi-tenant shape (row b of bench/probes/recall_scale.py): many sessions
  in one store, filled through the public pipeline (hashing embedder), `recall(limit=20)`
  p50/p95 in one of them (bench/suites/recall_sizes.py).
- api: agents as threads against `hivemem --local <tmp> serve` over HTTP, two namespaces:
  requests/s, p50/p95/p99 per operation, errors, and any item recalled across namespaces or
  another agent's private item (bench/suites/api_load.py).
The partitioned pipeline on a 3-master Redis Cluster with N worker processes needs the
wiring's internals today: bench/probes/cluster.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import machine_facts, offline_model_env, write_result
from harness.cli import goal_parser, run_sections
from suites import api_load, recall_sizes

RESULT: dict[str, Any] = {"benchmark": "scale"}


def sessions(args: argparse.Namespace) -> dict[str, Any]:
    RESULT["sessions"] = {"setup": recall_sizes.describe(), "row": recall_sizes.run_row(
        "b", sessions=10 if args.quick else args.sessions,
        per_session=30 if args.quick else args.per_session,
        queries=20 if args.quick else args.queries, settle_s=args.settle_s)}
    return RESULT["sessions"]


def api(args: argparse.Namespace) -> dict[str, Any]:
    RESULT["api"] = api_load.run(4 if args.quick else args.agents,
                                 5.0 if args.quick else args.duration, args.embedder)
    return RESULT["api"]


def summary(name: str, r: dict[str, Any]) -> str:
    if name == "sessions":
        row = r["row"]
        split = "" if "bare_search_ms" not in row else (
            f" (bare p95 {row['bare_search_ms']['p95']:.2f}, excl. embedding p95"
            f" {row['recall_excl_embedding_ms']['p95']:.2f}, incl. p95"
            f" {row['recall_incl_embedding_ms']['p95']:.2f} ms)")
        return (f"{row['sessions']:,} sessions x {row['turns_per_session']:,} turns: recall p50"
                f" {row['recall_ms']['p50']:.1f} ms p95 {row['recall_ms']['p95']:.1f} ms"
                + split)
    lat = r["latency_ms"]
    return (f"{r['agents']} agents: {r['throughput_rps']:.0f} req/s, ingest p95"
            f" {lat['ingest']['p95']:.0f} ms, recall p95 {lat['recall']['p95']:.0f} ms,"
            f" errors {r['errors']}, leaks"
            f" {r['cross_namespace_results'] + r['other_agents_private_results']}")


def main() -> int:
    ap = goal_parser(__doc__, ["sessions", "api"])
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--per-session", type=int, default=100)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--settle-s", type=float, default=1800.0,
                    help="sessions: wait (at most this long) for reflection to catch up"
                         " before timing (0: right after every turn is recallable)")
    ap.add_argument("--agents", type=int, default=20)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--embedder", choices=("hashing", "fastembed"), default="hashing")
    args = ap.parse_args()
    offline_model_env()
    code = run_sections(args, {"sessions": sessions, "api": api}, summary)
    RESULT["machine"] = machine_facts()
    print(f"saved {write_result('scale', RESULT, quick=args.quick)}")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
