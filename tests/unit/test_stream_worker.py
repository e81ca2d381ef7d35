"""The consume loop (StreamWorker) on fakeredis and on a real redis-server.

A toy stage: entries carry ``{"m": "<int>"}``, the handler records what it saw and fails on
demand. Settings come from the `settings` fixture: block 50 ms, reclaim after 200 ms,
max_deliveries 3, back-off 10-50 ms.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from hivemem.config import Settings
from hivemem.errors import RetryLater, StoreUnavailable
from hivemem.pipeline.topology import Keys
from hivemem.store.streams import StreamEntry, StreamStore
from hivemem.workers.stream import StreamWorker, WorkerKind

KEYS = Keys("hm")
STREAM = "hm:stream:test"
GROUP = "g"


def decode(entry: StreamEntry) -> int:
    return int(entry.fields["m"])


class Recorder:
    """A handler: records every call; `fail(batch)` decides whether (and how) it fails."""

    def __init__(self, fail: Callable[[list[int]], Exception | None] | None = None) -> None:
        self.calls: list[list[int]] = []
        self.done: list[int] = []
        self.fail = fail
        self.dead: list[tuple[str, str]] = []

    def __call__(self, batch: list[int]) -> None:
        self.calls.append(list(batch))
        error = self.fail(batch) if self.fail else None
        if error is not None:
            raise error
        self.done.extend(batch)

    def on_dead_letter(self, entry: StreamEntry, error: str) -> None:
        self.dead.append((entry.entry_id, error))


def make_worker(
    client: redis.Redis, settings: Settings, handler: Recorder, consumer: str = "w"
) -> StreamWorker[int]:
    kind = WorkerKind(
        name="test", streams=(STREAM,), group=GROUP, decode=decode, handle=handler,
        on_dead_letter=handler.on_dead_letter,
    )
    return StreamWorker(kind, StreamStore(client, KEYS), settings.worker, consumer=consumer)


def add(client: redis.Redis, *values: Any) -> list[str]:
    return [client.xadd(STREAM, {"m": str(v)}).decode() for v in values]


def pending(client: redis.Redis) -> list[dict[str, Any]]:
    return client.xpending_range(STREAM, GROUP, min="-", max="+", count=1000)


def run_burst(worker: StreamWorker[int], timeout: float = 20.0) -> float:
    """Run in burst mode; fail instead of hanging forever."""
    import threading

    result: dict[str, Any] = {}
    started = time.monotonic()
    thread = threading.Thread(target=lambda: result.setdefault("r", worker.run(burst=True)))
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        worker.stop()
        thread.join(5)
        pytest.fail(f"burst run did not finish in {timeout}s")
    return time.monotonic() - started


def test_burst_on_an_empty_stream_exits_and_creates_the_group(
    redis_client: redis.Redis, settings: Settings
) -> None:
    worker = make_worker(redis_client, settings, Recorder())
    assert run_burst(worker) < 5
    assert worker.report.handled == 0
    assert [g["name"] for g in redis_client.xinfo_groups(STREAM)] == [GROUP.encode()]


def test_a_batch_is_acked_only_after_the_handler_returns(
    redis_client: redis.Redis, settings: Settings
) -> None:
    add(redis_client, *range(1, 6))
    seen_pending: list[int] = []
    handler = Recorder(fail=lambda batch: seen_pending.append(len(pending(redis_client))))
    worker = make_worker(redis_client, settings, handler)
    run_burst(worker)
    assert handler.calls == [[1, 2, 3, 4, 5]]
    assert seen_pending == [5]  # delivered, held, not acked while the handler ran
    assert pending(redis_client) == []
    assert (worker.report.handled, worker.report.batches) == (5, 1)


def test_batches_follow_batch_size_and_stream_order(
    redis_client: redis.Redis, settings: Settings
) -> None:
    settings.worker.batch_size = 4
    add(redis_client, *range(10))
    handler = Recorder()
    worker = make_worker(redis_client, settings, handler)
    run_burst(worker)
    assert handler.calls == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert worker.report.handled == 10


def test_entries_left_pending_by_a_crashed_consumer_are_reclaimed(
    redis_client: redis.Redis, settings: Settings
) -> None:
    streams = StreamStore(redis_client, KEYS)
    streams.ensure_group(STREAM, GROUP)
    add(redis_client, *range(1, 5))
    # "dead" reads a batch and crashes before acking it.
    taken = streams.read(STREAM, GROUP, "dead", count=10, block_ms=None)
    assert [decode(e) for e in taken] == [1, 2, 3, 4]
    add(redis_client, 5, 6)

    handler = Recorder()
    worker = make_worker(redis_client, settings, handler, consumer="alive")
    started = time.monotonic()
    run_burst(worker)
    assert sorted(handler.done) == [1, 2, 3, 4, 5, 6]
    assert worker.report.reclaimed == 4
    assert worker.report.handled == 6
    assert pending(redis_client) == []
    # Not reclaimed before they had been idle for claim_idle_ms.
    assert time.monotonic() - started >= settings.worker.claim_idle_ms / 1000 * 0.9


def test_a_restarted_consumer_takes_its_own_pending_entries_first(
    redis_client: redis.Redis, settings: Settings
) -> None:
    streams = StreamStore(redis_client, KEYS)
    streams.ensure_group(STREAM, GROUP)
    add(redis_client, 1, 2, 3)
    streams.read(STREAM, GROUP, "same-name", count=2, block_ms=None)  # then it crashed
    handler = Recorder()
    worker = make_worker(redis_client, settings, handler, consumer="same-name")
    run_burst(worker)
    assert handler.calls[0] == [1, 2]  # its own pending ones, without waiting for a reclaim
    assert sorted(handler.done) == [1, 2, 3]
    assert worker.report.reclaimed == 0
    assert pending(redis_client) == []


def test_one_bad_message_falls_back_to_one_by_one_then_is_dead_lettered(
    redis_client: redis.Redis, settings: Settings
) -> None:
    ids = add(redis_client, 1, 2, 3, 4, 5)
    handler = Recorder(fail=lambda batch: ValueError("bad 3") if 3 in batch else None)
    worker = make_worker(redis_client, settings, handler)
    run_burst(worker)

    assert handler.calls[0] == [1, 2, 3, 4, 5]
    assert handler.calls[1:6] == [[1], [2], [3], [4], [5]]
    # The rest was acked on the first pass; 3 came back until max_deliveries.
    assert handler.calls[6:] == [[3]] * (settings.worker.max_deliveries - 1)
    assert sorted(handler.done) == [1, 2, 4, 5]
    assert worker.report.handled == 4
    assert worker.report.dead_lettered == 1
    assert worker.report.failures == settings.worker.max_deliveries
    assert pending(redis_client) == []

    letters = StreamStore(redis_client, KEYS).dead_letters(STREAM)
    assert len(letters) == 1
    letter = letters[0]
    assert letter.entry_id == ids[2]
    assert letter.fields == {"m": "3"}
    assert letter.error == "ValueError: bad 3"
    assert letter.deliveries == settings.worker.max_deliveries
    assert (letter.stream, letter.group) == (STREAM, GROUP)
    assert handler.dead == [(ids[2], "ValueError: bad 3")]
    # The per-entry error record is cleaned up with the ack.
    assert redis_client.hlen(KEYS.delivery_errors(STREAM, GROUP)) == 0


def test_undecodable_entries_are_dead_lettered_at_once(
    redis_client: redis.Redis, settings: Settings
) -> None:
    add(redis_client, 1)
    bad = redis_client.xadd(STREAM, {"m": "not-a-number"}).decode()
    missing = redis_client.xadd(STREAM, {"other": "field"}).decode()
    add(redis_client, 2)
    handler = Recorder()
    worker = make_worker(redis_client, settings, handler)
    run_burst(worker)
    assert handler.calls == [[1, 2]]
    letters = {d.entry_id: d for d in StreamStore(redis_client, KEYS).dead_letters(STREAM)}
    assert set(letters) == {bad, missing}
    assert letters[bad].error.startswith("undecodable: ValueError")
    assert letters[missing].error.startswith("undecodable: KeyError")
    assert all(d.deliveries == 1 for d in letters.values())
    assert pending(redis_client) == []


def test_an_entry_whose_consumers_keep_dying_is_dead_lettered_without_handling(
    redis_client: redis.Redis, settings: Settings
) -> None:
    streams = StreamStore(redis_client, KEYS)
    streams.ensure_group(STREAM, GROUP)
    (killer,) = add(redis_client, 666)
    max_deliveries = settings.worker.max_deliveries
    # Delivered max_deliveries times, and each consumer died holding it.
    streams.read(STREAM, GROUP, "c0", count=1, block_ms=None)
    for i in range(1, max_deliveries):
        redis_client.xclaim(STREAM, GROUP, f"c{i}", min_idle_time=0, message_ids=[killer])
    assert pending(redis_client)[0]["times_delivered"] == max_deliveries
    add(redis_client, 1)

    handler = Recorder()
    worker = make_worker(redis_client, settings, handler)
    run_burst(worker)
    assert handler.done == [1]  # 666 never reached the handler again
    (letter,) = streams.dead_letters(STREAM)
    assert letter.entry_id == killer
    assert letter.error == "consumer died while holding it (no error recorded)"
    assert letter.deliveries == max_deliveries
    assert pending(redis_client) == []


def test_a_dead_consumer_entry_keeps_its_last_recorded_error(
    redis_client: redis.Redis, settings: Settings
) -> None:
    streams = StreamStore(redis_client, KEYS)
    streams.ensure_group(STREAM, GROUP)
    (entry,) = add(redis_client, 7)
    streams.read(STREAM, GROUP, "c0", count=1, block_ms=None)
    for i in range(1, settings.worker.max_deliveries):
        redis_client.xclaim(STREAM, GROUP, f"c{i}", min_idle_time=0, message_ids=[entry])
    streams.record_error(STREAM, GROUP, entry, "MemoryError: model blew up")
    worker = make_worker(redis_client, settings, Recorder())
    run_burst(worker)
    (letter,) = streams.dead_letters(STREAM)
    assert letter.error == "MemoryError: model blew up"
    assert redis_client.hlen(KEYS.delivery_errors(STREAM, GROUP)) == 0


@pytest.mark.parametrize("transient", [StoreUnavailable("qdrant", "down"), RetryLater("busy")])
def test_a_transient_error_backs_off_and_retries_in_place_without_counting(
    redis_client: redis.Redis, settings: Settings, transient: Exception
) -> None:
    add(redis_client, 1, 2, 3)
    deliveries_seen: list[list[int]] = []

    def fail(batch: list[int]) -> Exception | None:
        deliveries_seen.append([int(r["times_delivered"]) for r in pending(redis_client)])
        return transient if len(deliveries_seen) <= 4 else None

    handler = Recorder(fail=fail)
    worker = make_worker(redis_client, settings, handler)
    run_burst(worker)
    assert handler.calls == [[1, 2, 3]] * 5  # the same batch, in place, no one-by-one fallback
    assert deliveries_seen == [[1, 1, 1]] * 5  # never redelivered while the store was down
    assert handler.done == [1, 2, 3]
    assert (worker.report.failures, worker.report.dead_lettered) == (0, 0)
    assert StreamStore(redis_client, KEYS).dead_letters(STREAM) == []
    assert redis_client.hlen(KEYS.delivery_errors(STREAM, GROUP)) == 0
    assert pending(redis_client) == []


def test_a_long_outage_never_dead_letters(
    redis_client: redis.Redis, settings: Settings
) -> None:
    settings.worker.max_deliveries = 1
    add(redis_client, 1, 2)
    handler = Recorder(
        fail=lambda _b: StoreUnavailable("redis", "down") if len(handler.calls) < 20 else None
    )
    worker = make_worker(redis_client, settings, handler)
    run_burst(worker)
    assert handler.done == [1, 2]
    assert worker.report.dead_lettered == 0


def test_stopping_during_an_outage_leaves_the_batch_pending_for_a_reclaim(
    redis_client: redis.Redis, settings: Settings
) -> None:
    add(redis_client, 1, 2)
    worker: StreamWorker[int]

    def fail(_batch: list[int]) -> Exception:
        if len(handler.calls) >= 3:
            worker.stop()  # SIGTERM arrives while the store is down
        return StoreUnavailable("qdrant", "down")

    handler = Recorder(fail=fail)
    worker = make_worker(redis_client, settings, handler)
    run_burst(worker)
    assert handler.done == []
    assert len(pending(redis_client)) == 2  # not acked, not dead-lettered: a reclaim retries
    assert worker.report.dead_lettered == 0
    assert StreamStore(redis_client, KEYS).dead_letters(STREAM) == []

    # Another worker picks them up once they are idle.
    rescuer = Recorder()
    run_burst(make_worker(redis_client, settings, rescuer, consumer="rescuer"))
    assert sorted(rescuer.done) == [1, 2]
    assert pending(redis_client) == []


def test_stop_makes_a_non_burst_worker_return(
    redis_client: redis.Redis, settings: Settings
) -> None:
    import threading

    add(redis_client, 1)
    handler = Recorder()
    worker = make_worker(redis_client, settings, handler)
    thread = threading.Thread(target=worker.run)
    thread.start()
    deadline = time.monotonic() + 10
    while handler.done != [1] and time.monotonic() < deadline:
        time.sleep(0.01)
    worker.stop()
    thread.join(5)
    assert not thread.is_alive()
    assert handler.done == [1]
    assert pending(redis_client) == []


def test_reclaim_dead_letters_past_max_deliveries_even_behind_other_pending_entries(
    redis_client: redis.Redis, settings: Settings
) -> None:
    streams = StreamStore(redis_client, KEYS)
    streams.ensure_group(STREAM, GROUP)
    (first,) = add(redis_client, 100)
    between = add(redis_client, *range(1, 31))
    (last,) = add(redis_client, 200)
    # Everything delivered once to c0; 100 and 200 then die on max_deliveries consumers.
    streams.read(STREAM, GROUP, "c0", count=100, block_ms=None)
    for i in range(1, settings.worker.max_deliveries):
        redis_client.xclaim(STREAM, GROUP, f"c{i}", min_idle_time=0, message_ids=[first, last])
    time.sleep(settings.worker.claim_idle_ms / 1000 + 0.1)
    # The 30 in between are held by a live consumer (just delivered: not idle).
    redis_client.xclaim(STREAM, GROUP, "live", min_idle_time=0, message_ids=between)

    handler = Recorder()
    worker = make_worker(redis_client, settings, handler)
    worker.step()  # the first step reclaims 100 and 200 (the 30 are not idle yet)
    assert worker.report.reclaimed == 2
    assert {d.entry_id for d in streams.dead_letters(STREAM)} == {first, last}
    assert 100 not in handler.done and 200 not in handler.done


def test_a_restarted_consumer_dead_letters_its_own_entry_past_max_deliveries(
    redis_client: redis.Redis, settings: Settings
) -> None:
    streams = StreamStore(redis_client, KEYS)
    streams.ensure_group(STREAM, GROUP)
    (killer,) = add(redis_client, 666)
    # "fixed" took it, died, restarted, took it again (a history read counts a delivery)...
    streams.read(STREAM, GROUP, "fixed", count=1, block_ms=None)
    for _ in range(settings.worker.max_deliveries - 1):
        streams.read(STREAM, GROUP, "fixed", count=1, block_ms=None, own_pending=True)
    assert pending(redis_client)[0]["times_delivered"] == settings.worker.max_deliveries

    handler = Recorder()
    run_burst(make_worker(redis_client, settings, handler, consumer="fixed"))
    assert handler.calls == []  # it must not get a (max_deliveries + 1)-th chance to crash us
    (letter,) = streams.dead_letters(STREAM)
    assert letter.entry_id == killer
    assert letter.deliveries == settings.worker.max_deliveries


def test_acknowledged_entries_are_trimmed_pending_and_unread_ones_kept(
    redis_client: redis.Redis, settings: Settings
) -> None:
    settings.worker.trim_interval_s = 1e-9  # due at every step
    settings.worker.batch_size = 4
    add(redis_client, *range(10))
    failing = Recorder(fail=lambda batch: RuntimeError("boom") if 9 in batch else None)
    worker = make_worker(redis_client, settings, failing)
    worker.streams.ensure_group(STREAM, GROUP)
    worker.step()  # 0-3 handled and acked
    worker.step()  # trims 0-2: below the group's last delivered entry (3), all acknowledged
    assert [int(f[b"m"]) for _id, f in redis_client.xrange(STREAM)] == list(range(3, 10))
    worker.step()  # 4-7 acked
    worker.step()  # 8, 9: the batch fails, one by one 8 is acked and 9 stays pending
    worker.step()
    remaining = [int(f[b"m"]) for _id, f in redis_client.xrange(STREAM)]
    assert remaining == [9]  # the pending entry is never trimmed
    assert len(pending(redis_client)) == 1
    # A second group that has read nothing yet holds everything back.
    redis_client.xgroup_create(STREAM, "late", id="0")
    assert StreamStore(redis_client, KEYS).trim_consumed(STREAM) == 0


def test_a_batch_held_longer_than_claim_idle_is_not_taken_from_its_worker(
    redis_client: redis.Redis, settings: Settings
) -> None:
    """A slow handler (here 4x claim_idle_ms) keeps its partition lease and its entries: a
    second worker of the stage neither takes the partition nor reclaims the batch, so
    nothing is handled twice."""
    import threading

    idle_s = settings.worker.claim_idle_ms / 1000
    slow_started = threading.Event()

    def slow(batch: list[int]) -> None:
        slow_started.set()
        time.sleep(4 * idle_s)

    first, second = Recorder(), Recorder()
    first_handle = first.__call__
    first_worker = make_worker(redis_client, settings, first, consumer="a-first")
    first_worker.kind = WorkerKind(
        name="test", streams=(STREAM,), group=GROUP, decode=decode,
        handle=lambda batch: (slow(batch), first_handle(batch))[1],
        on_dead_letter=first.on_dead_letter,
    )
    add(redis_client, 1, 2, 3)
    threads = [threading.Thread(target=first_worker.run)]
    threads[0].start()
    assert slow_started.wait(10)
    second_worker = make_worker(redis_client, settings, second, consumer="b-second")
    threads.append(threading.Thread(target=second_worker.run))
    threads[1].start()
    deadline = time.monotonic() + 20
    while sorted(first.done + second.done) != [1, 2, 3] and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(2 * idle_s)  # room for a (wrong) second handling to show up
    for worker in (first_worker, second_worker):
        worker.stop()
    for thread in threads:
        thread.join(10)
    assert sorted(first.done) == [1, 2, 3]
    assert second.calls == []
    assert second_worker.report.reclaimed == 0
    assert pending(redis_client) == []


def test_keepalive_renews_only_while_a_batch_outlasts_its_interval() -> None:
    from hivemem.workers.keepalive import Keepalive

    seen: list[list[int]] = []
    keepalive = Keepalive(0.05, lambda held: seen.append(list(held)))
    try:
        with keepalive.holding([1, 2]):
            pass  # shorter than the interval
        time.sleep(0.15)
        assert seen == []
        with keepalive.holding([3]):
            time.sleep(0.28)
        held_renewals = len(seen)
        time.sleep(0.15)
        assert 3 <= held_renewals <= 6
        assert len(seen) == held_renewals  # nothing once the batch is done
        assert all(batch == [3] for batch in seen)
    finally:
        keepalive.close()


def test_a_worker_stopped_while_redis_is_gone_returns_instead_of_crashing(
    redis_client: redis.Redis, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An embedded owner stops its server after a drain timed out: the worker's next read
    fails, and since it was told to stop, it ends its run (its batch stays pending)."""
    handler = Recorder()
    worker = make_worker(redis_client, settings, handler)

    def gone(*_args: Any, **_kwargs: Any) -> list[StreamEntry]:
        worker.stop()
        raise StoreUnavailable("redis", "read stream: No such file or directory")

    monkeypatch.setattr(worker.streams, "read_many", gone)
    report = worker.run()
    assert report.handled == 0
    assert worker.stopping


def test_a_store_outage_without_a_stop_still_backs_off_and_raises_nothing_early(
    redis_client: redis.Redis, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    handler = Recorder()
    worker = make_worker(redis_client, settings, handler)
    calls: list[int] = []
    real = worker.streams.read_many

    def flaky(*args: Any, **kwargs: Any) -> list[StreamEntry]:
        calls.append(1)
        if len(calls) <= 2:
            raise StoreUnavailable("redis", "blip")
        worker.stop()
        return real(*args, **kwargs)

    monkeypatch.setattr(worker.streams, "read_many", flaky)
    worker.run()
    assert len(calls) >= 3  # retried in place, not ended by the first failure
