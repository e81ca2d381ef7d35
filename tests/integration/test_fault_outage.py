"""Every stage outlives an outage, and nothing an outage or a crash leaves behind waits for
future traffic (issue 39), on a redis-server of the test's own (AOF on) and the networked
Qdrant stand-in (several worker processes share it).

- kill -9 of Redis under load and a restart on the same socket 3 s later: every worker
  process (embed, boundary, two reflect workers) is still running afterwards, the reflect
  workers said they backed off (and one's /metrics showed it down meanwhile), and every
  episode is reflected within 2 minutes of the restart.
- A reflect worker SIGKILLed while its job waits on a slow (scripted) LLM: the job's
  heartbeat lapses and another worker reflects the episode within 90 s.
- An outage between a boundary worker's begin (lease taken) and its commit, then the
  session's last entries and no more traffic: every episode is closed and reflected within
  60 s (a sweep drains the buffer once the orphaned lease lapses).
"""

from __future__ import annotations

import signal
import socket
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis as redis_py
from integration_support import KEYS, WorkerProcess, conversation, worker_env
from redis.backoff import NoBackoff
from redis.retry import Retry

from hivemem.config import Settings, WorkerSettings
from hivemem.errors import NotFound, StoreUnavailable
from hivemem.producer.client import MemoryClient
from hivemem.store.episodes import EpisodeStore
from hivemem.store.reflection import ReflectionState
from hivemem.store.streams import StreamStore
from hivemem.testing import RedisServer
from hivemem.workers.boundary import BoundaryHandler, boundary_kind, policy_from
from hivemem.workers.stream import StreamWorker
from tests.support.qdrant_standin import StandinProcess, spawn
from tests.support.scripted_llm import Reply, ScriptedLLM

pytestmark = pytest.mark.integration

DIM = 64
WORKERS = [sys.executable, "-m", "hivemem.workers"]


@pytest.fixture
def redis_aof(tmp_path: Path) -> Iterator[RedisServer]:
    if not RedisServer.available():
        pytest.skip("redis-server is not installed")
    folder = tmp_path / "redis"
    folder.mkdir()
    server = RedisServer(folder, appendfsync="everysec")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def qdrant(tmp_path: Path) -> Iterator[StandinProcess]:
    standin = spawn(tmp_path / "qdrant")
    yield standin
    standin.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(redis_url: str, qdrant_url: str, **extra: str) -> dict[str, str]:
    return worker_env(redis_url, None, extra={
        "HIVEMEM_QDRANT__URL": qdrant_url,
        "HIVEMEM_REDIS__SOCKET_TIMEOUT": "2",
        "HIVEMEM_REDIS__CONNECT_TIMEOUT": "0.5",
        "HIVEMEM_WORKER__BATCH_SIZE": "32",
        "HIVEMEM_WORKER__BACKOFF_INITIAL_S": "0.05",
        "HIVEMEM_WORKER__BACKOFF_MAX_S": "0.5",
        "HIVEMEM_EPISODES__MAX_TURNS": "6",
        **extra,
    })


def _settings(redis_url: str, qdrant_url: str) -> Settings:
    return Settings.model_validate({
        "redis": {"url": redis_url, "partitions": 1, "socket_timeout": 2,
                  "connect_timeout": 0.5},
        "embedding": {"provider": "hashing", "dim": DIM}, "qdrant": {"url": qdrant_url},
    })


def _wait(what: str, done: Callable[[], bool], timeout_s: float,
          workers: list[WorkerProcess]) -> float:
    """Wait for `done`, failing if a worker process exits meanwhile. Returns seconds taken."""
    started = time.monotonic()
    while True:
        try:
            if done():
                return time.monotonic() - started
        except StoreUnavailable:
            pass
        for w in workers:
            assert w.process.poll() is None, f"a worker exited:\n{w.output()[-4000:]}"
        if time.monotonic() - started > timeout_s:
            logs = "\n".join(w.output()[-1500:] for w in workers)
            pytest.fail(f"{what} did not happen in {timeout_s}s\n{logs}")
        time.sleep(0.1)


