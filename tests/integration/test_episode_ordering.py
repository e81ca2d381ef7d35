"""Episode boundaries do not depend on how many boundary workers run, or on one dying.

50 sessions x 200 turns, interleaved across sessions, with timestamps and roles chosen so that
every rule fires: time gaps (with a clock that sometimes steps back), tool results, explicit
`close_episode` controls, `max_turns`, topic shifts (the hashing embedder is deterministic, so
they are too), short episodes carried forward, and `close_session` on half of the sessions (the
other half keep an open episode).

The embed stage runs once (one `--burst` process: the Qdrant folder takes one process). Then
the boundary stage runs twice on two copies of the same embedded stream:

- (a) reference: one boundary worker, `--burst`, on Redis db 0 (where the embed stage wrote);
- (b) four boundary workers at once with small batches and short lease/claim times, one of them
  SIGKILLed while it holds pending entries after episodes have closed, plus a `--burst`
  replacement, on db 1.

Why a copy in another Redis database rather than a second ingest under another key prefix: the
rq queue ("hivemem-reflect") and the rq job keys (`rq:job:reflect-<episode_id>`) do not carry
hivemem's key prefix, and episode ids are deterministic, so two runs with different prefixes
on one database would enqueue the same job ids into the same queue. A second database keeps
everything apart, and copying the embedded stream (entry ids included) gives (b) exactly the
input (a) had, without a second embed run.

Both runs must also agree with the rules applied sequentially in-process (the pure step
functions over each session's entries in seq order).
"""

from __future__ import annotations

import itertools
import json
import random
import signal
import sys
import time
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from integration_support import KEYS, worker_env

from hivemem.config import Settings
from hivemem.domain.episode import (
    Episode,
    SessionEpisodes,
    step_control,
    step_turn,
)
from hivemem.pipeline.messages import (
    EmbeddedItem,
    EmbeddedTurn,
    EpisodeControl,
    decode_embedded,
    embedded_items,
)
from hivemem.producer.client import MemoryClient
from hivemem.store.episodes import EpisodeStore
from hivemem.workers.boundary import policy_from

pytestmark = pytest.mark.integration

N_SESSIONS = 50
PER_SESSION = 200
DIM = 64
BOUNDARY_CMD = [sys.executable, "-m", "hivemem.workers", "boundary"]
EMBED_CMD = [sys.executable, "-m", "hivemem.workers", "embed"]
REFLECT_QUEUE = "hivemem-reflect"  # settings.episodes.reflect_queue's default

_TOPICS = (
    "billing invoices refund currency rounding ledger",
    "kubernetes deploy rollout helm chart liveness probe",
    "search index postgres full text ranking tokens",
    "mobile login oauth token refresh expiry session",
    "warehouse export nightly parquet schema partition",
    "webhook retries signature backoff delivery queue",
    "pdf renderer fonts layout pagination margins",
)
_FILLER = ("we", "checked", "again", "then", "because", "the", "numbers", "looked", "off",
           "today", "after", "lunch", "with", "the", "team")
_SHORT = ("ok", "thanks", "sounds good", "yes", "done")


def _workload(seed: int = 7) -> tuple[list[str], list[tuple[str, str, dict[str, Any]]]]:
    """(sessions, events in ingest order). An event: (session, "turn"|"close_episode"|
    "close_session", turn fields). Per session order is kept; sessions interleave at random."""
    rng = random.Random(seed)
    sessions = [f"ord-s{i:02d}" for i in range(N_SESSIONS)]
    per_session: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    base = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)
    for s, sid in enumerate(sessions):
        events: list[tuple[str, str, dict[str, Any]]] = []
        clock = base + timedelta(minutes=7 * s)
        topic = rng.randrange(len(_TOPICS))
        for i in range(PER_SESSION):
            roll = rng.random()
            if roll < 0.07:
                clock += timedelta(minutes=rng.randint(31, 240))  # time gap
            elif roll < 0.09:
                clock -= timedelta(minutes=rng.randint(1, 40))  # clock steps back: no gap
            else:
                clock += timedelta(seconds=rng.randint(5, 120))
            if rng.random() < 0.06:
                topic = rng.randrange(len(_TOPICS))  # may give a topic shift
            role = "tool" if rng.random() < 0.07 else ("user" if i % 2 == 0 else "assistant")
            if rng.random() < 0.1:
                content = rng.choice(_SHORT)  # too short for a topic shift
            else:
                words = rng.sample(_FILLER, 5)
                content = f"{_TOPICS[topic]} {' '.join(words)} step {i}"
            fields = {"session_id": sid, "role": role, "content": content,
                      "timestamp": clock, "turn_id": f"{sid}-t{i:03d}"}
            events.append((sid, "turn", fields))
            if rng.random() < 0.04:
                events.append((sid, "close_episode", {}))
        if s % 2 == 0:
            events.append((sid, "close_session", {}))
        per_session[sid] = events
    # Interleave: a shuffled list of session slots, each taking that session's next event.
    slots = [sid for sid, evs in per_session.items() for _ in evs]
    rng.shuffle(slots)
    cursors = dict.fromkeys(sessions, 0)
    ordered: list[tuple[str, str, dict[str, Any]]] = []
    for sid in slots:
        ordered.append(per_session[sid][cursors[sid]])
        cursors[sid] += 1
    return sessions, ordered


