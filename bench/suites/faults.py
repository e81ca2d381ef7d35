"""Bad input and overload, through the public API and the test suite's fuzz properties.

- fuzz: tests/unit/test_fuzz.py's properties (hypothesis) run with many examples each,
  counting what every call came back with (accepted, refused per field, HTTP status per
  endpoint); failures and HTTP 5xx must be 0.
- backpressure: what the backpressure check costs `ingest`: the same calls with
  `ingest.max_backlog` off and on (a bound never reached, so only the measurement runs),
  interleaved in blocks of 250 on one redis-server (AOF everysec, unix socket).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import REPO, CpuMonitor, summarize

from hivemem import MemoryClient, Settings
from hivemem.testing import RedisServer


def run_fuzz(examples: int, only: str | None = None) -> dict[str, Any]:
    """The fuzz properties in this process (pytest.main), `examples` each."""
    import pytest

    os.environ["HIVEMEM_FUZZ_EXAMPLES"] = str(examples)
    cwd = Path.cwd()
    os.chdir(REPO)

    class Collect:
        def __init__(self) -> None:
            self.results: dict[str, str] = {}

        def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
            if report.when == "call" or report.outcome != "passed":
                self.results[report.nodeid.split("::")[-1]] = report.outcome

    collect = Collect()
    started = time.perf_counter()
    select = ["-k", only] if only else []
    try:
        code = pytest.main(["tests/unit/test_fuzz.py", "-q", "-n", "0", "-p", "no:logging", "-p",
                            "no:cacheprovider", "--timeout=0", *select], plugins=[collect])
    finally:
        os.chdir(cwd)
    wall = time.perf_counter() - started
    module = next(m for name, m in sys.modules.items() if name.endswith("test_fuzz"))
    outcomes = dict(sorted(module.OUTCOMES.items()))
    return {
        "examples_per_property": examples,
        "only": only,
        "exit": int(code),
        "properties": collect.results,
        "failed": sum(1 for v in collect.results.values() if v != "passed"),
        "calls": sum(outcomes.values()),
        "outcomes": outcomes,
        "http_5xx": sum(v for k, v in outcomes.items() if k.startswith("api.")
                        and k.rsplit(".", 1)[1].startswith("5")),
        "wall_s": round(wall, 1),
    }


def run_backpressure(calls: int) -> dict[str, Any]:
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
                for _ in range(max(1, calls // 250)):
                    for name, client in clients.items():
                        for i in range(250):
                            t0 = time.perf_counter_ns()
                            client.ingest(f"s{i % 10}", "user", f"turn {i}: some ordinary text")
                            lat[name].append((time.perf_counter_ns() - t0) / 1e6)
            for client in clients.values():
                client.close()
        finally:
            server.stop()
    return {"ingest_ms": {name: summarize(v) for name, v in lat.items()},
            "check": "XINFO GROUPS every 256 turns or 50 ms", "cpu": mon.result}
