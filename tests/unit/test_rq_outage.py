"""The reflect queue's workers outlive their Redis: embedded mode's reflect thread backs off
while its server is away and runs jobs again once it is back; a job's heartbeat lasts
`reflection.job_heartbeat_s` (renewed while it runs), and a job whose heartbeat lapsed is
handed back by the queue's upkeep. On a redis-server of the test's own (killed here)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from rq import Queue
from rq.job import Job, JobStatus

from hivemem.config import ReflectionSettings
from hivemem.pipeline.topology import Keys
from hivemem.testing import RedisServer
from hivemem.workers.queue import JobQueue
from hivemem.workers.rqworker import QueueCare, ThreadWorker

QUEUE = "outage-test"
RAN: list[str] = []


def _ran(_context: Any, tag: str) -> str:
    RAN.append(tag)
    return tag


def _slow(_context: Any, seconds: float) -> None:
    time.sleep(seconds)


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    if not RedisServer.available():
        pytest.skip("redis-server is not installed")
    server = RedisServer(tmp_path)
    server.start()
    yield server
    server.stop()


def _until(check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _jobs(server: RedisServer, **reflection: Any) -> JobQueue:
    return JobQueue(server.client(), QUEUE, ReflectionSettings(**reflection),
                    maintenance_lock=Keys("t", 1).job_maintenance(QUEUE))


def test_the_embedded_reflect_thread_outlives_its_redis(own_redis: RedisServer) -> None:
    jobs = _jobs(own_redis)
    conn = own_redis.client()
    worker = ThreadWorker(conn, jobs, cast(Any, SimpleNamespace()), backoff_initial_s=0.05,
                          backoff_max_s=0.2)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    queue = Queue(QUEUE, connection=own_redis.client())
    try:
        queue.enqueue_call(f"{__name__}._ran", args=("before",))
        _until(lambda: "before" in RAN)
        own_redis.kill()
        time.sleep(1.5)  # a few rounds of back-off with the server gone
        assert thread.is_alive()
        own_redis.start()
        queue = Queue(QUEUE, connection=own_redis.client())
        queue.enqueue_call(f"{__name__}._ran", args=("after",))
        _until(lambda: "after" in RAN)
        assert thread.is_alive()
    finally:
        worker.stop()
        thread.join(timeout=10)
    assert not thread.is_alive()


def test_a_jobs_heartbeat_is_short_and_renewed_while_it_runs(own_redis: RedisServer) -> None:
    jobs = _jobs(own_redis, job_heartbeat_s=3)
    worker = ThreadWorker(own_redis.client(), jobs, cast(Any, SimpleNamespace()))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    queue = Queue(QUEUE, connection=own_redis.client())
    try:
        job = queue.enqueue_call(f"{__name__}._slow", args=(6.0,), timeout=600)
        registry = queue.started_job_registry
        _until(lambda: registry.get_job_count(cleanup=False) == 1)
        # Well past its 3 s heartbeat into the job, it is still not expired: renewed.
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            assert registry.get_expired_job_ids() == []
            # ...and never more than the heartbeat ahead (not the job timeout + 60 s).
            [(_, expires)] = registry.connection.zrange(registry.key, 0, -1, withscores=True)
            assert expires <= time.time() + 3
            time.sleep(0.1)
        _until(lambda: job.get_status(refresh=True) == JobStatus.FINISHED)
    finally:
        worker.stop()
        thread.join(timeout=10)


def test_a_job_whose_heartbeat_lapsed_is_handed_back(own_redis: RedisServer) -> None:
    """A worker that died mid-job (simulated: the job is put in the started registry by a
    worker that then stops heartbeating) is noticed once the heartbeat lapses."""
    jobs = _jobs(own_redis, job_heartbeat_s=3, maintenance_interval_s=0.2)
    conn = own_redis.client()
    queue = Queue(QUEUE, connection=conn)
    job = queue.enqueue_call(f"{__name__}._ran", args=("again",))
    job.retries_left = 1  # handed back through its retry (failed when none is left)
    job.retry_intervals = [0]
    job.save()
    dead = ThreadWorker(conn, jobs, cast(Any, SimpleNamespace())).worker
    dead.register_birth()
    dequeued = queue.dequeue_any([queue], timeout=None, connection=conn)
    assert dequeued is not None
    execution = dead.prepare_execution(dequeued[0])
    dead.prepare_job_execution(dequeued[0], remove_from_intermediate_queue=True)
    assert queue.started_job_registry.get_job_count(cleanup=False) == 1
    care = QueueCare(ThreadWorker(own_redis.client(), jobs, cast(Any, SimpleNamespace())).worker,
                     jobs)
    care.tick()
    assert queue.started_job_registry.get_job_count(cleanup=False) == 1  # still fresh
    time.sleep(3.2)  # the heartbeat (3 s) lapses; nobody renews it
    time.sleep(0.25)  # and the maintenance interval has come round
    care.tick()
    assert queue.started_job_registry.get_job_count(cleanup=False) == 0
    assert Job.fetch(job.id, connection=conn).get_status() in (JobStatus.QUEUED,
                                                              JobStatus.SCHEDULED)
    assert execution is not None
