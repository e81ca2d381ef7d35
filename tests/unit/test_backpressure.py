"""`ingest.max_backlog`: ingest raises `Backpressure` or blocks instead of growing the turns
stream without bound; nothing is written when it refuses; durable ingest is refused up front
where the server cannot confirm it."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest
import redis

from hivemem import Backpressure, HivememError, MemoryClient, StoreUnavailable
from hivemem.config import Settings
from hivemem.pipeline.topology import Keys

KEYS = Keys("hm")
STREAM = KEYS.turns_stream(KEYS.partition("s"))  # every turn here is session "s"


def _client(redis_client: redis.Redis, **ingest: object) -> MemoryClient:
    settings = Settings.model_validate(
        {"embedding": {"provider": "hashing", "dim": 64},
         "ingest": {"max_backlog": 10, "backlog_check_every": 1, **ingest}}
    )
    return MemoryClient(settings, redis_client=redis_client)


def _consume(redis_client: redis.Redis, count: int) -> None:
    """What an embed worker does: read and ack `count` entries."""
    with contextlib.suppress(redis.ResponseError):
        redis_client.xgroup_create(STREAM, "embed", id="0", mkstream=True)
    rows = redis_client.xreadgroup("embed", "c1", {STREAM: ">"}, count=count)
    ids = [entry_id for _stream, entries in rows for entry_id, _ in entries]
    if ids:
        redis_client.xack(STREAM, "embed", *ids)


def test_raise_mode_refuses_over_the_bound_and_writes_nothing(redis_client: redis.Redis) -> None:
    client = _client(redis_client)
    for i in range(10):
        client.ingest("s", "user", f"turn {i}")
    with pytest.raises(Backpressure) as caught:
        client.ingest("s", "user", "one too many")
    assert isinstance(caught.value, HivememError)
    assert (caught.value.backlog, caught.value.limit) == (10, 10)
    assert redis_client.xlen(STREAM) == 10
    assert client.get_session_stats("s").turns_enqueued == 10
    # A batch that would pass the bound is refused whole.
    _consume(redis_client, 5)
    with pytest.raises(Backpressure):
        client.ingest_many([{"session_id": "s", "role": "user", "content": f"b{i}"}
                            for i in range(6)])
    assert redis_client.xlen(STREAM) == 10
    # Once the workers consumed some, ingest goes through again.
    assert client.ingest("s", "user", "after the drain").seq == 11


def test_pending_entries_count_as_backlog_until_acked(redis_client: redis.Redis) -> None:
    client = _client(redis_client)
    for i in range(10):
        client.ingest("s", "user", f"turn {i}")
    redis_client.xgroup_create(STREAM, "embed", id="0")
    redis_client.xreadgroup("embed", "c1", {STREAM: ">"}, count=10)  # not acked
    with pytest.raises(Backpressure):
        client.ingest("s", "user", "still held by a worker")


def test_block_mode_waits_for_the_workers(redis_client: redis.Redis) -> None:
    client = _client(redis_client, backpressure="block", block_timeout_s=5.0)
    for i in range(10):
        client.ingest("s", "user", f"turn {i}")
    drainer = threading.Timer(0.3, _consume, args=(redis_client, 10))
    drainer.start()
    started = time.monotonic()
    turn = client.ingest("s", "user", "waits")
    waited = time.monotonic() - started
    drainer.join()
    assert turn.seq == 11
    assert 0.2 < waited < 4.0


def test_block_mode_gives_up_after_its_timeout(redis_client: redis.Redis) -> None:
    client = _client(redis_client, backpressure="block", block_timeout_s=0.2)
    for i in range(10):
        client.ingest("s", "user", f"turn {i}")
    started = time.monotonic()
    with pytest.raises(Backpressure, match="after waiting"):
        client.ingest("s", "user", "gives up")
    assert time.monotonic() - started >= 0.2
    assert redis_client.xlen(STREAM) == 10


def test_off_by_default(redis_client: redis.Redis) -> None:
    client = MemoryClient(
        Settings.model_validate({"embedding": {"provider": "hashing", "dim": 64}}),
        redis_client=redis_client,
    )
    client.ingest_many([{"session_id": "s", "role": "user", "content": f"t{i}"}
                        for i in range(500)])
    assert redis_client.xlen(STREAM) == 500


def test_checked_every_n_turns_not_on_each(redis_client: redis.Redis) -> None:
    """The hot path skips the measurement until it is due: the bound is passed by at most
    `backlog_check_every` turns."""
    client = _client(redis_client, backlog_check_every=8, backlog_check_interval_s=3600)
    written = 0
    with pytest.raises(Backpressure):
        for i in range(100):
            client.ingest("s", "user", f"turn {i}")
            written += 1
    assert 10 <= written <= 10 + 8


def test_durable_ingest_is_refused_before_writing_where_it_cannot_be_confirmed() -> None:
    from hivemem.testing import connect_fake, fake_server

    fake = connect_fake(fake_server())
    client = MemoryClient(
        Settings.model_validate({"embedding": {"provider": "hashing", "dim": 64}}),
        redis_client=fake,
    )
    with pytest.raises(StoreUnavailable, match="durable ingest"):
        client.ingest("s", "user", "must be on disk", durable=True)
    assert fake.exists(STREAM) == 0
