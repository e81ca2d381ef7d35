"""Worker processes sharing one networked Qdrant: the REST stand-in in its own process
(qdrant-edge behind Qdrant's HTTP API), 2 embed + 1 boundary + 1 reflect worker processes
and two producers on a real redis-server. With the embedded folder only one process could
open the store; here every stage runs beside the others, and every turn lands in Qdrant
exactly once."""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis
from integration_support import KEYS, conversation, worker_env

from hivemem.config import Settings
from hivemem.producer.client import MemoryClient
from hivemem.store.episodes import EpisodeStore
from hivemem.store.reflection import ReflectionState
from hivemem.store.vectors.server import ServerVectorStore
from tests.support.qdrant_standin import spawn

pytestmark = pytest.mark.integration

DIM = 64
SESSIONS = [f"shared-s{i}" for i in range(6)]
PER_SESSION = 30
WORKERS = [sys.executable, "-m", "hivemem.workers"]


def _wait_for(what: str, done: Any, workers: list[Any], timeout_s: float = 150) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        for w in workers:
            assert w.process.poll() is None, f"a worker exited:\n{w.output()[-3000:]}"
        if time.monotonic() > deadline:
            logs = "\n".join(w.output()[-1500:] for w in workers)
            pytest.fail(f"{what} did not happen in {timeout_s}s\n{logs}")
        time.sleep(0.1)


def test_two_embed_workers_and_a_reflect_worker_share_one_qdrant_server(
    tmp_path: Path, redis_url: str, real_redis: redis.Redis, start_worker: Any
) -> None:
    qdrant = spawn(tmp_path / "qdrant")
    try:
        env = worker_env(redis_url, None, extra={
            "HIVEMEM_QDRANT__URL": qdrant.url,
            "HIVEMEM_QDRANT__TIMEOUT": "5.5",
            "HIVEMEM_WORKER__BATCH_SIZE": "8",
            "HIVEMEM_WORKER__CLAIM_IDLE_MS": "1000",
            "HIVEMEM_EPISODES__MAX_TURNS": "6",
        })
        workers = [start_worker(env, "embed", "--name", f"embed-{i}", command=WORKERS)
                   for i in (1, 2)]
        workers.append(start_worker(env, "boundary", "--name", "boundary-1", command=WORKERS))
        workers.append(start_worker(env, "reflect", "--name", "reflect-1", command=WORKERS))
        embed = workers[:2]
        _wait_for("both embed workers started",
                  lambda: all(w.events("worker.started") for w in embed), workers)

        settings = Settings.model_validate({
            "redis": {"url": redis_url, "partitions": 1},
            "embedding": {"provider": "hashing", "dim": DIM},
            "qdrant": {"url": qdrant.url}})
        turns = conversation(SESSIONS, PER_SESSION)
        with MemoryClient(settings) as producer_a, MemoryClient(settings) as producer_b:

            def produce(producer: MemoryClient, mine: set[str]) -> None:
                batch = [t for t in turns if t["session_id"] in mine]
                for start in range(0, len(batch), 6):
                    producer.ingest_many(batch[start : start + 6])
                    time.sleep(0.02)
                for sid in sorted(mine):
                    producer.close_session(sid)

            producers = [
                threading.Thread(target=produce, args=(producer_a, set(SESSIONS[:3]))),
                threading.Thread(target=produce, args=(producer_b, set(SESSIONS[3:]))),
            ]
            for t in producers:
                t.start()
            for t in producers:
                t.join()

            episodes = EpisodeStore(real_redis, KEYS, 1000)
            reflection = ReflectionState(real_redis, KEYS)

            def settled() -> bool:
                for sid in SESSIONS:
                    stats = producer_a.get_session_stats(sid)
                    if (stats.turns_processed, stats.turns_assigned) != (
                        PER_SESSION, PER_SESSION + 1
                    ):
                        return False
                    if reflection.reflected(sid) != len(episodes.episodes(sid)):
                        return False
                return True

            _wait_for("every turn embedded and every episode reflected", settled, workers)
            recalled = producer_b.recall(SESSIONS[0], "a retry policy with exponential backoff")
            assert len(recalled) > 0, "a recall through the shared store finds the turns"
            for sid in SESSIONS:
                stats = producer_a.get_session_stats(sid)
                assert stats.turns_dead_lettered == 0, stats

        for w in workers:
            w.signal(signal.SIGTERM)
        for w in workers:
            assert w.wait(timeout=60) == 0, w.output()[-3000:]
        handled = [w.summary()["handled"] for w in embed]
        assert sum(handled) >= len(turns)
        assert all(n > 0 for n in handled), f"one embed worker did all the work: {handled}"
        for w in workers:
            assert "open in another process" not in w.output()

        store = ServerVectorStore(settings.qdrant, DIM)
        try:
            stored = list(store.iter_turns())
            assert len(stored) == len(turns)
            assert max(Counter((t.session_id, t.seq) for t in stored).values()) == 1
            for sid in SESSIONS:
                mine = sorted((t for t in stored if t.session_id == sid), key=lambda t: t.seq)
                assert [t.turn_id for t in mine] == [f"{sid}-t{i}" for i in range(PER_SESSION)]
                assert store.list_facts(sid), f"{sid}: the reflect worker wrote no facts"
        finally:
            store.close()
    finally:
        qdrant.stop()
