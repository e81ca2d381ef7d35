"""kill -9 of an embed worker in the middle of a run loses nothing and duplicates nothing.

A first worker (the real fastembed model, so a batch takes over a second and the kill lands
while entries are in its hands) is SIGKILLed once it has acked some turns and holds others
pending. A second worker in burst mode must reclaim the orphans (XAUTOCLAIM after
``claim_idle_ms``) and finish the queue. Then Qdrant must hold every turn exactly once.

The second worker uses the hashing embedder at the model's 384 dimensions: what is under test
is delivery (reclaim, ack, idempotent upserts), and the real model on thousands of turns costs
30-60 s on a busy 2-core machine. The e2e tests check the model's recall.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis
from integration_support import (
    GROUP,
    KEYS,
    STREAM,
    conversation,
    pending_count,
    processed_count,
    require_model,
    server_settings,
    worker_env,
)

from hivemem.producer.client import MemoryClient
from hivemem.store.state import TurnLog
from hivemem.store.vectors.edge import EdgeVectorStore

pytestmark = [pytest.mark.integration, pytest.mark.model]

SESSIONS = [f"kill-s{i}" for i in range(6)]
PER_SESSION = 500  # 3000 turns
# Big batches: ~190 turns/s with the fp32 model here (sorting by length pays off), ~1.3 s each.
BATCH = "256"
MODEL_DIM = 384


def test_sigkill_mid_batch_then_reclaim_embeds_every_turn_exactly_once(
    tmp_path: Path, redis_url: str, real_redis: redis.Redis, start_worker
) -> None:
    require_model()
    qdrant_path = tmp_path / "qdrant"
    n = len(SESSIONS) * PER_SESSION

    with MemoryClient(server_settings(redis_url)) as producer:
        turns = conversation(SESSIONS, PER_SESSION)
        for start in range(0, n, 500):
            results = producer.ingest_many(turns[start : start + 500])
            assert not any(r.duplicate for r in results)
    assert real_redis.xlen(STREAM) == n

    # The doomed worker's partition lease lives claim_idle_ms (default 30 s): the rescuer
    # takes the partition over only once it expires. 3 s (the keepalive renews it and the
    # batch in hand every second) instead of waiting 30 s for a dead worker's lease.
    env = worker_env(
        redis_url, qdrant_path, provider="fastembed",
        extra={"HIVEMEM_WORKER__BATCH_SIZE": BATCH, "HIVEMEM_WORKER__CLAIM_IDLE_MS": "3000"},
    )
    first = start_worker(env, "--name", "doomed")

    def mid_run() -> bool:
        assert first.process.poll() is None, f"worker exited early:\n{first.output()}"
        done = processed_count(real_redis, SESSIONS)
        return 0 < done < n // 2 and pending_count(real_redis) > 0

    # Freeze the worker (SIGSTOP) before judging: between a check and a kill it can ack its
    # batch and hold nothing, and then the kill would test nothing. Kill only a frozen worker
    # that holds pending entries; otherwise let it run on and look again.
    deadline = time.monotonic() + 45
    while True:
        assert time.monotonic() < deadline, f"worker made no progress:\n{first.output()}"
        if mid_run():
            first.signal(signal.SIGSTOP)
            _wait_stopped(first.process.pid)
            if pending_count(real_redis) > 0 and processed_count(real_redis, SESSIONS) < n // 2:
                break
            first.signal(signal.SIGCONT)
        time.sleep(0.005)
    first.signal(signal.SIGKILL)
    assert first.process.wait(timeout=10) == -signal.SIGKILL

    # What the dead worker left behind (frozen now that it is gone).
    done_at_kill = processed_count(real_redis, SESSIONS)
    orphans = real_redis.xpending_range(STREAM, GROUP, min="-", max="+", count=n)
    assert orphans, "the kill did not land while entries were pending"
    assert {row["consumer"] for row in orphans} == {b"doomed"}
    assert 0 < done_at_kill < n

    second = start_worker(
        worker_env(
            redis_url, qdrant_path, provider="hashing",
            extra={"HIVEMEM_EMBEDDING__DIM": str(MODEL_DIM), "HIVEMEM_WORKER__BATCH_SIZE": BATCH,
                   "HIVEMEM_WORKER__CLAIM_IDLE_MS": "500",
                   "HIVEMEM_WORKER__CLAIM_INTERVAL_S": "0.2"},
        ),
        "--burst", "--name", "rescuer",
    )
    assert second.wait(timeout=60) == 0, second.output()

    # The second worker took over exactly the orphans.
    summary = second.summary()
    assert summary["reclaimed"] == len(orphans), second.output()
    assert summary["dead_lettered"] == 0
    reclaimed_logged = sum(e["count"] for e in second.events("worker.reclaimed"))
    assert reclaimed_logged == len(orphans)

    # Redis: nothing pending, nothing undelivered, nothing dead, every seq marked processed.
    assert pending_count(real_redis) == 0
    assert real_redis.xlen(KEYS.dead_letters(STREAM)) == 0
    groups = {g["name"]: g for g in real_redis.xinfo_groups(STREAM)}
    assert groups[b"embed"]["lag"] == 0
    state = TurnLog(real_redis, KEYS, recent_window=50)
    for sid in SESSIONS:
        last, done, dead = state.progress(sid)
        assert (last, done, dead) == (PER_SESSION, PER_SESSION, 0), sid

    _assert_qdrant_holds_each_turn_once(qdrant_path, turns)


def _wait_stopped(pid: int) -> None:
    """SIGSTOP is delivered asynchronously: wait until the kernel reports the process stopped."""
    stat = Path(f"/proc/{pid}/stat")
    deadline = time.monotonic() + 5
    while stat.read_text().rsplit(")", 1)[1].split()[0] not in {"T", "t"}:
        assert time.monotonic() < deadline, "the worker did not stop"
        time.sleep(0.001)


def _assert_qdrant_holds_each_turn_once(qdrant_path: Path, turns: list[dict[str, Any]]) -> None:
    """Every turn exactly once, with the seq the producer gave it."""
    store = EdgeVectorStore(qdrant_path, MODEL_DIM)
    try:
        stored = list(store.iter_turns())
        assert store.count_turns() == len(turns)
        keys = [(t.session_id, t.seq) for t in stored]
        duplicates = [k for k, c in Counter(keys).items() if c > 1]
        assert not duplicates
        expected = {(sid, seq) for sid in SESSIONS for seq in range(1, PER_SESSION + 1)}
        assert set(keys) == expected
        assert {(t.session_id, t.turn_id) for t in stored} == {
            (t["session_id"], t["turn_id"]) for t in turns
        }
        for sid in SESSIONS:
            assert store.count_turns(sid) == PER_SESSION
    finally:
        store.close()
