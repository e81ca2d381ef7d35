"""The partitioned pipeline on a real Redis Cluster (3 masters + 3 replicas on loopback):
2 producer processes, 2 embed, 2 boundary and 2 reflect worker processes (the reflect
workers dispatch the episode outbox), one Qdrant (the REST stand-in) and rq on its own plain
Redis. Mid-load a worker of every stage is SIGKILLed and restarted, and a primary fails
over (CLUSTER FAILOVER on a replica). Afterwards: every turn in Qdrant exactly once, every
session's episodes in order and closed once, one reflect job per episode. The same test
runs on one plain Redis with the same partitions."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from integration_support import WorkerProcess, worker_env

from hivemem.config import Settings
from hivemem.pipeline.topology import Keys
from hivemem.producer.client import MemoryClient
from hivemem.store.episodes import EpisodeStore
from hivemem.store.redis_connect import connect
from hivemem.store.reflection import ReflectionState
from hivemem.store.vectors.server import ServerVectorStore
from tests.support.qdrant_standin import spawn
from tests.support.redis_cluster import RedisCluster

pytestmark = pytest.mark.integration

DIM = 64
PARTITIONS = 8
SESSIONS = [f"cl-s{i}" for i in range(8)]
PER_SESSION = 24
WORKERS = [sys.executable, "-m", "hivemem.workers"]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def redis_cluster() -> Iterator[RedisCluster]:
    if not RedisCluster.available():
        if os.environ.get("CI"):
            pytest.fail("redis-server / redis-cli are not installed (.ci/run apt-gets them)")
        pytest.skip("redis-server / redis-cli not installed")
    cluster = RedisCluster(Path(tempfile.mkdtemp(prefix="hivemem-cluster-")))
    cluster.start()
    yield cluster
    cluster.stop()


def _wait_for(what: str, done: Any, workers: list[WorkerProcess], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            logs = "\n".join(w.output()[-1200:] for w in workers)
            pytest.fail(f"{what} did not happen in {timeout_s}s\n{logs}")
        time.sleep(0.1)


def _check_episodes_and_jobs(
    settings: Settings, rq_url: str, every: list[WorkerProcess]
) -> None:
    """Every turn embedded and assigned; episodes in order, closed once; one job each."""
    with MemoryClient(settings) as client:
        def settled() -> bool:
            for sid in SESSIONS:
                stats = client.get_session_stats(sid)
                if (stats.turns_processed, stats.turns_assigned) != (
                        PER_SESSION, PER_SESSION + 1):
                    return False
            return True

        # Generous: the waits end as soon as the work is done, and on a loaded 2-core CI box
        # (8 worker processes, 3 masters and a failover) 90 s was seen not to be enough.
        _wait_for("every turn embedded and assigned", settled, every, 180)
        rq = redis.Redis.from_url(rq_url)
        main = connect(settings.redis)
        keys = Keys("hm", PARTITIONS)
        episodes = EpisodeStore(main, keys, 1000)
        reflection = ReflectionState(main, keys)
        def reflected() -> bool:
            return all(reflection.reflected(sid) == len(episodes.episodes(sid))
                       for sid in SESSIONS)

        try:
            _wait_for("every episode reflected", reflected, every, 180)
        except BaseException:
            ids = [f"reflect-{e.episode_id}" for sid in SESSIONS for e in episodes.episodes(sid)]
            print("rq places of the reflect jobs:",
                  {j: p for j, p in _job_places(rq_url, settings.episodes.reflect_queue,
                                                ids).items() if p != ["finished"]})
            raise
        all_episodes = {sid: episodes.episodes(sid) for sid in SESSIONS}
        for sid, eps in all_episodes.items():
            assert client.get_session_stats(sid).turns_dead_lettered == 0, sid
            # In order, closed once: indices 1..n, each turn in exactly one episode, in
            # seq order across the episodes.
            assert [e.index for e in eps] == list(range(1, len(eps) + 1)), sid
            turn_ids = [t for e in eps for t in e.turn_ids]
            assert turn_ids == [f"{sid}-t{i}" for i in range(PER_SESSION)], sid
        ids = [e.episode_id for eps in all_episodes.values() for e in eps]
        assert len(ids) == len(set(ids))
        # One reflect job per episode: dispatched once (across every dispatcher, the
        # killed ones included), and each job id exists on rq's Redis.
        dispatched = Counter(e["episode_id"] for w in every
                             for e in w.events("episode.dispatched"))
        assert set(dispatched) <= set(ids)
        assert max(dispatched.values()) == 1, dispatched.most_common(3)
        # The killed dispatcher can have been SIGKILLed after its MULTI ran and before it
        # logged (seen once on a loaded CI box): at most that one episode goes unlogged,
        # and its dispatch marker and job are there like every other's.
        assert len(set(ids) - set(dispatched)) <= 1, set(ids) - set(dispatched)
        assert all(rq.exists(keys.dispatched(i)) for i in ids)
        assert all(rq.exists(f"rq:job:reflect-{i}") for i in ids)
        main.close()
        rq.close()


def _recover_stuck_dequeues(queue: Any) -> None:
    """rq's other maintenance pass, with its clock moved on: a worker killed after it moved
    a job to the queue's intermediate list and before it registered the job as started
    leaves it there (neither queued nor started; seen on CI: the session's last episode,
    never reflected within the wait). rq's maintenance hands such a job to its failure
    handling, hence to the job's retries, once it has seen it there twice a minute apart,
    every 10 minutes. Only jobs still there half a second later: a live worker moves a job
    on within milliseconds."""
    from rq.intermediate_queue import IntermediateQueue
    from rq.worker import Worker

    intermediate = IntermediateQueue(queue.key, connection=queue.connection)

    def stuck() -> set[str]:
        return {j for j in intermediate.get_job_ids() if j not in queue.started_job_registry}

    first = stuck()
    time.sleep(0.5)
    ids = first & stuck()
    for job_id in ids:
        queue.connection.set(intermediate.get_first_seen_key(job_id), time.time() - 3600)
    if ids:
        intermediate.cleanup(Worker([queue], connection=queue.connection), queue)


def _job_places(rq_url: str, queue_name: str, job_ids: list[str]) -> dict[str, list[str]]:
    """Where rq holds each job (a failing wait says it)."""
    from rq import Queue

    queue = Queue(queue_name, connection=redis.Redis.from_url(rq_url))
    registries = {"queued": queue.get_job_ids(),
                  "intermediate": queue.intermediate_queue.get_job_ids(),
                  "started": queue.started_job_registry.get_job_ids(),
                  "scheduled": queue.scheduled_job_registry.get_job_ids(),
                  "failed": queue.failed_job_registry.get_job_ids(),
                  "finished": queue.finished_job_registry.get_job_ids()}
    return {j: [name for name, ids in registries.items() if j in ids] for j in job_ids}


def _run_pipeline(
    tmp_path: Path, main_url: str, rq_url: str, start_worker: Any, failover: Any = None
) -> None:
    rng = random.Random(15)
    qdrant = spawn(tmp_path / "qdrant")
    extra = {
        "HIVEMEM_REDIS__PARTITIONS": str(PARTITIONS),
        "HIVEMEM_REDIS__RQ_URL": rq_url,
        "HIVEMEM_QDRANT__URL": qdrant.url,
        "HIVEMEM_QDRANT__TIMEOUT": "5.5",
        "HIVEMEM_WORKER__BATCH_SIZE": "8",
        "HIVEMEM_WORKER__CLAIM_IDLE_MS": "800",
        "HIVEMEM_WORKER__CLAIM_INTERVAL_S": "0.2",
        "HIVEMEM_WORKER__BACKOFF_MAX_S": "0.2",
        "HIVEMEM_EPISODES__MAX_TURNS": "6",
        # A killed reflect worker's session lock lapses in 2 s (not 60), and a job that
        # found it held is retried every second (not after 5, 30, 120 s): the kill is
        # recovered within the wait below even on a loaded machine.
        "HIVEMEM_REFLECTION__LOCK_LEASE_MS": "2000",
        "HIVEMEM_REFLECTION__LOCK_WAIT_S": "3",
        "HIVEMEM_REFLECTION__RETRY_INTERVALS_S": "[1]",
        "HIVEMEM_REFLECTION__RETRIES": "20",
        "HIVEMEM_REFLECTION__JOB_TIMEOUT_S": "30",
    }
    env = worker_env(main_url, None, extra=extra)
    settings_doc = {
        "redis": {"url": main_url, "partitions": PARTITIONS, "rq_url": rq_url},
        "embedding": {"provider": "hashing", "dim": DIM}, "qdrant": {"url": qdrant.url}}
    try:
        workers: dict[str, WorkerProcess] = {}
        every: list[WorkerProcess] = []

        def start(name: str) -> None:
            kind = name.rsplit("-", 1)[0]
            workers[name] = start_worker(env, kind, "--name", f"{name}-{len(every)}",
                                         command=WORKERS)
            every.append(workers[name])

        for kind in ("embed", "boundary", "reflect"):
            for i in (1, 2):
                start(f"{kind}-{i}")
        _wait_for("the stream workers started",
                  lambda: all(w.events("worker.started") for n, w in workers.items()
                              if not n.startswith("reflect")), every, 150)
        producers = [
            subprocess.Popen(
                [sys.executable, "-m", "tests.support.producer_process",
                 json.dumps(settings_doc), ",".join(SESSIONS[i::2]), str(PER_SESSION)],
                cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for i in (0, 1)
        ]
        # Mid-load: kill -9 one worker of every stage (and start a new one), fail over.
        time.sleep(1.5)
        for kind in ("embed", "boundary", "reflect"):
            victim = f"{kind}-{rng.choice((1, 2))}"
            workers[victim].kill()
            start(victim)
        if failover is not None:
            failover()
        for p in producers:
            out, _ = p.communicate(timeout=90)
            assert p.returncode == 0, out
        settings = Settings.model_validate(settings_doc)
        # A reflect job whose worker was killed mid-job stays in rq's started registry until
        # rq's abandoned-job detection (worker maintenance, every 10 min, once the job's
        # timeout has passed) puts it back in the queue: run that detection now, with its
        # clock moved past the timeout, as the crash test does. (When the killed job was a
        # session's last episode, nothing else would reflect it within the wait.)
        from rq import Queue
        from rq.registry import StartedJobRegistry

        time.sleep(1.0)  # let the killed worker's job be visible as started
        queue = Queue(settings.episodes.reflect_queue, connection=redis.Redis.from_url(rq_url))
        StartedJobRegistry(queue=queue).cleanup(timestamp=time.time() + 3600)
        _recover_stuck_dequeues(queue)
        _check_episodes_and_jobs(settings, rq_url, every)
        for w in every:
            if w.process.poll() is None:
                w.signal(signal.SIGTERM)
        for w in every:
            if w.process.returncode is None:
                w.wait(timeout=60)
        store = ServerVectorStore(settings.qdrant, DIM)
        try:
            stored = list(store.iter_turns())
            assert len(stored) == len(SESSIONS) * PER_SESSION  # 0 lost
            assert max(Counter((t.session_id, t.seq) for t in stored).values()) == 1  # 0 dup
        finally:
            store.close()
    finally:
        qdrant.stop()


def test_the_partitioned_pipeline_on_a_redis_cluster_survives_kills_and_a_failover(
    tmp_path: Path, redis_cluster: RedisCluster, redis_url: str, start_worker: Any
) -> None:
    redis_cluster.wait_ok()
    redis_cluster.client().flushall()
    _run_pipeline(tmp_path, redis_cluster.url, redis_url, start_worker,
                  failover=redis_cluster.failover)
    # The data really is spread: every master holds some of the partitions' keys.
    sizes = {p: redis_cluster.node(p).dbsize() for p, role in redis_cluster.roles().items()
             if role == "master"}
    assert all(n > 0 for n in sizes.values()), sizes


def test_the_same_pipeline_on_one_redis_with_partitions(
    tmp_path: Path, redis_url: str, start_worker: Any
) -> None:
    # rq shares the server (another database would do as well).
    _run_pipeline(tmp_path, redis_url, redis_url, start_worker)


def test_the_same_pipeline_in_embedded_mode(tmp_path: Path) -> None:
    """Embedded mode: the stage workers are threads that divide the partitions by lease (two
    embed threads here), the dispatcher thread enqueues one reflect job per episode."""
    from hivemem.providers.embedders import HashingEmbedder
    from tests.integration.integration_support import conversation

    settings = Settings.model_validate({
        "redis": {"partitions": PARTITIONS}, "embedding": {"provider": "hashing", "dim": DIM},
        "episodes": {"max_turns": 6}})
    turns = conversation(SESSIONS, PER_SESSION)
    with MemoryClient.local(tmp_path / "memory", settings, embedder=HashingEmbedder(DIM),
                            workers=2) as client:
        for start in range(0, len(turns), 6):
            client.ingest_many(turns[start:start + 6])
        for sid in SESSIONS:
            client.close_session(sid)
        for sid in SESSIONS:
            client.wait_until_processed(sid, timeout=120)
            client.wait_until_reflected(sid, timeout=120)
        for sid in SESSIONS:
            eps = client.episodes(sid)
            assert [e.index for e in eps] == list(range(1, len(eps) + 1)), sid
            assert [t for e in eps for t in e.turn_ids] == [
                f"{sid}-t{i}" for i in range(PER_SESSION)], sid
        runtime = client._runtime
        assert runtime is not None
        stored = list(runtime.vectors.iter_turns())
        assert len(stored) == len(turns)
        assert max(Counter((t.session_id, t.seq) for t in stored).values()) == 1


def test_a_wrong_kind_of_url_is_a_configuration_error_not_an_outage(
    redis_cluster: RedisCluster, redis_url: str
) -> None:
    from hivemem.config import RedisSettings
    from hivemem.errors import ConfigurationError
    from hivemem.store.redis_connect import connect_rq

    redis_cluster.wait_ok()
    port = redis_cluster.ports[0]
    with pytest.raises(ConfigurationError, match="is a Redis Cluster node"):
        connect(RedisSettings(url=f"redis://127.0.0.1:{port}/0"))
    with pytest.raises(ConfigurationError, match="not a usable cluster"):
        connect(RedisSettings(url=redis_url, mode="cluster"))
    with pytest.raises(ConfigurationError, match="host:port"):
        connect(RedisSettings(url="redis+cluster://nohostport"))
    cluster = connect(RedisSettings(url=redis_cluster.url))
    with pytest.raises(ConfigurationError, match="rq_url"):
        connect_rq(RedisSettings(url=redis_cluster.url), cluster)
    # MOVED is followed by the cluster client: every partition's key, wherever it lives.
    for p in range(16):
        cluster.set(f"hm:{{p{p}}}:probe", p)
        assert int(cluster.get(f"hm:{{p{p}}}:probe")) == p
    cluster.close()


def test_stage_activity_reads_a_redis_cluster(redis_cluster: RedisCluster) -> None:
    # A cluster pipeline refuses TIME: the window stage's look at the embed stage (its
    # `ready`) failed there with a ConfigurationError whenever it ran.
    from hivemem.config import RedisSettings
    from hivemem.pipeline.topology import Topology
    from hivemem.store.status import stage_activity

    redis_cluster.wait_ok()
    cluster = connect(RedisSettings(url=redis_cluster.url))
    try:
        embed = Topology(Keys("act", partitions=4)).embed
        before = stage_activity(cluster, embed)
        assert before.backlog == 0 and before.idle_ms is None
        for stream in embed.streams():
            cluster.xgroup_create(stream, embed.group, id="0", mkstream=True)
        cluster.xadd(embed.streams()[1], {"k": "v"})
        assert stage_activity(cluster, embed).backlog == 1
        cluster.xreadgroup(embed.group, "c", {embed.streams()[1]: ">"}, count=1)
        after = stage_activity(cluster, embed)
        assert after.backlog == 1  # delivered, not acked
        assert after.idle_ms is not None and 0 <= after.idle_ms < 60_000
    finally:
        cluster.close()


def test_recall_reads_window_and_progress_in_one_pipeline_on_a_redis_cluster(
    redis_cluster: RedisCluster,
) -> None:
    # The window's keys and the boundary state share the session's slot: one cluster
    # pipeline reads both (recall does, every call).
    from datetime import UTC, datetime

    from hivemem.config import IngestSettings, RedisSettings
    from hivemem.domain.turn import TurnDraft
    from hivemem.store.episodes import EpisodeStore
    from hivemem.store.state import TurnLog

    redis_cluster.wait_ok()
    cluster = connect(RedisSettings(url=redis_cluster.url))
    try:
        keys = Keys("together", partitions=4)
        state = TurnLog(cluster, keys, recent_window=5)
        episodes = EpisodeStore(cluster, keys, 10_000)
        for i in range(1, 4):
            state.append_turn(TurnDraft("s", "user", f"turn {i}", settings=IngestSettings(),
                                        turn_id=f"t{i}", timestamp=datetime.now(UTC)))
        cluster.hset(keys.boundary_state("s"), mapping={"next_seq": 3, "closed_count": 1})
        turns, progress = state.recent_turns_and_progress(episodes, "s", 10)
        assert [t.seq for t in turns] == [3, 2, 1]
        assert progress == (2, 1, None, {})
    finally:
        cluster.close()


def test_admin_job_operations_use_rqs_own_redis_on_a_cluster(
    redis_cluster: RedisCluster, redis_url: str, real_redis: redis.Redis,
) -> None:
    """rq cannot run on a cluster (`redis.rq_url` names its own server): replaying a
    reflection, scheduling a compaction, the pipeline status and the API's job gauges all
    read and write rq's keys there, and none lands in the cluster."""
    from datetime import UTC, datetime

    from fastapi.testclient import TestClient
    from rq import Queue
    from rq.registry import ScheduledJobRegistry

    from hivemem.api.app import create_app
    from hivemem.domain.episode import Episode
    from hivemem.providers.embedders import HashingEmbedder
    from hivemem.store.sessions import SessionStore

    redis_cluster.wait_ok()
    settings = Settings.model_validate({
        "embedding": {"provider": "hashing", "dim": DIM},
        "redis": {"url": redis_cluster.url, "partitions": 4, "rq_url": redis_url,
                  "key_prefix": "jobs"},
        "episodes": {"reflect_queue": "reflect-jobs"},
    })
    queue_name = settings.episodes.reflect_queue
    vectors = ServerVectorStore(settings.qdrant, DIM, location=":memory:")
    cluster = connect(settings.redis)

    def rq_keys_in_the_cluster() -> list[bytes]:
        return [k for port in redis_cluster.live_ports()
                for k in redis_cluster.node(port).keys("rq:*")]

    try:
        with MemoryClient(settings, vector_store=vectors, embedder=HashingEmbedder(DIM)) as client:
            now = datetime.now(UTC)
            client.ingest("jobs-s1", "user", "We decided to use PostgreSQL", timestamp=now)
            SessionStore(cluster, client.keys).add_episodes("jobs-s1", [Episode(
                episode_id="ep-jobs-1", session_id="jobs-s1", index=1, turn_ids=("t1",),
                seq_start=1, seq_end=1, started_at=now, ended_at=now, close_reason="manual")])

            replayed = client.admin.replay_reflection("jobs-s1")
            compaction = client.admin.schedule_compaction("jobs-s1")
            later = client.admin.schedule_compaction("jobs-s1", delay_s=3600)

            rq = Queue(queue_name, connection=real_redis)
            assert set(rq.job_ids) == {*replayed, compaction} and len(replayed) == 1
            assert later in ScheduledJobRegistry(queue=rq).get_job_ids()
            status = client.admin.pipeline_status()
            assert status.reflect_queue == queue_name
            assert (status.reflect_jobs["queued"], status.reflect_jobs["scheduled"]) == (2, 1)
            assert [s.stage for s in status.stages] == ["embed", "boundary"]
            assert status.stages[0].length == 1  # the turn, on the cluster's stream

            with TestClient(create_app(settings, client=client)) as api:
                exposition = api.get("/metrics").text
            assert 'hivemem_reflect_jobs{state="queued"} 2.0' in exposition
            assert 'hivemem_reflect_jobs{state="scheduled"} 1.0' in exposition
            assert "hivemem_redis_up 1.0" in exposition
            assert rq_keys_in_the_cluster() == []
            assert real_redis.keys("rq:*")  # where they are instead
    finally:
        cluster.close()