def _started(workers: list[WorkerProcess], timeout_s: float = 90) -> None:
    def ready() -> bool:
        return all(w.events("worker.started") for w in workers)

    _wait("the workers started", ready, timeout_s, workers)


def _all_reflected(client: MemoryClient, redis: Any, sessions: list[str], per_session: int
                   ) -> Callable[[], bool]:
    """Every turn embedded and assigned (the close too), every closed episode reflected."""
    episodes = EpisodeStore(redis, KEYS, 1000)
    reflection = ReflectionState(redis, KEYS)

    def done() -> bool:
        for sid in sessions:
            try:
                stats = client.get_session_stats(sid)
            except NotFound:
                return False
            if (stats.turns_processed, stats.turns_assigned) != (per_session, per_session + 1):
                return False
            closed = len(episodes.episodes(sid))
            if closed == 0 or reflection.reflected(sid) != closed:
                return False
        return True

    return done


def _retrying(call: Callable[[], Any]) -> Any:
    while True:
        try:
            return call()
        except StoreUnavailable:
            time.sleep(0.05)


def _metric(port: int, line_start: str) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return None
    return next((ln for ln in text.splitlines() if ln.startswith(line_start)), None)


def test_every_worker_outlives_a_redis_kill_and_reflection_completes(
    redis_aof: RedisServer, qdrant: StandinProcess, start_worker: Any,
) -> None:
    env = _env(redis_aof.url, qdrant.url)
    port = _free_port()
    embed = start_worker(env, "embed", "--name", "embed-1", command=WORKERS)
    boundary = start_worker(env, "boundary", "--name", "boundary-1", command=WORKERS)
    reflect = [
        start_worker(env, "reflect", "--name", "reflect-1", "--metrics-port", str(port),
                     command=WORKERS),
        start_worker(env, "reflect", "--name", "reflect-2", command=WORKERS),
    ]
    every = [embed, boundary, *reflect]
    _started([embed, boundary, *reflect])  # the reflect workers' dispatch threads too
    sessions = [f"out-s{i}" for i in range(5)]
    per_session = 60
    turns = conversation(sessions, per_session)
    with MemoryClient(_settings(redis_aof.url, qdrant.url)) as producer:
        def produce() -> None:
            for turn in turns:
                _retrying(lambda t=turn: producer.ingest(**t))
                time.sleep(0.004)
            for sid in sessions:
                _retrying(lambda s=sid: producer.close_session(s))

        loader = threading.Thread(target=produce)
        loader.start()
        probe = redis_aof.client()
        # Under load: turns flowing, and some episodes already closed and reflected.
        _wait("the first reflections", lambda: probe.llen(KEYS.session_episodes(sessions[0]))
              >= 2, 60, every)
        probe.close()
        redis_aof.kill()
        down = time.monotonic()
        seen_down = None
        # Down for 3 s at least, and until the reflect worker has seen it (an idle worker
        # notices at its next Redis call: on a quiet machine the jobs may all be done by
        # the kill), 20 s at most.
        while time.monotonic() - down < 3.0 or (
                not seen_down and time.monotonic() - down < 20.0):
            seen_down = seen_down or _metric(port, 'hivemem_worker_up{worker="reflect"} 0')
            time.sleep(0.1)
        redis_aof.start()
        loader.join(timeout=120)
        assert not loader.is_alive()
        took = _wait("every episode reflected", _all_reflected(
            producer, redis_aof.client(), sessions, per_session), 120, every)
    for w in every:
        assert w.process.poll() is None, w.output()[-3000:]
    for w in reflect:
        # Our loop's back-off, or rq's own reconnect loop (an idle worker meets the outage
        # in rq's dequeue, which retries by itself): either way it saw Redis go and lived.
        saw = w.events("reflect.worker_backoff") or (
            "could not connect to Redis instance" in w.output())
        assert saw, f"the reflect worker never saw Redis go:\n{w.output()[-3000:]}"
    assert seen_down, "reflect-1's /metrics never showed it down while Redis was away"
    assert _metric(port, 'hivemem_worker_up{worker="reflect"} 1'), "not back up after"
    for w in every:  # and a warm shutdown still stops each of them after the restarts
        w.signal(signal.SIGTERM)
    for w in every:
        w.wait(timeout=60)
    print(f"\nreflection complete {took:.1f}s after the restart")


