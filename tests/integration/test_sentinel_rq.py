"""rq (the reflect queue) on a Redis that Sentinel fails over (issue 39): the data path on
its own redis-server (AOF), rq's Redis a master and its replica watched by one Sentinel
(`redis.rq_url = redis+sentinel://host:port/mymaster`), and worker processes (embed,
boundary, two reflect workers). Mid-load rq's master is SIGKILLed; Sentinel promotes the
replica. Afterwards every reflect worker is still running and every closed episode is
reflected."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from integration_support import KEYS, WorkerProcess, conversation, worker_env

from hivemem.config import Settings
from hivemem.errors import NotFound, StoreUnavailable
from hivemem.producer.client import MemoryClient
from hivemem.store.episodes import EpisodeStore
from hivemem.store.redis_connect import connect_rq
from hivemem.store.reflection import ReflectionState
from hivemem.testing import RedisServer
from tests.support.qdrant_standin import StandinProcess, spawn
from tests.support.replicated import ReplicatedRedis, Sentinel, binary

pytestmark = pytest.mark.integration

WORKERS = [sys.executable, "-m", "hivemem.workers"]


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[tuple[RedisServer, Sentinel, StandinProcess]]:
    server = binary(waitaof=False)
    if server is None or not RedisServer.available():
        pytest.skip("no redis-server")
    (tmp_path / "main").mkdir()
    main = RedisServer(tmp_path / "main")
    main.start()
    pair = ReplicatedRedis(tmp_path / "rq", server)
    pair.start()
    sentinel = Sentinel(pair)
    sentinel.start()
    qdrant = spawn(tmp_path / "qdrant")
    yield main, sentinel, qdrant
    qdrant.stop()
    sentinel.stop()
    pair.stop()
    main.stop()


def _wait(what: str, done: Any, timeout_s: float, workers: list[WorkerProcess]) -> float:
    started = time.monotonic()
    while True:
        try:
            if done():
                return time.monotonic() - started
        except (StoreUnavailable, NotFound):
            pass
        for w in workers:
            assert w.process.poll() is None, f"a worker exited:\n{w.output()[-4000:]}"
        if time.monotonic() - started > timeout_s:
            logs = "\n".join(w.output()[-1500:] for w in workers)
            pytest.fail(f"{what} did not happen in {timeout_s}s\n{logs}")
        time.sleep(0.1)


def _rq_master_port(settings: Settings, timeout_s: float = 30) -> int:
    """The port of the master rq's connection resolves to. Sentinel may briefly answer "no
    master" (its 1 s down-after window can flag a loaded master as subjectively down):
    that is StoreUnavailable, which every caller retries, so ask again for a bounded while."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return int(connect_rq(settings.redis).connection_pool.get_master_address()[1])
        except StoreUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_rq_on_sentinel_survives_its_masters_sigkill_under_load(
    deployment: tuple[RedisServer, Sentinel, StandinProcess], start_worker: Any,
) -> None:
    main, sentinel, qdrant = deployment
    env = worker_env(main.url, None, extra={
        "HIVEMEM_QDRANT__URL": qdrant.url, "HIVEMEM_REDIS__RQ_URL": sentinel.url,
        "HIVEMEM_REDIS__SOCKET_TIMEOUT": "2", "HIVEMEM_REDIS__CONNECT_TIMEOUT": "0.5",
        "HIVEMEM_WORKER__BACKOFF_INITIAL_S": "0.05", "HIVEMEM_WORKER__BACKOFF_MAX_S": "0.5",
        "HIVEMEM_EPISODES__MAX_TURNS": "6",
    })
    every = [start_worker(env, "embed", "--name", "embed-1", command=WORKERS),
             start_worker(env, "boundary", "--name", "boundary-1", command=WORKERS),
             start_worker(env, "reflect", "--name", "reflect-1", command=WORKERS),
             start_worker(env, "reflect", "--name", "reflect-2", command=WORKERS)]
    _wait("the workers started", lambda: all(w.events("worker.started") for w in every),
          90, every)
    settings = Settings.model_validate({
        "redis": {"url": main.url, "partitions": 1, "rq_url": sentinel.url,
                  "socket_timeout": 2, "connect_timeout": 0.5},
        "embedding": {"provider": "hashing", "dim": 64}, "qdrant": {"url": qdrant.url},
    })
    # The settings name a Sentinel: rq's connection is its master's.
    first_master = sentinel.master_port()
    assert _rq_master_port(settings) == first_master
    sessions = [f"sen-s{i}" for i in range(4)]
    per_session = 48
    turns = conversation(sessions, per_session)
    probe = main.client()
    episodes = EpisodeStore(probe, KEYS, 1000)
    reflection = ReflectionState(probe, KEYS)
    with MemoryClient(settings) as producer:
        def produce() -> None:
            for turn in turns:
                producer.ingest(**turn)
                time.sleep(0.01)
            for sid in sessions:
                producer.close_session(sid)

        loader = threading.Thread(target=produce)
        loader.start()
        _wait("the first reflections", lambda: reflection.reflected(sessions[0]) >= 2,
              90, every)
        sentinel.pair.kill_master()
        new_master = sentinel.wait_failover(first_master)
        loader.join(timeout=120)
        assert not loader.is_alive()

        def all_reflected() -> bool:
            for sid in sessions:
                stats = producer.get_session_stats(sid)
                if (stats.turns_processed, stats.turns_assigned) != (per_session,
                                                                     per_session + 1):
                    return False
                closed = len(episodes.episodes(sid))
                if closed == 0 or reflection.reflected(sid) != closed:
                    return False
            return True

        took = _wait("every episode reflected after the failover", all_reflected, 120, every)
    for w in every:
        assert w.process.poll() is None, w.output()[-3000:]
    # rq's queue is on the promoted master now.
    assert _rq_master_port(settings) == new_master
    probe.close()
    print(f"\nrq failed over to {new_master}; every episode reflected {took:.1f}s later")
