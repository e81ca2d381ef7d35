#!/usr/bin/env python
"""What the backpressure check costs `ingest`: the same calls with `ingest.max_backlog` off and
on (a bound never reached, so only the measurement runs), interleaved in blocks of 250 on one
redis-server (AOF everysec, unix socket), so both see the same machine.

    /work/venv/bin/python bench/backpressure.py [--calls 10000]

Writes bench/results/backpressure.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import RESULTS, CpuMonitor, summarize

from hivemem import MemoryClient
from hivemem.config import Settings
from hivemem.testing import RedisServer


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=10_000, help="per setting")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(Path(tmp))
        server.start()
        try:
            clients = {
                name: MemoryClient(Settings.model_validate({
                    "redis": {"url": server.url, "key_prefix": f"bp{i}"},
                    "embedding": {"provider": "hashing", "dim": 64},
                    "ingest": {"max_backlog": bound}}))
                for i, (name, bound) in enumerate((("off", 0), ("on", 1_000_000)))
            }
            lat: dict[str, list[float]] = {name: [] for name in clients}
            for client in clients.values():
                for i in range(300):
                    client.ingest("warm", "user", f"warm up {i}")
            with CpuMonitor([server.process.pid] if server.process else []) as mon:
                for _ in range(args.calls // 250):
                    for name, client in clients.items():
                        for i in range(250):
                            t0 = time.perf_counter_ns()
                            client.ingest(f"s{i % 10}", "user", f"turn {i}: some ordinary text")
                            lat[name].append((time.perf_counter_ns() - t0) / 1e6)
        finally:
            server.stop()
    out = {"ingest_ms": {name: summarize(v) for name, v in lat.items()},
           "check": "XINFO GROUPS every 256 turns or 50 ms", "machine": mon.result}
    (RESULTS / "backpressure.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
