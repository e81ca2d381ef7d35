"""Episode boundary rules (pure) and the boundary stage on fakeredis + a real redis-server."""

from __future__ import annotations

import json
import random
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
import redis

from hivemem.domain.episode import (
    BoundaryPolicy,
    SessionEpisodes,
    episode_id,
    step_control,
    step_turn,
)
from hivemem.domain.models import Role, Turn
from hivemem.errors import StoreUnavailable
from hivemem.pipeline.topology import Keys
from hivemem.pipeline.vectors import encode_vector
from hivemem.pipeline.wire import wire_json
from hivemem.store.episodes import EpisodeStore
from hivemem.store.streams import StreamEntry
from hivemem.workers.boundary import BoundaryHandler, decode_item

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
POLICY = BoundaryPolicy(max_turns=6, max_gap_seconds=1800, topic_shift_threshold=0.1,
                        topic_min_tokens=3, topic_min_turns=2, min_episode_turns=2)


def turn(seq: int, minutes: float = 0, role: Role = Role.USER, content: str = "some words here",
         markers: tuple[str, ...] = (), session: str = "s1") -> Turn:
    return Turn(turn_id=f"t{seq}", session_id=session, role=role, content=content,
                markers=markers, timestamp=T0 + timedelta(minutes=minutes), seq=seq,
                token_count=len(content.split()))


def unit(*values: float) -> np.ndarray:
    v = np.zeros(8, dtype=np.float32)
    v[: len(values)] = values
    return v / np.linalg.norm(v)


def run(turns: list[tuple[Turn, np.ndarray | None]], policy: BoundaryPolicy = POLICY):
    state = SessionEpisodes("s1")
    closed = []
    for t, v in turns:
        closed.extend(step_turn(state, t, v, policy))
    return state, closed


def test_max_turns_closes_with_the_turn_in_it() -> None:
    state, closed = run([(turn(i, i), unit(1)) for i in range(1, 14)])
    assert [(e.seq_start, e.seq_end, e.close_reason) for e in closed] == [
        (1, 6, "max_turns"), (7, 12, "max_turns")]
    assert state.open is not None and state.open.turn_ids == ["t13"]
    assert closed[0].episode_id == episode_id("s1", 1) and closed[1].index == 2


def test_time_gap_starts_a_new_episode_with_the_late_turn() -> None:
    _, closed = run([(turn(1, 0), unit(1)), (turn(2, 1), unit(1)), (turn(3, 2), unit(1)),
                     (turn(4, 200), unit(1))])
    assert [(e.turn_ids, e.close_reason) for e in closed] == [(("t1", "t2", "t3"), "time_gap")]


def test_backwards_timestamp_cannot_open_a_gap() -> None:
    # Turn 3's clock is behind; the gap for turn 4 is measured from max(previous) = minute 10.
    _, closed = run([(turn(1, 0), unit(1)), (turn(2, 10), unit(1)), (turn(3, 5), unit(1)),
                     (turn(4, 35), unit(1))])
    assert closed == []


def test_tool_result_closes_its_episode() -> None:
    _, closed = run([(turn(1, 0), unit(1)), (turn(2, 1, Role.TOOL), unit(1)),
                     (turn(3, 2), unit(1))])
    assert [(e.turn_ids, e.close_reason) for e in closed] == [(("t1", "t2"), "tool_result")]


def test_short_episode_carries_forward() -> None:
    # A tool result after one turn would make a 1-turn episode: it carries into the next.
    state, closed = run([(turn(1, 0, Role.TOOL), unit(1)), (turn(2, 1), unit(1)),
                         (turn(3, 2, Role.TOOL), unit(1))])
    assert [(e.turn_ids, e.carried) for e in closed] == [(("t1", "t2", "t3"), 1)]
    assert state.open is None


def test_topic_shift_needs_a_long_turn_far_from_the_centroid() -> None:
    base = [(turn(i, i, content="database schema migration plan"), unit(1, 0.1)) for i in (1, 2)]
    # A short reply far away does not shift the topic.
    _state, closed = run([*base, (turn(3, 3, content="ok"), unit(0, 1))])
    assert closed == []
    _, closed = run([*base, (turn(3, 3, content="let us talk about the holiday trip"),
                             unit(0, 1))])
    assert [(e.turn_ids, e.close_reason) for e in closed] == [(("t1", "t2"), "topic_shift")]


def test_explicit_close_closes_even_a_short_episode() -> None:
    state, _ = run([(turn(1, 0), unit(1))])
    closed = step_control(state, "close_episode")
    assert [(e.turn_ids, e.close_reason) for e in closed] == [(("t1",), "manual")]
    assert step_control(state, "close_session") == []  # nothing open: a no-op


