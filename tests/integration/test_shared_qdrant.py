"""Worker processes sharing one networked Qdrant: the REST stand-in in its own process
(qdrant-edge behind Qdrant's HTTP API), 2 embed + 1 boundary + 1 reflect worker processes
and two producers on a real redis-server. With the embedded folder only one process could
open the store; here every stage runs beside the others. From the first write Qdrant has an outage
(5xx on writes: the workers back off, nothing is lost) and refuses one turn for good (a 400:
that turn alone is dead-lettered with Qdrant's reason). Every other turn lands in Qdrant
exactly once, and every episode is reflected."""

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
from integration_support import conversation, worker_env

from hivemem.config import Settings
from hivemem.pipeline.topology import Keys
from hivemem.producer.client import MemoryClient
from hivemem.store.episodes import EpisodeStore
from hivemem.store.reflection import ReflectionState
from hivemem.store.vectors.server import ServerVectorStore
from tests.support.qdrant_standin import Fault, spawn

pytestmark = pytest.mark.integration

DIM = 64
SESSIONS = [f"shared-s{i}" for i in range(6)]
PER_SESSION = 30
WORKERS = [sys.executable, "-m", "hivemem.workers"]
REFUSED = "this turn is one Qdrant refuses"
# Two embed workers split the partitions by lease (partition p to member p mod 2); with 4
# partitions these six sessions fall in 0, 1, 2, 3, 1, 3, so each worker owns some of them.
PARTITIONS = 4
KEYS = Keys("hm", PARTITIONS)


def _wait_for(what: str, done: Any, workers: list[Any], timeout_s: float = 150) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        for w in workers:
            assert w.process.poll() is None, f"a worker exited:\n{w.output()[-3000:]}"
        if time.monotonic() > deadline:
            logs = "\n".join(w.output()[-1500:] for w in workers)
            pytest.fail(f"{what} did not happen in {timeout_s}s\n{logs}")
        time.sleep(0.1)


def _produce(producers: list[MemoryClient], turns: list[dict[str, Any]], qdrant: Any) -> None:
    """Each producer ingests half of the sessions, in small chunks, then closes them. An
    outage (the first 12 writes of turns get a 503) is set before they start: on a quiet
    machine the workers embed all 180 turns in well under a second, so an outage set
    "mid-load" by the clock could come after the last write and never be seen."""

    def produce(producer: MemoryClient, mine: list[str]) -> None:
        batch = [t for t in turns if t["session_id"] in mine]
        for start in range(0, len(batch), 6):
            producer.ingest_many(batch[start : start + 6])
            time.sleep(0.02)
        for sid in mine:
            producer.close_session(sid)

    half = len(SESSIONS) // 2
    threads = [threading.Thread(target=produce, args=(p, mine))
               for p, mine in zip(producers, (SESSIONS[:half], SESSIONS[half:]), strict=True)]
    qdrant.add_fault(Fault("PUT", r"hivemem_turns/points$", status=503, count=12))
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _settled(producer: MemoryClient, real_redis: redis.Redis) -> bool:
    """Every turn embedded (or dead), every seq assigned, every closed episode reflected."""
    episodes = EpisodeStore(real_redis, KEYS, 1000)
    reflection = ReflectionState(real_redis, KEYS)
    for sid in SESSIONS:
        stats = producer.get_session_stats(sid)
        processed = stats.turns_processed + stats.turns_dead_lettered
        if (processed, stats.turns_assigned) != (PER_SESSION, PER_SESSION + 1):
            return False
        if reflection.reflected(sid) != len(episodes.episodes(sid)):
            return False
    return True


def _stop(workers: list[Any], total: int) -> None:
    """SIGTERM all; both embed workers took work and waited the outage out."""
    for w in workers:
        w.signal(signal.SIGTERM)
    for w in workers:
        assert w.wait(timeout=60) == 0, w.output()[-3000:]
        assert "open in another process" not in w.output()
    embed = workers[:2]
    handled = [w.summary()["handled"] for w in embed]
    assert sum(handled) >= total
    assert all(n > 0 for n in handled), f"one embed worker did all the work: {handled}"
    backoffs = sum(len(w.events("worker.backoff")) for w in embed)
    assert backoffs >= 1, "the 503s were seen (and waited out) by the embed workers"


def _check_store(settings: Settings, turns: list[dict[str, Any]], refused: str) -> None:
    """Each turn once, in its session's order, but the refused one; facts for every session."""
    store = ServerVectorStore(settings.qdrant, DIM)
    try:
        stored = list(store.iter_turns())
        assert len(stored) == len(turns) - 1
        assert max(Counter((t.session_id, t.seq) for t in stored).values()) == 1
        for sid in SESSIONS:
            mine = sorted((t for t in stored if t.session_id == sid), key=lambda t: t.seq)
            expected = [f"{sid}-t{i}" for i in range(PER_SESSION)]
            assert [t.turn_id for t in mine] == [e for e in expected if e != refused]
            assert store.list_facts(sid), f"{sid}: the reflect worker wrote no facts"
    finally:
        store.close()


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
            # The outage's twelve 503s are waited out at up to 0.5 s a try (~5 s), not at
            # the default 10 s cap (~70 s): the back-off is still seen and waited out.
            "HIVEMEM_WORKER__BACKOFF_MAX_S": "0.5",
            "HIVEMEM_EPISODES__MAX_TURNS": "6",
            "HIVEMEM_REDIS__PARTITIONS": str(PARTITIONS),
        })
        workers = [start_worker(env, kind, "--name", name, command=WORKERS) for kind, name in
                   (("embed", "embed-1"), ("embed", "embed-2"), ("boundary", "boundary-1"),
                    ("reflect", "reflect-1"))]
        _wait_for("both embed workers started",
                  lambda: all(w.events("worker.started") for w in workers[:2]), workers)

        settings = Settings.model_validate({
            "redis": {"url": redis_url, "partitions": PARTITIONS},
            "embedding": {"provider": "hashing", "dim": DIM},
            "qdrant": {"url": qdrant.url}})
        turns = conversation(SESSIONS, PER_SESSION)
        refused = next(t for t in turns if t["turn_id"] == f"{SESSIONS[4]}-t17")
        refused["content"] = REFUSED
        qdrant.add_fault(Fault("PUT", r"/points$", status=400, count=1000, body_contains=REFUSED,
                               message="Format error in JSON body: recursion limit exceeded"))
        with MemoryClient(settings) as producer_a, MemoryClient(settings) as producer_b:
            _produce([producer_a, producer_b], turns, qdrant)
            _wait_for("every turn embedded and every episode reflected",
                      lambda: _settled(producer_a, real_redis), workers)
            recalled = producer_b.recall(SESSIONS[0], "a retry policy with exponential backoff")
            assert len(recalled) > 0, "a recall through the shared store finds the turns"
            for sid in SESSIONS:
                stats = producer_a.get_session_stats(sid)
                assert stats.turns_dead_lettered == (sid == SESSIONS[4]), stats
            [letter] = producer_a.admin.dead_letters()
            assert letter.deliveries == 1 and "recursion limit exceeded" in letter.error
            assert sum(real_redis.xlen(KEYS.dead_letters(KEYS.embedded_stream(p)))
                       for p in range(PARTITIONS)) == 0
        _stop(workers, len(turns) - 1)
        _check_store(settings, turns, refused["turn_id"])
    finally:
        qdrant.stop()
