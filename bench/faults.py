#!/usr/bin/env python
"""Faults: bad input never breaks the service, and overload protection costs little.

    python bench/faults.py            # fuzz: 10,000 examples per property; backpressure: 10,000 calls
    python bench/faults.py --quick    # 30 examples per property; 1,000 calls
    python bench/faults.py --only fuzz --examples 50000 --properties held

Sections (bench/suites/faults.py; saved to bench/results/latest/faults.json):
- fuzz: tests/unit/test_fuzz.py's properties with many examples, outcomes counted (failures
  and HTTP 5xx must be 0).
- backpressure: `ingest` p50/p99 with the backpressure check off and on.
Killing workers and stores mid-run: bench/chaos.py; acknowledgement levels at a failover:
bench/replica_ack.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import machine_facts, write_result
from harness.cli import goal_parser, run_sections
from suites import faults

RESULT: dict[str, Any] = {"benchmark": "faults"}


def fuzz(args: argparse.Namespace) -> dict[str, Any]:
    RESULT["fuzz"] = faults.run_fuzz(30 if args.quick else args.examples, args.properties)
    return RESULT["fuzz"]


def backpressure(args: argparse.Namespace) -> dict[str, Any]:
    RESULT["backpressure"] = faults.run_backpressure(1000 if args.quick else args.calls)
    return RESULT["backpressure"]


def summary(name: str, r: dict[str, Any]) -> str:
    if name == "fuzz":
        return (f"{len(r['properties'])} properties x {r['examples_per_property']} examples:"
                f" {r['calls']:,} calls, {r['failed']} failed, {r['http_5xx']} HTTP 5xx")
    off, on = r["ingest_ms"]["off"], r["ingest_ms"]["on"]
    return (f"ingest p50 {off['p50']:.3f} ms off / {on['p50']:.3f} ms on,"
            f" p99 {off['p99']:.3f} / {on['p99']:.3f} ms")


def main() -> int:
    ap = goal_parser(__doc__, ["fuzz", "backpressure"])
    ap.add_argument("--examples", type=int, default=10_000, help="fuzz: examples per property")
    ap.add_argument("--properties", default=None, metavar="EXPR",
                    help="fuzz: these properties only (a pytest -k expression)")
    ap.add_argument("--calls", type=int, default=10_000, help="backpressure: calls per setting")
    args = ap.parse_args()
    code = run_sections(args, {"fuzz": fuzz, "backpressure": backpressure}, summary)
    RESULT["machine"] = machine_facts()
    print(f"saved {write_result('faults', RESULT, quick=args.quick)}")
    failed = RESULT.get("fuzz", {}).get("failed", 0) or RESULT.get("fuzz", {}).get("http_5xx", 0)
    return code or (1 if failed else 0)


if __name__ == "__main__":
    raise SystemExit(main())