def test_a_reflect_job_whose_worker_is_killed_is_reflected_by_another_within_90s(
    redis_aof: RedisServer, qdrant: StandinProcess, start_worker: Any,
) -> None:
    with ScriptedLLM() as llm:
        # The first reflection hangs (the worker is killed while it waits); the rest answer.
        llm.push(Reply(text='{"actions": []}', delay_s=60))
        env = _env(redis_aof.url, qdrant.url, **{
            "HIVEMEM_LLM__PROVIDER": "openai", "HIVEMEM_LLM__BASE_URL": llm.url,
            "HIVEMEM_LLM__MODEL": "scripted", "HIVEMEM_LLM__TIMEOUT_S": "120",
            # The killed job's session lock lapses in 10 s (not 60): it is what the
            # handed-back job waits for once the heartbeat (10 s, the default) has lapsed.
            "HIVEMEM_REFLECTION__LOCK_LEASE_MS": "10000",
        })
        embed = start_worker(env, "embed", "--name", "embed-1", command=WORKERS)
        boundary = start_worker(env, "boundary", "--name", "boundary-1", command=WORKERS)
        first = start_worker(env, "reflect", "--name", "reflect-1", command=WORKERS)
        _started([embed, boundary, first])
        sid = "kill-s1"
        with MemoryClient(_settings(redis_aof.url, qdrant.url)) as producer:
            for i in range(4):
                producer.ingest(sid, "user" if i % 2 == 0 else "assistant",
                                f"Step {i}: the planner measured the invoice PDF renderer",
                                turn_id=f"{sid}-t{i}")
            producer.close_session(sid)
            redis = redis_aof.client()
            reflection = ReflectionState(redis, KEYS)
            queue_name = Settings().episodes.reflect_queue
            from rq import Queue

            started = Queue(queue_name, connection=redis).started_job_registry
            _wait("the job running on reflect-1",
                  lambda: len(llm.requests) >= 1 and started.get_job_count(cleanup=False) == 1,
                  90, [embed, boundary, first])
            second = start_worker(env, "reflect", "--name", "reflect-2", command=WORKERS)
            _wait("reflect-2 up", lambda: bool(second.events("worker.started")), 90,
                  [embed, boundary, second])
            first.kill()
            took = _wait("the episode reflected by reflect-2",
                         lambda: reflection.reflected(sid) == 1, 90, [embed, boundary, second])
            assert second.events("episode.reflected"), second.output()[-3000:]
            assert second.events("reflect.job_abandoned"), second.output()[-3000:]
            # The job that reflected advances the session before rq takes it off the
            # started registry: a moment after, not at once.
            _wait("the started registry drained",
                  lambda: started.get_job_count(cleanup=False) == 0, 30, [second])
            assert len(llm.requests) >= 2
            redis.close()
    print(f"\nthe killed job's episode was reflected {took:.1f}s after the kill")


