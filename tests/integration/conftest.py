"""Integration fixtures: a flushed real redis-server and worker subprocesses."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from integration_support import WORKER_MODULE, WorkerProcess


@pytest.fixture
def start_worker(tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """Start worker subprocesses; any still running at teardown are killed (by pid)."""
    started: list[WorkerProcess] = []

    def _start(
        env: dict[str, str], *args: str, command: list[str] | None = None
    ) -> WorkerProcess:
        log_path = tmp_path / f"worker-{len(started)}.log"
        with log_path.open("wb") as log_file:
            process = subprocess.Popen(
                [*(command or WORKER_MODULE), *args],
                env=env,
                cwd=tmp_path,
                stdout=log_file,
                stderr=subprocess.STDOUT,
            )
        worker = WorkerProcess(process, log_path)
        started.append(worker)
        return worker

    yield _start
    for worker in started:
        worker.kill()


@pytest.fixture
def real_redis(redis_server: Any) -> Iterator[redis.Redis]:
    """A client on the session's real redis-server, flushed before and after the test."""
    client = redis_server.client()
    client.flushall()
    yield client
    client.flushall()
    client.close()


@pytest.fixture
def redis_url(redis_server: Any, real_redis: redis.Redis) -> str:
    return redis_server.url


