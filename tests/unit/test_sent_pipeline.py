"""`send_pipeline`: reads sent now, their replies read later, as `execute` gives them."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from hivemem.store.redis import send_pipeline


def _queue(pipe: Any) -> Any:
    pipe.lrange("w", 0, -1)
    pipe.zrevrange("z", 0, 9, withscores=True)
    pipe.hgetall("h")
    return pipe


def _fill(client: redis.Redis) -> None:
    client.rpush("w", "a", "b", "c")
    client.zadd("z", {"x": 1, "y": 2})
    client.hset("h", mapping={"next_seq": "4", "open": ""})


def test_replies_are_those_of_execute(redis_client: redis.Redis) -> None:
    _fill(redis_client)
    expected = _queue(redis_client.pipeline(transaction=False)).execute()
    read = send_pipeline(_queue(redis_client.pipeline(transaction=False)))
    redis_client.rpush("w", "d")  # another command on the client meanwhile
    assert read() == expected
    assert expected[1] == [(b"y", 2.0), (b"x", 1.0)]  # the callbacks applied


def test_an_error_reply_raises_and_the_client_goes_on(redis_client: redis.Redis) -> None:
    _fill(redis_client)
    pipe = redis_client.pipeline(transaction=False)
    pipe.lrange("h", 0, -1)  # a hash: WRONGTYPE
    pipe.hgetall("h")
    read = send_pipeline(pipe)
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        read()
    assert redis_client.lrange("w", 0, -1) == [b"a", b"b", b"c"]
    assert send_pipeline(_queue(redis_client.pipeline(transaction=False)))()[0] == [
        b"a", b"b", b"c"]


def test_connections_go_back_to_the_pool(redis_server: Any) -> None:
    # Named, so that other tests' clients of the shared server are not counted.
    client = redis.Redis.from_url(redis_server.url, client_name="sent-pipeline-pool")
    try:
        _fill(client)
        for _ in range(50):
            send_pipeline(_queue(client.pipeline(transaction=False)))()
        mine = [c for c in client.client_list() if c.get("name") == "sent-pipeline-pool"]
        # One connection for the sent reads, reused, beside the one asking.
        assert 1 <= len(mine) <= 2
    finally:
        client.flushall()
        client.close()


def test_a_reply_lost_on_the_way_is_read_again(
    redis_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = redis_server.client()
    try:
        _fill(client)
        expected = _queue(client.pipeline(transaction=False)).execute()
        pipe = _queue(client.pipeline(transaction=False))
        read = send_pipeline(pipe)
        calls = {"n": 0}
        parse = pipe.parse_response

        def lose_first(*args: Any, **kwargs: Any) -> Any:
            calls["n"] += 1
            if calls["n"] == 1:
                raise redis.ConnectionError("connection reset")
            return parse(*args, **kwargs)

        monkeypatch.setattr(pipe, "parse_response", lose_first)
        assert read() == expected
        assert calls["n"] > 1
    finally:
        client.flushall()
        client.close()


def test_a_transaction_runs_at_once(redis_client: redis.Redis) -> None:
    _fill(redis_client)
    pipe = _queue(redis_client.pipeline(transaction=True))
    read = send_pipeline(pipe)
    redis_client.delete("w")  # after the send: a transaction has run already
    assert read()[0] == [b"a", b"b", b"c"]