def test_episode_records_markers_agents_and_centroid() -> None:
    t1 = turn(1, 0, markers=("decision",))
    t2 = turn(2, 1, markers=("goal", "decision"))
    state, _ = run([(t1, unit(1)), (t2, unit(0, 1))])
    (ep,) = step_control(state, "close_session")
    assert ep.markers == ("decision", "goal") and ep.close_reason == "session"
    assert ep.started_at == t1.timestamp and ep.ended_at == t2.timestamp
    assert ep.centroid is not None


# -- the boundary stage over Redis --------------------------------------------------------

KEYS = Keys("hmtest")


def turn_item(t: Turn, vector: np.ndarray) -> StreamEntry:
    return StreamEntry("0-1", {"kind": "turn", "seq": str(t.seq), "turn": wire_json(t),
                               "vec": encode_vector(vector)})


def control_item(session: str, seq: int, action: str = "close_episode") -> StreamEntry:
    return StreamEntry("0-1", {"kind": "control", "seq": str(seq), "session_id": session,
                               "action": action})


def episodes_of(store: EpisodeStore, session: str) -> list[tuple[int, tuple[str, ...], str]]:
    return [(e.index, e.turn_ids, e.close_reason) for e in store.episodes(session)]


def test_out_of_order_batches_give_the_in_order_result(redis_client: redis.Redis) -> None:
    rng = random.Random(7)
    turns = [turn(i, i * 3 if i != 9 else 400, Role.TOOL if i == 15 else Role.USER,
                  session=f"s{i % 2}") for i in range(1, 31)]
    # Per-session seqs: renumber within each session.
    per: dict[str, int] = {}
    items = []
    for t in turns:
        per[t.session_id] = per.get(t.session_id, 0) + 1
        seq = per[t.session_id]
        t2 = t.model_copy(update={"seq": seq, "turn_id": f"{t.session_id}-{seq}"})
        items.append(decode_item(turn_item(t2, unit(1))))
    items.append(decode_item(control_item("s1", per["s1"] + 1, "close_session")))

    reference = EpisodeStore(redis_client, Keys("ref"), 5000)
    BoundaryHandler(reference, POLICY)(sorted(items, key=lambda i: (i.session_id, i.seq)))

    store = EpisodeStore(redis_client, KEYS, 5000)
    handler = BoundaryHandler(store, POLICY)
    shuffled = items[:]
    rng.shuffle(shuffled)
    for start in range(0, len(shuffled), 4):
        handler(shuffled[start : start + 4])
    handler(shuffled[:6])  # redelivered entries change nothing
    for session in ("s0", "s1"):
        assert episodes_of(store, session) == episodes_of(reference, session)
        assert episodes_of(store, session)  # something closed
    assert store.progress("s1")[2] is None  # the session close left nothing open
    assert redis_client.hlen(KEYS.boundary_buffer("s0")) == 0


def test_a_worker_without_the_lease_only_buffers(redis_client: redis.Redis) -> None:
    store = EpisodeStore(redis_client, KEYS, 5000)
    handler = BoundaryHandler(store, POLICY)
    redis_client.set(KEYS.boundary_lease("s1"), "other-worker")  # another worker holds it
    handler([decode_item(turn_item(turn(1), unit(1)))])
    assert store.progress("s1")[0] == 0 and redis_client.hlen(KEYS.boundary_buffer("s1")) == 1
    # The stale holder cannot commit once its lease is gone and another took over.
    redis_client.delete(KEYS.boundary_lease("s1"))
    handler([decode_item(turn_item(turn(2, 1), unit(1)))])
    assert store.progress("s1")[0] == 2
    assert redis_client.exists(KEYS.boundary_lease("s1")) == 0  # released after the commit
    assert store.commit("s1", "other-worker", next_seq=99, state=SessionEpisodes("s1"),
                        from_buffer=[], closed=[], marker_counts={}) == -1
    assert store.progress("s1")[0] == 2