def _producer_settings(redis_url: str) -> Settings:
    # Not integration_support.server_settings: it sets claim_idle_ms=200 under the default
    # episodes.lease_ms (10 s), which Settings rejects.
    return Settings.model_validate(
        {"redis": {"url": redis_url, "partitions": 1},
         "embedding": {"provider": "hashing", "dim": DIM}}
    )


def _ingest(client: MemoryClient, events: list[tuple[str, str, dict[str, Any]]]) -> None:
    """Turns go in batches; a control flushes the batch first so it follows its turns."""
    batch: list[dict[str, Any]] = []
    for sid, kind, fields in events:
        if kind == "turn":
            batch.append(fields)
            if len(batch) >= 500:
                client.ingest_many(batch)
                batch = []
            continue
        if batch:
            client.ingest_many(batch)
            batch = []
        if kind == "close_episode":
            client.close_episode(sid)
        else:
            client.close_session(sid)
    if batch:
        client.ingest_many(batch)


def _copy_stream(src: redis.Redis, dst: redis.Redis, stream: str) -> int:
    """Copy every entry, with its id, in order."""
    last = "-"
    copied = 0
    while True:
        rows = src.xrange(stream, min=last, max="+", count=2000)
        if last != "-":
            rows = rows[1:]  # xrange's min is inclusive
        if not rows:
            return copied
        pipe = dst.pipeline(transaction=False)
        for entry_id, fields in rows:
            pipe.xadd(stream, fields, id=entry_id)
        pipe.execute()
        copied += len(rows)
        last = rows[-1][0].decode()


def _embedded_items(client: redis.Redis) -> list[EmbeddedItem]:
    """Every item on the embedded stream (an entry of several turns gives each)."""
    return [item for _, raw in client.xrange(KEYS.embedded_stream(0))
            for item in embedded_items(decode_embedded(
                {k.decode(): v.decode() for k, v in raw.items()}))]


def _sequential_reference(
    client: redis.Redis, sessions: list[str], policy: Any
) -> tuple[dict[str, list[Episode]], dict[str, list[str]]]:
    """The rules applied in seq order in-process: (closed episodes, open episode's turn ids)."""
    by_session: dict[str, dict[int, EmbeddedItem]] = defaultdict(dict)
    for item in _embedded_items(client):
        by_session[item.session_id][item.seq] = item
    closed: dict[str, list[Episode]] = {}
    open_ids: dict[str, list[str]] = {}
    for sid in sessions:
        state = SessionEpisodes(session_id=sid)
        out: list[Episode] = []
        entries = by_session[sid]
        assert sorted(entries) == list(range(1, len(entries) + 1)), sid
        for seq in sorted(entries):
            f = entries[seq]
            if isinstance(f, EmbeddedTurn):
                out.extend(step_turn(state, f.turn, f.vector, policy))
            elif isinstance(f, EpisodeControl):
                out.extend(step_control(state, f.action))
        closed[sid] = out
        open_ids[sid] = list(state.open.turn_ids) if state.open else []
    return closed, open_ids


def _snapshot(
    client: redis.Redis, sessions: list[str], lease_ms: int
) -> tuple[dict[str, list[Episode]], dict[str, tuple[int, list[str]]]]:
    """(closed episodes per session, (turns assigned, open episode's turn ids) per session)."""
    store = EpisodeStore(client, KEYS, lease_ms)
    closed = {sid: store.episodes(sid) for sid in sessions}
    state: dict[str, tuple[int, list[str]]] = {}
    for sid in sessions:
        assigned, count, open_ep, _ = store.progress(sid)
        assert count == len(closed[sid]), sid
        state[sid] = (assigned, list(open_ep.turn_ids) if open_ep else [])
    return closed, state


def _summary(episodes: dict[str, list[Episode]]) -> dict[str, list[tuple[Any, ...]]]:
    return {
        sid: [(e.index, e.turn_ids, e.seq_start, e.seq_end, e.close_reason) for e in eps]
        for sid, eps in episodes.items()
    }