def test_an_outage_between_begin_and_commit_leaves_no_session_waiting_for_traffic(
    redis_aof: RedisServer, qdrant: StandinProcess, start_worker: Any,
) -> None:
    """The boundary worker runs in the test (the real consume loop and handler), so that the
    outage falls exactly between its first `begin` and that advance's `commit`: Redis is
    killed there and restarted 3 s later (the old lease, in the AOF, has ~7 s left). Every
    turn and each session's close are in before the boundary worker starts, so after the
    outage no entry of any session comes again."""
    env = _env(redis_aof.url, qdrant.url)
    embed = start_worker(env, "embed", "--name", "embed-1", command=WORKERS)
    reflect = start_worker(env, "reflect", "--name", "reflect-1", command=WORKERS)
    _started([embed, reflect])
    sessions = [f"gap-s{i}" for i in range(3)]
    per_session = 20
    settings = _settings(redis_aof.url, qdrant.url).model_copy(update={
        "worker": WorkerSettings(batch_size=8, block_ms=100, backoff_initial_s=0.05,
                                 backoff_max_s=0.5, claim_interval_s=1.0),
    })
    assert settings.episodes.lease_ms == 10_000 and settings.episodes.sweep_interval_s == 2.0
    with MemoryClient(settings) as producer:
        for turn in conversation(sessions, per_session):
            producer.ingest(**turn)
        for sid in sessions:
            producer.close_session(sid)

        def embedded() -> bool:
            return all(producer.get_session_stats(sid).turns_processed == per_session
                       for sid in sessions)

        _wait("every turn embedded", embedded, 60, [embed, reflect])

        # No redis-py retries on the worker's connection: its own retries (10, up to ~5 s)
        # would otherwise resend the commit after a short restart, hiding the outage the
        # issue saw when Redis stayed away longer than they last.
        conn = redis_py.Redis(unix_socket_path=str(redis_aof.socket), socket_timeout=2,
                              retry=Retry(NoBackoff(), 0))
        store = EpisodeStore(conn, KEYS, settings.episodes.lease_ms)
        real_commit, real_sweep_check = store.commit, store.sweep_check
        cut: dict[str, Any] = {}
        swept: list[str] = []

        def commit(session_id: str, token: str, **kw: Any) -> int:
            if not cut:  # the first advance: its begin took the lease; Redis goes now
                cut["session"] = session_id
                redis_aof.kill()
                restart = threading.Timer(3.0, redis_aof.start)
                restart.start()
                cut["restart"] = restart
            return real_commit(session_id, token, **kw)

        def sweep_check(session_id: str) -> bool:
            ready = real_sweep_check(session_id)
            if ready:
                swept.append(session_id)
            return ready

        store.commit = commit  # type: ignore[method-assign]
        store.sweep_check = sweep_check  # type: ignore[method-assign]
        handler = BoundaryHandler(store, policy_from(settings.episodes))
        worker = StreamWorker(boundary_kind(handler, settings.episodes.sweep_interval_s),
                              StreamStore(conn, KEYS), settings.worker, consumer="boundary-t")
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        try:
            _wait("the outage", lambda: "restart" in cut, 60, [embed, reflect])
            cut["restart"].join()
            took = _wait("every episode closed and reflected", _all_reflected(
                producer, redis_aof.client(), sessions, per_session), 60, [embed, reflect])
        finally:
            worker.stop()
            thread.join(timeout=10)
    assert cut["session"] in swept, f"the sweep never drained {cut['session']}: {swept}"
    for w in (embed, reflect):
        assert w.process.poll() is None, w.output()[-3000:]
    print(f"\nevery episode closed and reflected {took:.1f}s after the restart")


def test_a_worker_started_while_redis_is_down_waits_for_it(
    redis_aof: RedisServer, qdrant: StandinProcess, start_worker: Any,
) -> None:
    """What a supervisor's restart during an outage meets (bench/chaos.py saw 8 workers
    exit so): with `worker.startup_wait_s`, the worker backs off until Redis answers."""
    redis_aof.kill()
    env = _env(redis_aof.url, qdrant.url, HIVEMEM_WORKER__STARTUP_WAIT_S="60")
    workers = [start_worker(env, "embed", "--name", "embed-w", command=WORKERS),
               start_worker(env, "reflect", "--name", "reflect-w", command=WORKERS)]
    _wait("both waiting for Redis",
          lambda: all(w.events("worker.waiting_for_redis") for w in workers), 60, workers)
    time.sleep(1.0)
    redis_aof.start()
    _started(workers)
    with MemoryClient(_settings(redis_aof.url, qdrant.url)) as producer:
        producer.ingest("late-s1", "user", "the workers came up after Redis", turn_id="l1")
        _wait("the turn embedded", lambda: producer.get_session_stats(
            "late-s1").turns_processed == 1, 60, workers)