def test_a_holder_goes_on_with_what_others_buffered_meanwhile(redis_client: redis.Redis) -> None:
    store = EpisodeStore(redis_client, KEYS, 5000)
    bodies = {str(i): decode_item(turn_item(turn(i, i - 1), unit(1))).to_json()
              for i in (1, 2)}
    first = store.begin("s1", [("1", 1)], bodies.__getitem__)
    assert first is not None and [f for f, _ in first.ready] == ["1"]
    assert first.ready[0][1] is None  # handed in: not read back...
    assert redis_client.hlen(KEYS.boundary_buffer("s1")) == 0  # ...nor ever buffered
    # Another worker offers seq 2 while the lease is held: it gets no lease, so its entry
    # is buffered...
    assert store.begin("s1", [("2", 2)], bodies.__getitem__) is None
    assert redis_client.hlen(KEYS.boundary_buffer("s1")) == 1
    # ...and the holder's commit says there is more, keeping the lease for it.
    more = store.commit("s1", first.token, next_seq=2, state=first.state, from_buffer=[],
                        closed=[], marker_counts={})
    assert more == 1
    second = store.begin("s1", [], bodies.__getitem__, first.token)
    assert second is not None and [f for f, _ in second.ready] == ["2"]
    assert second.ready[0][1] == bodies["2"]  # buffered by the other worker: read back
    assert store.commit("s1", first.token, next_seq=3, state=second.state, from_buffer=["2"],
                        closed=[], marker_counts={}) == 0
    assert redis_client.hlen(KEYS.boundary_buffer("s1")) == 0


def test_only_entries_that_must_wait_are_sent_and_buffered(redis_client: redis.Redis) -> None:
    store = EpisodeStore(redis_client, KEYS, 5000)
    sent: list[str] = []
    bodies = {str(i): decode_item(turn_item(turn(i, i - 1), unit(1))).to_json()
              for i in (1, 2, 3)}

    def payload(field: str) -> str:
        sent.append(field)
        return bodies[field]

    # Seq 2 and 3 before seq 1: nothing is ready, both wait in the buffer (their JSON sent).
    assert store.begin("s1", [("2", 2), ("3", 3)], payload) is None
    assert sorted(sent) == ["2", "3"] and redis_client.hlen(KEYS.boundary_buffer("s1")) == 2
    assert redis_client.exists(KEYS.boundary_lease("s1")) == 0
    # Seq 1 arrives: the run is 1 (handed in, its JSON never sent) then 2, 3 (buffered).
    sent.clear()
    step = store.begin("s1", [("1", 1)], payload)
    assert step is not None and sent == []
    assert [(f, raw is None) for f, raw in step.ready] == [("1", True), ("2", False),
                                                          ("3", False)]


def test_a_lost_lease_offers_the_entries_again(redis_client: redis.Redis) -> None:
    store = EpisodeStore(redis_client, KEYS, 5000)
    handler = BoundaryHandler(store, POLICY)
    real_commit = store.commit
    lost = {"done": False}

    def commit_after_losing_the_lease(session_id: str, token: str, **kw: Any) -> int:
        if not lost["done"]:  # the lease expires and another worker takes it, once
            lost["done"] = True
            redis_client.set(KEYS.boundary_lease(session_id), "other-worker", px=5000)
        return real_commit(session_id, token, **kw)

    store.commit = commit_after_losing_the_lease  # type: ignore[method-assign]
    handler([decode_item(turn_item(turn(1), unit(1)))])
    # The entry was consumed by the failed attempt only: now it waits in the buffer for
    # the new holder (the stream entry is acked, so the buffer must have it).
    assert store.progress("s1")[0] == 0
    assert redis_client.hlen(KEYS.boundary_buffer("s1")) == 1
    redis_client.delete(KEYS.boundary_lease("s1"))
    handler([decode_item(turn_item(turn(2, 1), unit(1)))])
    assert store.progress("s1")[0] == 2
    assert redis_client.hlen(KEYS.boundary_buffer("s1")) == 0


def test_commit_writes_closed_episodes_to_the_outbox_once(redis_client: redis.Redis) -> None:
    from rq import Queue

    from hivemem.config import ReflectionSettings
    from hivemem.workers.dispatch import DispatchHandler, decode_outbox_entry
    from hivemem.workers.queue import JobQueue, reflect_job_id

    store = EpisodeStore(redis_client, KEYS, 5000)
    handler = BoundaryHandler(store, POLICY)
    items = [decode_item(turn_item(turn(i, i), unit(1))) for i in range(1, 13)]
    handler(items)
    handler(items)  # a redelivery closes nothing twice
    eps = store.episodes("s1")
    assert len(eps) == 2
    outbox = KEYS.outbox_stream(KEYS.partition("s1"))
    rows = redis_client.xrange(outbox)
    entries = [decode_outbox_entry(StreamEntry(i.decode(), {k.decode(): v.decode()
                                                             for k, v in f.items()}))
               for i, f in rows]
    assert [e.episode_id for e in entries] == [e.episode_id for e in eps]
    # The dispatcher turns each into one job, however often it sees the entry.
    jobs = JobQueue(redis_client, "reflect-test", ReflectionSettings())
    dispatch = DispatchHandler(redis_client, KEYS, jobs.reflect_enqueuer())
    dispatch(entries)
    dispatch(entries)
    queue = Queue("reflect-test", connection=redis_client)
    assert sorted(queue.job_ids) == sorted(reflect_job_id(e.episode_id) for e in eps)
    assert queue.count == 2
    # Each closed episode is stored under its id, listed once for its session.
    assert redis_client.lrange(KEYS.session_episodes("s1"), 0, -1) == [
        e.episode_id.encode() for e in eps]
    body = json.loads(redis_client.get(KEYS.episode("s1", eps[0].episode_id)))
    assert body["episode_id"] == eps[0].episode_id


