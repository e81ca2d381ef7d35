"""Integration helpers: worker subprocesses, their environment, Redis probes.

Workers run as real processes: ``python -m hivemem.workers embed ...`` (``python -m hivemem``
does not exist) or the ``hivemem`` console script installed next to the interpreter.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from hivemem.config import Settings
from hivemem.pipeline.topology import Keys

REPO = Path(__file__).resolve().parents[2]
SHARED_MODELS = REPO.parent / "shared" / "models"
FASTEMBED_CACHE = SHARED_MODELS / "fastembed_cache"
HIVEMEM_SCRIPT = Path(sys.executable).parent / "hivemem"
WORKER_MODULE = [sys.executable, "-m", "hivemem.workers", "embed"]
# These integration tests predate partitions and follow one stream: they run a deployment
# with P = 1 (a valid deployment); test_cluster_pipeline runs P > 1, on one Redis and on a
# Redis Cluster.
KEYS = Keys("hm", 1)
STREAM = KEYS.turns_stream(0)
GROUP = "embed"


def require_model() -> None:
    if not FASTEMBED_CACHE.exists():
        pytest.skip(f"{FASTEMBED_CACHE} not found")


def worker_env(
    redis_url: str,
    qdrant_path: Path | None,
    *,
    provider: str = "hashing",
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """A clean environment for a worker process: no HIVEMEM_* leaks from the caller."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIVEMEM_")}
    env.pop("FASTEMBED_CACHE_PATH", None)
    env.update(
        {
            "HIVEMEM_REDIS__URL": redis_url,
            "HIVEMEM_EMBEDDING__PROVIDER": provider,
            "HIVEMEM_LOG_LEVEL": "info",
            "HIVEMEM_LOG_JSON": "true",
            "HIVEMEM_WORKER__BLOCK_MS": "100",
            "HIVEMEM_REDIS__PARTITIONS": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    if qdrant_path is not None:
        env["HIVEMEM_QDRANT__PATH"] = str(qdrant_path)
    if provider == "hashing":
        env["HIVEMEM_EMBEDDING__DIM"] = "64"
    else:
        env["FASTEMBED_CACHE_PATH"] = str(FASTEMBED_CACHE)
        env["HF_HUB_OFFLINE"] = "1"
    if extra:
        env.update(extra)
    return env


@dataclass
class WorkerProcess:
    """A worker subprocess whose stderr goes to a file (no pipe to fill up and block on)."""

    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
            pytest.fail(f"worker {self.pid} did not exit in {timeout}s; log:\n{self.output()}")

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def events(self, name: str) -> list[dict[str, Any]]:
        """Structured log lines (JSON) with this event name."""
        out: list[dict[str, Any]] = []
        for raw in self.output().splitlines():
            line = raw.strip()
            if not line.startswith("{"):
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("event") == name:
                out.append(record)
        return out

    def summary(self) -> dict[str, int]:
        """The CLI's last line: ``handled=N dead_lettered=N reclaimed=N``."""
        for line in reversed(self.output().splitlines()):
            if line.startswith("handled="):
                return {k: int(v) for k, v in (part.split("=") for part in line.split())}
        raise AssertionError(f"no summary line in worker output:\n{self.output()}")


def server_settings(redis_url: str, **worker: Any) -> Settings:
    """Settings for an in-test producer on the real server (nothing read from env)."""
    return Settings.model_validate(
        {
            "redis": {"url": redis_url, "partitions": 1},
            "embedding": {"provider": "hashing", "dim": 64},
            "worker": {"block_ms": 50, "claim_idle_ms": 200, "claim_interval_s": 0.1,
                       "max_deliveries": 3, "backoff_initial_s": 0.01, "backoff_max_s": 0.05,
                       **worker},
        }
    )


def pending_count(client: redis.Redis) -> int:
    try:
        return int(client.xpending(STREAM, GROUP)["pending"])
    except redis.ResponseError:  # no group yet
        return 0


def processed_count(client: redis.Redis, sessions: list[str]) -> int:
    pipe = client.pipeline(transaction=False)
    for sid in sessions:
        pipe.bitcount(KEYS.session_processed(sid))
    return sum(int(n) for n in pipe.execute())


_SUBJECTS = ("the planner", "the coder", "the reviewer", "the user", "the deploy job", "the cache")
_VERBS = ("proposed", "rejected", "measured", "rewrote", "documented", "benchmarked", "shipped")
_OBJECTS = (
    "the pagination of the orders endpoint", "a retry policy with exponential backoff",
    "the Postgres full-text index on order notes", "signed webhooks for shipped orders",
    "the invoice PDF renderer", "the staging Helm chart and its liveness probe",
    "a nightly export of customer data to the warehouse",
)


def conversation(sessions: list[str], per_session: int) -> list[dict[str, Any]]:
    """Mixed-length, varied turns, interleaved across sessions, with stable turn ids."""
    turns: list[dict[str, Any]] = []
    for i in range(per_session):
        for s, sid in enumerate(sessions):
            n = i * len(sessions) + s
            # "In step i," (a number the statement states): "Step i:" is a label, which
            # names no value, and the statements that share an object would then restate
            # one another (the change rules), where these tests want each one distinct.
            text = (
                f"In step {i}, {_SUBJECTS[n % len(_SUBJECTS)]} {_VERBS[(n // 3) % len(_VERBS)]}"
                f" {_OBJECTS[(n // 7) % len(_OBJECTS)]}"
            )
            if n % 5 == 0:
                text += f", noting that ticket {n} depends on it and must not regress."
            turns.append(
                {"session_id": sid, "role": "assistant" if n % 2 else "user",
                 "content": text, "turn_id": f"{sid}-t{i}"}
            )
    return turns
