"""The doorbell a cluster consumer waits on between empty polls (real redis-server: the
listeners block in XREAD on their own connections)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from hivemem.store.doorbell import Doorbell
from hivemem.testing import RedisServer


@pytest.fixture
def client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    conn = redis_server.client()
    conn.flushall()
    yield conn
    conn.flushall()
    conn.close()


def settle(bell: Doorbell) -> None:
    """Let the listeners start their first read (a ring before that is not promised)."""
    bell.wait(0.3)


def test_it_rings_for_a_new_entry_on_any_watched_stream(client: redis.Redis) -> None:
    bell = Doorbell(client, block_ms=200)
    try:
        bell.watch(["a", "b"])
        settle(bell)
        assert bell.wait(0.05) is False  # nothing new
        client.xadd("b", {"f": "1"})
        assert bell.wait(10.0) is True
        assert bell.wait(0.05) is False  # the ring was taken
        client.xadd("a", {"f": "1"})
        assert bell.wait(10.0) is True
    finally:
        bell.close()


def test_entries_the_loop_has_read_do_not_ring(client: redis.Redis) -> None:
    bell = Doorbell(client, block_ms=200)
    try:
        bell.watch(["a"])
        settle(bell)
        ids = [client.xadd("a", {"f": str(i)}).decode() for i in range(5)]
        assert bell.wait(10.0) is True  # rang for the first of them
        bell.seen("a", ids[-1])  # the loop read all five meanwhile
        assert bell.wait(0.5) is False  # so no ring walks through the other four
        client.xadd("a", {"f": "new"})
        assert bell.wait(10.0) is True
    finally:
        bell.close()


def test_an_unwatched_stream_stops_ringing(client: redis.Redis) -> None:
    bell = Doorbell(client, block_ms=100)
    try:
        bell.watch(["a"])
        settle(bell)
        bell.watch(["b"])
        bell.wait(0.5)  # the listener of "a" ends after its current read
        client.xadd("a", {"f": "1"})
        assert bell.wait(0.5) is False
    finally:
        bell.close()
