"""Store faults on a real redis-server: Qdrant down for a while, poison entries and their
replay from the dead-letter stream.

CI sizes by default; ``HIVEMEM_SOAK=1`` runs the issue's sizes (a 30 s Qdrant outage).
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner
from integration_support import GROUP, KEYS, STREAM, conversation, pending_count, processed_count

from hivemem.cli.main import cli
from hivemem.config import Settings
from hivemem.producer.client import MemoryClient
from hivemem.providers.embedders import HashingEmbedder
from hivemem.store.state import TurnLog
from hivemem.store.streams import StreamStore
from hivemem.store.vectors.edge import EdgeVectorStore
from hivemem.workers.embed import EmbedHandler, embed_kind
from hivemem.workers.stream import StreamWorker
from tests.support.faults import FlakyVectors

pytestmark = pytest.mark.integration

SOAK = os.environ.get("HIVEMEM_SOAK") == "1"
DIM = 64


def _settings(redis_url: str, **worker: object) -> Settings:
    return Settings.model_validate({
        "redis": {"url": redis_url, "partitions": 1},
        "embedding": {"provider": "hashing", "dim": DIM},
        "worker": {"block_ms": 50, "claim_idle_ms": 60_000, "claim_interval_s": 0.1,
                   "max_deliveries": 3, "batch_size": 64, **worker},
    })


def _embed_worker(
    conn: redis.Redis, vectors: FlakyVectors, settings: Settings
) -> StreamWorker[object]:
    state = TurnLog(conn, KEYS, settings.ingest.recent_window)
    handler = EmbedHandler(HashingEmbedder(DIM), vectors, state, StreamStore(conn, KEYS), KEYS)
    return StreamWorker(embed_kind(handler), StreamStore(conn, KEYS), settings.worker)  # type: ignore[arg-type]


def test_qdrant_outage_backs_off_acks_nothing_unwritten_then_catches_up(
    tmp_path: Path, redis_url: str, real_redis: redis.Redis
) -> None:
    outage_s = 30.0 if SOAK else 3.0
    backoff_max = 2.0 if SOAK else 0.5
    settings = _settings(redis_url, backoff_initial_s=0.05, backoff_max_s=backoff_max)
    sessions = [f"qd-s{i}" for i in range(10 if SOAK else 4)]
    per_session = 100 if SOAK else 50
    turns = conversation(sessions, per_session)
    n = len(turns)
    vectors = FlakyVectors(EdgeVectorStore(tmp_path / "qdrant", DIM))
    worker = _embed_worker(real_redis, vectors, settings)
    with MemoryClient(settings) as producer:
        producer.ingest_many(turns[: n // 2])
        vectors.down(outage_s)
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        # Turns keep arriving during the outage: ingest does not depend on Qdrant.
        producer.ingest_many(turns[n // 2 :])
        while vectors.is_down:
            # Nothing is acknowledged, nothing marked processed, nothing dead while it is down.
            assert processed_count(real_redis, sessions) == 0
            assert real_redis.xlen(KEYS.dead_letters(STREAM)) == 0
            groups = {g["name"]: g for g in real_redis.xinfo_groups(STREAM)}
            if b"embed" in groups:
                delivered = n - int(groups[b"embed"]["lag"] or 0)
                assert int(groups[b"embed"]["pending"]) == delivered
            time.sleep(0.1)
        failed_during_outage = vectors.failed_calls
        deadline = time.monotonic() + 60
        while processed_count(real_redis, sessions) < n:
            assert time.monotonic() < deadline, "the worker did not catch up"
            time.sleep(0.05)
        worker.stop()
        thread.join(timeout=10)
    # Backed off, did not spin: exponential from 50 ms to `backoff_max`.
    assert failed_during_outage >= 3
    assert failed_during_outage <= outage_s / backoff_max + 8, failed_during_outage
    gaps = [b - a for a, b in zip(vectors.failed_at, vectors.failed_at[1:], strict=False)]
    assert max(gaps) >= backoff_max * 0.9
    assert pending_count(real_redis) == 0
    assert real_redis.xlen(KEYS.dead_letters(STREAM)) == 0
    assert worker.report.dead_lettered == 0
    inner = vectors.inner
    stored = list(inner.iter_turns())
    assert len(stored) == n
    assert not [k for k, c in Counter((t.session_id, t.seq) for t in stored).items() if c > 1]
    inner.close()


def test_poison_entry_dead_letters_rest_flows_and_dlq_replay_recovers_it(
    tmp_path: Path, redis_url: str, real_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = _settings(redis_url, claim_idle_ms=200, backoff_initial_s=0.01,
                         backoff_max_s=0.05)
    sessions = ["poison-a", "poison-b"]
    turns = conversation(sessions, 30)
    vectors = FlakyVectors(EdgeVectorStore(tmp_path / "qdrant", DIM))
    # A handler bug hits one turn every time: its batch falls back to one by one.
    vectors.refuse_point = lambda p: p.payload.get("turn_id") == "poison-a-t7"
    with MemoryClient(settings) as client:
        client.ingest_many(turns)
        garbage = real_redis.xadd(STREAM, {"seq": "x", "turn": "{not json"}).decode()
        worker = _embed_worker(real_redis, vectors, settings)
        worker.run(burst=True)
        letters = {d.entry_id: d for d in client.admin.dead_letters()}
        assert len(letters) == 2 and garbage in letters
        bad = next(d for d in letters.values() if d.entry_id != garbage)
        assert "injected: this payload is refused" in bad.error
        assert bad.deliveries == settings.worker.max_deliveries
        stats = client.get_session_stats("poison-a")
        assert (stats.turns_processed, stats.turns_dead_lettered) == (29, 1)
        assert client.get_session_stats("poison-b").turns_processed == 30

        # The bug is fixed: replay the turn through the CLI (only that entry).
        vectors.refuse_point = None
        monkeypatch.setenv("HIVEMEM_REDIS__URL", redis_url)
        monkeypatch.setenv("HIVEMEM_REDIS__PARTITIONS", "1")  # what this deployment runs
        result = CliRunner().invoke(cli, ["dlq", "replay", bad.entry_id])
        assert result.exit_code == 0, result.output
        assert bad.entry_id in result.output
        assert [d.entry_id for d in client.admin.dead_letters()] == [garbage]
        _embed_worker(real_redis, vectors, settings).run(burst=True)
        stats = client.get_session_stats("poison-a")
        assert (stats.turns_processed, stats.turns_dead_lettered) == (30, 0)
        assert vectors.inner.count_turns("poison-a") == 30

        # Replaying the undecodable one just dead-letters it again, with its error.
        assert client.admin.replay_dead_letters() == [garbage]
        _embed_worker(real_redis, vectors, settings).run(burst=True)
        again = client.admin.dead_letters()
        assert len(again) == 1 and again[0].error.startswith("undecodable")
        assert again[0].fields == {"seq": "x", "turn": "{not json"}
    assert pending_count(real_redis) == 0
    assert real_redis.hlen(KEYS.delivery_errors(STREAM, GROUP)) == 0
    vectors.close()


def test_backpressure_bounds_the_backlog_under_a_slow_worker(
    tmp_path: Path, redis_url: str, real_redis: redis.Redis
) -> None:
    """Producers faster than the embed worker: with `block`, ingest waits, the backlog stays
    within `max_backlog` (+ one check interval), and every turn still arrives once."""
    limit, every = 200, 16
    settings = _settings(redis_url, batch_size=32).model_copy(update={
        "ingest": Settings().ingest.model_copy(update={
            "max_backlog": limit, "backpressure": "block", "block_timeout_s": 30.0,
            "backlog_check_every": every, "backlog_check_interval_s": 1.0})})
    vectors = FlakyVectors(EdgeVectorStore(tmp_path / "qdrant", DIM))
    slow_upsert = vectors.upsert

    def upsert(collection: str, points: object) -> None:
        time.sleep(0.05)  # ~600 turns/s at most: slower than the producer
        slow_upsert(collection, points)  # type: ignore[arg-type]

    vectors.upsert = upsert  # type: ignore[method-assign]
    worker = _embed_worker(real_redis, vectors, settings)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    sessions = [f"bp-s{i}" for i in range(4)]
    turns = conversation(sessions, 250)
    peak = 0
    with MemoryClient(settings) as producer:
        for i, turn in enumerate(turns):
            producer.ingest(**turn)
            if i % 25 == 0:
                peak = max(peak, producer._wiring.guard.backlog())
        deadline = time.monotonic() + 60
        while processed_count(real_redis, sessions) < len(turns):
            assert time.monotonic() < deadline
            time.sleep(0.05)
    worker.stop()
    thread.join(timeout=10)
    assert limit // 2 < peak <= limit + every, peak
    stored = list(vectors.inner.iter_turns())
    assert len(stored) == len(turns)
    vectors.close()
