"""Redis restarts mid-load, on a redis-server of the test's own (AOF on).

- A restart (SHUTDOWN, then start on the same folder) while a producer ingests and an embed
  worker process consumes: the producer sees `StoreUnavailable` and retries with its turn
  ids; the worker backs off and resumes; every turn ends up in Qdrant exactly once.
- kill -9 with ``appendfsync always`` and `ingest(durable=True)`: every acknowledged turn is
  there after the restart. With ``everysec``, Redis write()s the AOF before it replies, so a
  killed server normally loses nothing (measured: 0 of 2000); what everysec risks is the last
  ~1 s (up to 2 s while a slow fsync postpones writes) on an OS crash or power loss, which a
  test cannot stage. The test measures the kill -9 loss and checks what is left is consistent.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from integration_support import KEYS, STREAM, conversation, processed_count, worker_env

from hivemem.config import Settings
from hivemem.errors import StoreUnavailable
from hivemem.producer.client import MemoryClient
from hivemem.store.vectors.edge import EdgeVectorStore
from hivemem.testing import RedisServer

pytestmark = pytest.mark.integration

SOAK = os.environ.get("HIVEMEM_SOAK") == "1"
DIM = 64


@pytest.fixture
def own_redis(tmp_path: Path):  # type: ignore[no-untyped-def]
    if not RedisServer.available():
        pytest.skip("redis-server is not installed")
    servers: list[RedisServer] = []

    def _make(appendfsync: str = "everysec") -> RedisServer:
        folder = tmp_path / f"redis-{len(servers)}"
        folder.mkdir()
        server = RedisServer(folder, appendfsync=appendfsync)
        server.start()
        servers.append(server)
        return server

    yield _make
    for server in servers:
        server.stop()


def _settings(url: str) -> Settings:
    return Settings.model_validate({
        "redis": {"url": url, "partitions": 1, "socket_timeout": 2, "connect_timeout": 0.5},
        "embedding": {"provider": "hashing", "dim": DIM},
    })


def _ingest_with_retries(
    producer: MemoryClient, turns: list[dict[str, object]], errors: list[str]
) -> None:
    """What a careful producer does: retry a failed ingest with the same turn id."""
    for turn in turns:
        while True:
            try:
                producer.ingest(**turn)  # type: ignore[arg-type]
                break
            except StoreUnavailable as exc:
                errors.append(str(exc))
                time.sleep(0.05)
        time.sleep(0.001)


def test_restart_mid_load_producers_retry_and_the_pipeline_resumes(
    tmp_path: Path, own_redis, start_worker  # type: ignore[no-untyped-def]
) -> None:
    server = own_redis()
    sessions = [f"rr-s{i}" for i in range(20 if SOAK else 5)]
    turns = conversation(sessions, 200 if SOAK else 60)
    n = len(turns)
    worker = start_worker(worker_env(server.url, tmp_path / "qdrant", extra={
        "HIVEMEM_WORKER__BACKOFF_INITIAL_S": "0.05", "HIVEMEM_WORKER__BACKOFF_MAX_S": "0.5",
        "HIVEMEM_WORKER__BATCH_SIZE": "32", "HIVEMEM_REDIS__CONNECT_TIMEOUT": "0.5",
    }))
    # A worker that cannot reach Redis at startup exits with a clear message (by design):
    # the restart must hit a running one.
    deadline = time.monotonic() + 60
    while not worker.events("worker.started"):
        assert worker.process.poll() is None and time.monotonic() < deadline, worker.output()
        time.sleep(0.05)
    errors: list[str] = []
    with MemoryClient(_settings(server.url)) as producer:
        thread = threading.Thread(target=_ingest_with_retries, args=(producer, turns, errors))
        thread.start()
        probe = server.client()
        while probe.xlen(STREAM) < n // 3:
            time.sleep(0.01)
        probe.close()
        server.stop()  # SHUTDOWN: the AOF is flushed
        # Down for longer than redis-py's own reconnect retries cover.
        time.sleep(3.0)
        server.start()
        thread.join(timeout=120)
        assert not thread.is_alive()
        assert errors and all("redis unavailable" in e for e in errors), errors[:3]
        client = server.client()
        deadline = time.monotonic() + 60
        while processed_count(client, sessions) < n:
            assert worker.process.poll() is None, worker.output()
            assert time.monotonic() < deadline, worker.output()[-3000:]
            time.sleep(0.05)
        for sid in sessions:
            stats = producer.get_session_stats(sid)
            assert (stats.turns_enqueued, stats.turns_processed) == (len(turns) // len(sessions),
                                                                      len(turns) // len(sessions))
        assert client.xlen(STREAM) == n  # retried turn ids were no-ops, not second copies
    assert worker.events("worker.backoff"), "the worker never saw Redis go away"
    worker.kill()
    store = EdgeVectorStore(tmp_path / "qdrant", DIM)
    try:
        stored = list(store.iter_turns())
        assert len(stored) == n
        assert not [k for k, c in Counter((t.session_id, t.seq) for t in stored).items() if c > 1]
        for sid in sessions:  # per-session order: seqs follow the producer's order
            mine = sorted((t for t in stored if t.session_id == sid), key=lambda t: t.seq)
            assert [int(t.turn_id.rsplit("-t", 1)[1]) for t in mine] == list(range(len(mine)))
    finally:
        store.close()


def test_durable_ingest_survives_kill9_and_everysec_loss_is_measured(own_redis) -> None:  # type: ignore[no-untyped-def]
    # Redis 7.0 here: no WAITAOF, so `durable=True` needs appendfsync always, and is refused
    # (before anything is written) on an everysec server.
    everysec = own_redis("everysec")
    with MemoryClient(_settings(everysec.url)) as producer:
        version = producer._redis.info("server")["redis_version"]
        if tuple(int(p) for p in version.split(".")[:2]) < (7, 2):
            with pytest.raises(StoreUnavailable, match=r"durable ingest needs Redis >= 7\.2"):
                producer.ingest("d", "user", "hello", durable=True)
            assert everysec.client().exists(STREAM) == 0
        # everysec: acknowledged turns written just before a kill -9.
        acked = 0
        for i in range(2000):
            producer.ingest("lossy", "user", f"turn {i}", turn_id=f"l{i}")
            acked += 1
    everysec.kill()
    everysec.start()
    client = everysec.client()
    kept = client.xlen(STREAM)
    lost_everysec = acked - kept
    # What survived is consistent: every id it remembers maps to a stream entry with its seq.
    # (The ids hash also holds the counter and the owner, under "#" names.)
    ids = {k.decode(): int(v) for k, v in client.hgetall(KEYS.session_turn_ids("lossy")).items()
           if not k.startswith(b"#")}
    assert int(client.hget(KEYS.session_turn_ids("lossy"), "#seq")) == kept
    assert len(ids) == kept and sorted(ids.values()) == list(range(1, kept + 1))
    client.close()

    always = own_redis("always")
    with MemoryClient(_settings(always.url)) as producer:
        for i in range(300):
            producer.ingest("durable", "user", f"turn {i}", turn_id=f"d{i}", durable=True)
    always.kill()
    always.start()
    client = always.client()
    assert client.xlen(STREAM) == 300  # nothing acknowledged was lost
    assert int(client.hget(KEYS.session_turn_ids("durable"), "#seq")) == 300
    client.close()
    print(f"\neverysec kill -9 right after 2000 fast ingests lost {lost_everysec} acknowledged"
          " turns; appendfsync always + durable=True lost 0 of 300")
    assert lost_everysec <= acked
