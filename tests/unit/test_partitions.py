"""Partitions: workers of a stage divide them through leases, rebalance when one joins,
leaves or dies; the embed stage's retry publishes nothing twice; cluster errors are
configuration errors, not outages. On fakeredis and on a real redis-server."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest
import redis

from hivemem.config import Settings
from hivemem.errors import ConfigurationError, StoreUnavailable
from hivemem.pipeline.topology import Keys, Topology
from hivemem.providers.embedders import HashingEmbedder
from hivemem.store.partitions import PartitionLeases, assignment
from hivemem.store.redis import redis_errors
from hivemem.store.state import TurnLog
from hivemem.store.streams import StreamEntry, StreamStore
from hivemem.workers.embed import EmbedHandler, decode_turn
from hivemem.workers.stream import StreamWorker, WorkerKind
from tests.support.streams import embedded_items_of, embedded_len

KEYS = Keys("hmpart", 8)


def test_assignment_is_exact_and_the_same_for_every_member() -> None:
    members = ["w-b", "w-a", "w-c"]
    owned = [assignment(members, 8, m) for m in members]
    assert sorted(p for ps in owned for p in ps) == list(range(8))
    assert max(len(ps) for ps in owned) - min(len(ps) for ps in owned) <= 1
    assert assignment(members, 8, "stranger") == []


def test_leases_rebalance_on_join_leave_and_death(redis_client: redis.Redis) -> None:
    ttl = 300
    a = PartitionLeases(redis_client, KEYS, "embed", "a", ttl)
    b = PartitionLeases(redis_client, KEYS, "embed", "b", ttl)
    assert a.refresh() == list(range(8))  # alone: everything
    # b joins: it gets nothing until a gives its share up at a's next refresh.
    assert b.refresh() == []
    assert a.refresh() == [0, 2, 4, 6]
    assert b.refresh() == [1, 3, 5, 7]
    assert set(a.holders().values()) == {"a", "b"}
    # b leaves cleanly: a takes over at once.
    b.leave()
    assert a.refresh() == list(range(8))
    # b comes back, then dies (stops refreshing): within the ttl a has it all again.
    b.refresh()
    a.refresh()
    assert b.refresh() == [1, 3, 5, 7]
    deadline = time.monotonic() + 5
    while a.refresh() != list(range(8)):
        assert time.monotonic() < deadline, "a dead worker's partitions never moved"
        time.sleep(ttl / 4000)
    holders = a.holders()
    assert set(holders.values()) == {"a"} and len(holders) == 8


class _Vectors:
    """Counts writes; the real stores are tested elsewhere (idempotent point ids)."""

    dim = 64
    has_windows = False  # no window vectors: the handler reads no earlier turns

    def __init__(self) -> None:
        self.upserts = 0

    def upsert_turns(self, turns: list[Any], *_args: Any) -> None:
        self.upserts += len(turns)


class _FlakyState(TurnLog):
    """Fails the first `failures` publishes after running them: the embed worker wrote
    Qdrant and Redis, then lost the reply (the '16 turns became 112 entries' case)."""

    def __init__(self, *args: Any, failures: int) -> None:
        super().__init__(*args)
        self.failures = failures

    def publish_embedded(self, items: Any) -> int:
        published = super().publish_embedded(items)
        if self.failures:
            self.failures -= 1
            raise StoreUnavailable("redis", "connection reset after the write")
        return published


def test_an_embed_retry_after_the_writes_appends_nothing_twice(
    redis_client: redis.Redis, settings: Settings
) -> None:
    keys = Keys("hmidem", 4)
    state = _FlakyState(redis_client, keys, 10, failures=6)
    sessions = [f"s{i}" for i in range(4)]
    plain = TurnLog(redis_client, keys, 10)
    from hivemem.domain.turn import TurnDraft

    for i in range(16):
        plain.append_turn(TurnDraft(sessions[i % 4], "user", f"turn number {i}",
                                    settings=settings.ingest))
    vectors = _Vectors()
    handler = EmbedHandler(HashingEmbedder(64), vectors,  # type: ignore[arg-type]
                           state, StreamStore(redis_client, keys), keys)
    kind = WorkerKind.of(Topology(keys).embed, decode_turn, handler, handler.dead_lettered)
    worker = StreamWorker(kind, StreamStore(redis_client, keys), settings.worker, consumer="w")
    worker.run(burst=True)
    assert vectors.upserts > 16  # it did retry the whole batch, Qdrant write included
    assert embedded_len(redis_client, keys) == 16  # ...and published each turn once
    assert len(set(embedded_items_of(redis_client, keys))) == 16
    for sid in sessions:
        assert plain.progress(sid) == (4, 4, 0)


def test_cluster_refusals_are_configuration_errors() -> None:
    for error in (redis.exceptions.ResponseError(
            "CROSSSLOT Keys in request don't hash to the same slot"),
            redis.exceptions.MovedError("3999 127.0.0.1:7002"),
            redis.exceptions.RedisClusterException("Cluster mode is not enabled")):
        with pytest.raises(ConfigurationError), redis_errors("append turn"):
            raise error
    with pytest.raises(StoreUnavailable), redis_errors("append turn"):
        raise redis.exceptions.ConnectionError("refused")


def test_a_configuration_error_stops_the_worker_and_dead_letters_nothing(
    redis_client: redis.Redis, settings: Settings
) -> None:
    keys = Keys("hmcfg", 2)
    stream = keys.turns_stream(0)
    redis_client.xadd(stream, {"m": "1"})

    def handle(_batch: list[int]) -> None:
        raise ConfigurationError("redis: CROSSSLOT")

    def decode(entry: StreamEntry) -> int:
        return int(entry.fields["m"])

    kind = WorkerKind(name="cfg", streams=(stream, keys.turns_stream(1)), group="g",
                      decode=decode, handle=handle)
    worker = StreamWorker(kind, StreamStore(redis_client, keys), settings.worker)
    with pytest.raises(ConfigurationError):
        worker.run(burst=True)
    assert redis_client.xlen(keys.dead_letters(stream)) == 0
    assert redis_client.xpending(stream, "g")["pending"] == 1  # still there for a fixed deploy
    assert redis_client.exists(keys.partition_lease("cfg", 0)) == 0  # leases given back


def test_two_workers_split_the_partitions_and_handle_everything_once(
    redis_client: redis.Redis, settings: Settings
) -> None:
    keys = Keys("hmsplit", 8)
    streams = tuple(keys.turns_stream(p) for p in range(8))
    for i in range(200):
        redis_client.xadd(streams[i % 8], {"m": str(i)})
    seen: dict[str, list[int]] = {"a": [], "b": []}
    lock = threading.Lock()

    def decode(entry: StreamEntry) -> tuple[str, int]:
        return entry.stream, int(entry.fields["m"])

    def handler(name: str) -> Any:
        def handle(batch: list[tuple[str, int]]) -> None:
            with lock:
                seen[name].extend(m for _, m in batch)
            time.sleep(0.1)  # slow enough that the second worker joins mid-way
        return handle

    ws = settings.worker.model_copy(update={"batch_size": 2})
    workers = [
        StreamWorker(WorkerKind(name="split", streams=streams, group="g", decode=decode,
                                handle=handler(n)), StreamStore(redis_client, keys), ws,
                     consumer=n)
        for n in ("a", "b")
    ]
    threads = [threading.Thread(target=w.run) for w in workers]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while len(seen["a"]) + len(seen["b"]) < 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    for w in workers:
        w.stop()
    for t in threads:
        t.join(10)
    everything = sorted(seen["a"] + seen["b"])
    assert everything == list(range(200))  # each once
    assert seen["a"] and seen["b"]  # both did work


def test_a_publish_of_partly_published_turns_publishes_only_the_rest(
    redis_client: redis.Redis, settings: Settings
) -> None:
    # A redelivery batched with new turns: one session's entry would hold a turn that was
    # published before; the script puts its bits back and the rest goes out on its own.
    from hivemem.domain.turn import TurnDraft
    from hivemem.pipeline.messages import EmbeddedTurn

    keys = Keys("hmpartly", 2)
    state = TurnLog(redis_client, keys, 10)
    for i in range(4):
        state.append_turn(TurnDraft("s", "user", f"turn {i}", settings=settings.ingest))
    turns = state.recent_turns("s", 10)[::-1]
    entries = [EmbeddedTurn.of(t, np.ones(4, dtype=np.float32)) for t in turns]
    assert state.publish_embedded(entries[:2]) == 2
    assert state.publish_embedded(entries[1:3]) == 1  # seq 2 again, seq 3 new
    assert state.publish_embedded(entries) == 1  # only seq 4
    assert state.publish_embedded(entries) == 0
    assert sorted(embedded_items_of(redis_client, keys)) == [("s", 1), ("s", 2), ("s", 3),
                                                             ("s", 4)]
    assert state.progress("s") == (4, 4, 0)