def test_skip_entries_move_the_order_past_dead_turns(redis_client: redis.Redis) -> None:
    store = EpisodeStore(redis_client, KEYS, 5000)
    handler = BoundaryHandler(store, POLICY)
    skip = StreamEntry("0-1", {"kind": "skip", "seq": "2", "session_id": "s1"})
    handler([decode_item(turn_item(turn(1), unit(1))),
             decode_item(turn_item(turn(3, 1), unit(1)))])
    assert store.progress("s1")[0] == 1  # waiting for seq 2
    handler([decode_item(skip)])
    assert store.progress("s1")[0] == 3
    open_ep = store.progress("s1")[2]
    assert open_ep is not None and open_ep.turn_ids == ["t1", "t3"]


def test_undecodable_items_are_rejected() -> None:
    with pytest.raises((KeyError, ValueError)):
        decode_item(StreamEntry("0-1", {"kind": "weird", "seq": "1"}))
    with pytest.raises(ValueError):
        decode_item(StreamEntry("0-1", {"kind": "skip", "seq": "0", "session_id": "s"}))


def test_a_buffer_an_outage_left_between_begin_and_commit_is_swept_once_the_lease_lapses(
    redis_client: redis.Redis,
) -> None:
    store = EpisodeStore(redis_client, KEYS, 200)
    handler = BoundaryHandler(store, POLICY)
    real_commit, real_release = store.commit, store.release
    outage = {"on": True}

    def commit(session_id: str, token: str, **kw: Any) -> int:
        if outage["on"]:  # Redis went away after begin took the lease: nothing written
            raise StoreUnavailable("redis", "commit boundary state: connection lost")
        return real_commit(session_id, token, **kw)

    def release(session_id: str, token: str) -> None:
        if outage["on"]:
            raise StoreUnavailable("redis", "release session lease: connection lost")
        real_release(session_id, token)

    store.commit = commit  # type: ignore[method-assign]
    store.release = release  # type: ignore[method-assign]
    items = [decode_item(turn_item(turn(i, i - 1), unit(1))) for i in (1, 2, 3)]
    with pytest.raises(StoreUnavailable):
        handler(items)
    outage["on"] = False
    # The stream worker's retry: a new token meets the old lease and only buffers (then the
    # entries are acked, and this session sends nothing more).
    handler(items)
    partition = KEYS.partition("s1")
    assert store.progress("s1")[0] == 0 and redis_client.hlen(KEYS.boundary_buffer("s1")) == 3
    assert store.waiting(partition) == ["s1"]
    count, oldest_ms = store.waiting_since(partition)
    assert count == 1 and oldest_ms is not None and oldest_ms >= 0
    handler.sweep([partition])  # the orphaned lease still holds: nothing to do yet
    assert store.progress("s1")[0] == 0
    deadline = time.monotonic() + 5
    while redis_client.exists(KEYS.boundary_lease("s1")):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    handler.sweep([partition])
    assert store.progress("s1")[0] == 3
    assert redis_client.hlen(KEYS.boundary_buffer("s1")) == 0
    assert store.waiting(partition) == [] and store.waiting_since(partition) == (0, None)


def test_the_sweep_drops_passed_entries_and_leaves_a_session_waiting_for_a_gap(
    redis_client: redis.Redis,
) -> None:
    store = EpisodeStore(redis_client, KEYS, 5000)
    handler = BoundaryHandler(store, POLICY)
    partition = KEYS.partition("s1")
    handler([decode_item(turn_item(turn(3, 2), unit(1)))])  # seq 1 and 2 still on their way
    assert store.waiting(partition) == ["s1"]
    handler.sweep([partition])
    assert store.progress("s1")[0] == 0 and store.waiting(partition) == ["s1"]
    handler([decode_item(turn_item(turn(i, i - 1), unit(1))) for i in (1, 2)])
    assert store.progress("s1")[0] == 3 and store.waiting(partition) == []
    # A redelivery buffered behind the pointer (stale) is dropped by the sweep.
    redis_client.hset(KEYS.boundary_buffer("s1"), "2", "{}")
    redis_client.zadd(KEYS.boundary_waiting(partition), {"s1": 1})
    handler.sweep([partition])
    assert redis_client.hlen(KEYS.boundary_buffer("s1")) == 0
    assert store.waiting(partition) == []