def _check_outputs(client: redis.Redis, episodes: dict[str, list[Episode]]) -> None:
    """One outbox entry (its reflect job to be) and one stored body per closed episode;
    nothing left pending."""
    ids = [e.episode_id for eps in episodes.values() for e in eps]
    assert len(set(ids)) == len(ids)
    outbox = [f[b"episode_id"].decode() for _, f in client.xrange(KEYS.outbox_stream(0))]
    assert Counter(outbox) == Counter(ids)
    stored = [json.loads(client.get(KEYS.episode(e.session_id, e.episode_id)))["episode_id"]
              for eps in episodes.values() for e in eps]
    assert stored == ids
    info = client.xpending(KEYS.embedded_stream(0), "boundary")
    assert info["pending"] == 0
    groups = {g["name"]: g for g in client.xinfo_groups(KEYS.embedded_stream(0))}
    assert groups[b"boundary"]["lag"] == 0
    assert client.xlen(KEYS.dead_letters(KEYS.embedded_stream(0))) == 0


def _closed_count(client: redis.Redis) -> int:
    """Episodes closed so far: each close writes its outbox entry in the same atomic step
    (no dispatcher runs in these tests)."""
    return int(client.xlen(KEYS.outbox_stream(0)))


def _run_parallel_with_kill(
    start_worker: Any, redis_url: str, client: redis.Redis, kill_after: int
) -> dict[str, int]:
    """Run (b): four workers, small batches, short leases; one is SIGKILLed once `kill_after`
    episodes closed, while it holds entries; a `--burst` replacement joins. Returns counts."""
    fast = {
        "HIVEMEM_EMBEDDING__DIM": str(DIM),
        "HIVEMEM_WORKER__BATCH_SIZE": "16",
        "HIVEMEM_WORKER__CLAIM_IDLE_MS": "1000",
        "HIVEMEM_WORKER__CLAIM_INTERVAL_S": "0.2",
        "HIVEMEM_EPISODES__LEASE_MS": "300",
        "HIVEMEM_WORKER__TRIM_INTERVAL_S": "0",  # (the reference reads the stream after)
    }
    env = worker_env(redis_url, None, extra=fast)
    workers = [
        start_worker(env, "--burst", "--name", f"par-{i}", command=BOUNDARY_CMD)
        for i in range(4)
    ]
    # The workers divide the partitions by lease (one here): kill whichever holds entries.
    deadline = time.monotonic() + 40
    doomed = None
    while doomed is None:
        assert time.monotonic() < deadline, "no chance to kill mid-run:\n" + "\n".join(
            w.output()[-800:] for w in workers)
        if _closed_count(client) >= kill_after:
            for i, worker in enumerate(workers):
                if worker.process.poll() is None and client.xpending_range(
                    KEYS.embedded_stream(0), "boundary", min="-", max="+", count=1,
                    consumername=f"par-{i}",
                ):
                    worker.signal(signal.SIGKILL)
                    doomed = (i, worker)
                    break
        time.sleep(0.002)
    index, killed = doomed
    assert killed.process.wait(timeout=10) == -signal.SIGKILL
    orphans = client.xpending_range(KEYS.embedded_stream(0), "boundary", min="-", max="+",
                                    count=1000, consumername=f"par-{index}")
    assert orphans, "the kill did not land while the worker held entries"
    closed_at_kill = _closed_count(client)
    leases_at_kill = len(client.keys(f"{KEYS.tag(0)}:s:*:ep:lease"))
    replacement = start_worker(env, "--burst", "--name", "par-new", command=BOUNDARY_CMD)
    survivors = [*(w for w in workers if w is not killed), replacement]
    for worker in survivors:
        # The burst ends when every entry is done: at load 7+ on 2 cores that took over 60 s
        # (the test asks for the same episodes, not for a speed).
        assert worker.wait(timeout=180) == 0, worker.output()
    reclaimed = sum(w.summary()["reclaimed"] for w in survivors)
    assert reclaimed >= len(orphans)
    return {
        "orphans": len(orphans),
        "closed_at_kill": closed_at_kill,
        "leases_at_kill": leases_at_kill,
        "reclaimed": reclaimed,
        "lease_lost": sum(len(w.events("boundary.lease_lost")) for w in [*workers, replacement]),
    }


def _assert_partition(
    client: redis.Redis,
    sessions: list[str],
    turn_ids: dict[str, list[str]],
    closed: dict[str, list[Episode]],
    state: dict[str, tuple[int, list[str]]],
) -> None:
    """Every turn in exactly one episode or in the open one, in order; every seq assigned."""
    last_seq = dict.fromkeys(sessions, 0)
    for item in _embedded_items(client):
        last_seq[item.session_id] = max(last_seq[item.session_id], item.seq)
    for sid in sessions:
        flat = [t for e in closed[sid] for t in e.turn_ids] + state[sid][1]
        assert flat == turn_ids[sid], sid
        assert state[sid][0] == last_seq[sid], sid
        assert [e.index for e in closed[sid]] == list(range(1, len(closed[sid]) + 1))
        spans = [(e.seq_start, e.seq_end) for e in closed[sid]]
        assert all(a[0] <= a[1] < b[0] for a, b in itertools.pairwise(spans)), sid
        if int(sid[-2:]) % 2 == 0:
            assert state[sid][1] == [], sid  # close_session left nothing open


