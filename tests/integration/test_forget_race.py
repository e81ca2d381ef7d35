"""A forget racing a busy pipeline: worker processes (embed, boundary, reflect) on a real
redis-server and the Qdrant REST stand-in are embedding and reflecting the very session
being forgotten, and the embed worker is SIGKILLed in the middle (a second one takes over).
Every turn was acknowledged by ingest before the forget began, so every one of them is in
flight somewhere: when the pipeline has settled, no Redis key and no Qdrant payload holds
the secret, and the bystander session is whole. (Which copy is in flight when the forget
lands is up to the machine's timing; `test_a_write_landing_between_the_passes_is_forgotten_too`
pins the second pass itself, and tests/unit/test_forget_mark.py a worker that writes only
after both passes: on a loaded machine the settle between them may give up on one.)"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from integration_support import server_settings, worker_env

from hivemem.pipeline.topology import Topology
from hivemem.producer.client import MemoryClient
from hivemem.store.streams import StreamStore
from tests.support.forget_data import new_secret, payloads_with, redis_keys_with
from tests.support.qdrant_standin import spawn

pytestmark = pytest.mark.integration

TURNS = 1200
WORKERS = [sys.executable, "-m", "hivemem.workers"]


def _settled(client: MemoryClient, session: str, n: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if client.get_session_stats(session).turns_processed >= n:
            return
        time.sleep(0.1)
    raise AssertionError(f"{session} not processed in {timeout}s")


def _drained(client: MemoryClient, real_redis: redis.Redis, timeout: float) -> None:
    """Until the embed and boundary stages have nothing left to read or to ack (the dead
    worker's entries reclaimed, the stragglers handled or dropped)."""
    streams = StreamStore(real_redis, client.keys)
    topology = Topology(client.keys)
    deadline = time.monotonic() + timeout
    while not all(streams.drained(stage.streams(), stage.group)
                  for stage in (topology.embed, topology.boundary)):
        assert time.monotonic() < deadline, "the pipeline never settled"
        time.sleep(0.1)


def test_forget_while_workers_embed_and_reflect_and_one_is_killed(
    tmp_path: Path, redis_url: str, real_redis: redis.Redis, start_worker: Any,
) -> None:
    secret = new_secret()
    standin = spawn(tmp_path / "qdrant")
    try:
        env = worker_env(redis_url, None, extra={
            "HIVEMEM_QDRANT__URL": standin.url, "HIVEMEM_EMBEDDING__BATCH_SIZE": "16",
            "HIVEMEM_EPISODES__MAX_TURNS": "8", "HIVEMEM_WORKER__CLAIM_IDLE_MS": "300"})
        settings = server_settings(redis_url).model_validate({
            **server_settings(redis_url).model_dump(mode="json"),
            "qdrant": {"url": standin.url},
            "lifecycle": {"forget_settle_s": 0.2, "forget_settle_timeout_s": 5.0}})
        with MemoryClient(settings) as client:
            client.ingest_many([{"session_id": "calm", "role": "user", "turn_id": f"c{i}",
                                 "content": f"We decided the calm step {i} ships"}
                                for i in range(40)])
            first = start_worker(env, "embed", command=WORKERS)
            start_worker(env, "boundary", command=WORKERS)
            start_worker(env, "reflect", command=WORKERS)
            _settled(client, "calm", 40, 60)
            for start in range(0, TURNS, 200):
                client.ingest_many([
                    {"session_id": "hot", "role": "user", "turn_id": f"h{i}",
                     "content": f"We decided step {i} uses the key {secret}"}
                    for i in range(start, start + 200)])
            # Mid-run: some turns embedded (and reflected), the rest in the first worker's
            # hands or still queued when it dies.
            deadline = time.monotonic() + 60
            while client.get_session_stats("hot").turns_processed < 100:
                assert time.monotonic() < deadline, "the embed worker never started"
                time.sleep(0.02)
            first.kill()
            start_worker(env, "embed", command=WORKERS)
            receipt = client.admin.forget("hot")
            assert receipt.removed["vectors"]["turns"] >= 100
            # Whatever was still moving finishes (or is dropped at the forget's mark) before
            # anything is judged: however long the machine takes to get there.
            # (A worker acks a batch after its last write for it.)
            _drained(client, real_redis, 60)
            assert not redis_keys_with(real_redis, secret)
            assert not payloads_with(client.vector_store(), secret)
            assert client.get_session_stats("calm").turns_processed == 40
            assert "hot" not in client.admin.sessions()
    finally:
        standin.stop()
