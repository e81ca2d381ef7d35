"""A worker process serves Prometheus metrics (`--metrics-port`) that move as it works."""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import redis
from integration_support import WorkerProcess, worker_env

from hivemem import MemoryClient, Settings

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _value(text: str, name: str, *labels: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name) and all(label in line for label in labels))


def test_embed_worker_metrics_move(
    tmp_path: Path, redis_url: str, real_redis: redis.Redis,
    start_worker: Callable[..., WorkerProcess],
) -> None:
    port = _free_port()
    worker = start_worker(worker_env(redis_url, tmp_path / "q"), "--metrics-port", str(port))
    url = f"http://127.0.0.1:{port}/metrics"
    deadline = time.monotonic() + 30
    while True:
        try:
            before = httpx.get(url, timeout=2).text
            break
        except httpx.HTTPError:
            if time.monotonic() > deadline or worker.process.poll() is not None:
                raise AssertionError(worker.log_path.read_text()) from None
            time.sleep(0.1)
    # The boundary stage too: a turn is processed once it is current (the slot table).
    start_worker(worker_env(redis_url, tmp_path / "q"),
                 command=[sys.executable, "-m", "hivemem.workers", "boundary"])
    settings = Settings.model_validate({"redis": {"url": redis_url, "partitions": 1}})
    client = MemoryClient(settings)
    for i in range(5):
        client.ingest("metrics", "user", f"turn number {i}", namespace="ops")
    client.wait_until_processed("metrics", timeout=30, namespace="ops")
    after = httpx.get(url, timeout=2).text
    client.close()
    handled = ('stage="embed"', 'outcome="handled"')
    assert _value(after, "hivemem_stage_items_total", *handled) - _value(
        before, "hivemem_stage_items_total", *handled) == 5
    assert _value(after, "hivemem_stage_batch_seconds_count", 'stage="embed"') >= 1
    assert 'hivemem_stream_lag{stage="embed"} 0.0' in after
    assert _value(after, "hivemem_stage_consumers", 'stage="embed"') == 1
    assert "hivemem_redis_up 1.0" in after