def test_many_boundary_workers_and_a_kill_give_the_same_episodes_as_one_worker(
    tmp_path: Path, redis_url: str, real_redis: redis.Redis, start_worker
) -> None:
    t0 = time.monotonic()
    sessions, events = _workload()
    turn_ids = {sid: [f["turn_id"] for s, k, f in events if s == sid and k == "turn"]
                for sid in sessions}
    db1 = redis.Redis.from_url(f"{redis_url}?db=1", socket_timeout=5)

    # Ingest, then the embed stage once.
    with MemoryClient(_producer_settings(redis_url)) as producer:
        _ingest(producer, events)
    env = worker_env(redis_url, tmp_path / "qdrant", extra={
        "HIVEMEM_EMBEDDING__DIM": str(DIM), "HIVEMEM_WORKER__BATCH_SIZE": "256"})
    embed = start_worker(env, "--burst", command=EMBED_CMD)
    assert embed.wait(timeout=60) == 0, embed.output()
    n_entries = real_redis.xlen(KEYS.embedded_stream(0))
    # One item per event (the embed stage publishes a session's turns of a batch as one
    # entry, so there are fewer entries than items).
    assert len(_embedded_items(real_redis)) == len(events)
    t_embed = time.monotonic()

    # The copy for run (b), taken before (a) starts: db 1 sees only the embedded stream.
    assert _copy_stream(real_redis, db1, KEYS.embedded_stream(0)) == n_entries

    # (a) the reference: one worker. Big batches: the batch size cannot change the episodes,
    # and one advance per session per batch is what a boundary worker's time goes on.
    # No trimming: the sequential reference reads the embedded stream after the run, and a
    # run past the 60 s trim interval (a loaded machine) dropped the entries it had acked.
    ref_env = worker_env(redis_url, None, extra={
        "HIVEMEM_EMBEDDING__DIM": str(DIM), "HIVEMEM_WORKER__BATCH_SIZE": "1000",
        "HIVEMEM_WORKER__TRIM_INTERVAL_S": "0"})
    ref = start_worker(ref_env, "--burst", "--name", "ref", command=BOUNDARY_CMD)
    # A hang guard, not a time limit: the stage runs every turn through the currency
    # keeper's rules (10,000 turns: ~57 s on a loaded 2-core machine), as (b)'s workers do.
    assert ref.wait(timeout=180) == 0, ref.output()
    t_ref = time.monotonic()

    # (b) four workers and a kill, on the copy.
    kill = _run_parallel_with_kill(start_worker, f"{redis_url}?db=1", db1, kill_after=400)
    t_par = time.monotonic()

    # Same episodes, the same open episodes, in both runs and in the sequential rules.
    policy_settings = _producer_settings(redis_url).episodes
    ref_closed, ref_state = _snapshot(real_redis, sessions, policy_settings.lease_ms)
    par_closed, par_state = _snapshot(db1, sessions, policy_settings.lease_ms)
    seq_closed, seq_open = _sequential_reference(real_redis, sessions,
                                                 policy_from(policy_settings))
    assert _summary(par_closed) == _summary(ref_closed)
    assert par_closed == ref_closed  # the whole episodes: times, markers, centroids, carried
    assert par_state == ref_state
    assert ref_closed == seq_closed
    assert {sid: s[1] for sid, s in ref_state.items()} == seq_open
    _assert_partition(real_redis, sessions, turn_ids, ref_closed, ref_state)

    # Exactly one rq job and one episodes-stream entry per closed episode, in both runs.
    _check_outputs(real_redis, ref_closed)
    _check_outputs(db1, par_closed)

    # The workload exercised every rule.
    reasons = Counter(e.close_reason for eps in ref_closed.values() for e in eps)
    assert set(reasons) == {"max_turns", "time_gap", "topic_shift", "tool_result", "manual",
                            "session"}, reasons
    assert any(e.carried for eps in ref_closed.values() for e in eps)
    print(
        f"\nentries={n_entries} episodes={sum(reasons.values())} reasons={dict(reasons)}"
        f" kill={kill} ingest+embed={t_embed - t0:.1f}s ref={t_ref - t_embed:.1f}s"
        f" parallel={t_par - t_ref:.1f}s"
    )
    db1.close()
