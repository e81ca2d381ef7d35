"""kill -9 of random embed, boundary and reflect workers during a load loses and duplicates
nothing: every turn in Qdrant exactly once, every episode closed exactly once with the
session's turns in order, every fact created once.

Phase 1: a producer ingests (stable turn ids, `close_session` at each session's end) while
one embed worker and two boundary workers run; every 0.5-1.5 s one of them, picked at random,
is SIGKILLed and restarted (the embedded Qdrant folder takes one process at a time, so there
is one embed worker). Phase 2: reflect workers (a scripted LLM that answers in ~50 ms, so
kills land mid-job) are SIGKILLed and restarted the same way. rq notices a job whose worker
died only once its heartbeat TTL (job timeout + 60 s) runs out; the test moves that clock
forward (`StartedJobRegistry.cleanup` with a later timestamp) instead of waiting, then a
last worker drains the queue.

CI: 8 sessions x 60 turns. ``HIVEMEM_SOAK=1``: 100 sessions x 100 turns (10k).
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from integration_support import KEYS, conversation, processed_count, worker_env

from hivemem.config import Settings
from hivemem.errors import NotFound
from hivemem.producer.client import MemoryClient
from hivemem.store.episodes import EpisodeStore
from hivemem.store.reflection import ReflectionState
from hivemem.store.vectors.edge import EdgeVectorStore
from tests.support.scripted_llm import Reply, ScriptedLLM

pytestmark = pytest.mark.integration

SOAK = os.environ.get("HIVEMEM_SOAK") == "1"
N_SESSIONS = 100 if SOAK else 8
PER_SESSION = 100 if SOAK else 60
DIM = 64
WORKERS = [sys.executable, "-m", "hivemem.workers"]
# The prompt shows each turn as "[t1] (who, timestamp) content" (short aliases).
_TURN_LINE = re.compile(r"^\[(t\d+)\] \([^)]*\) (.+)$", re.MULTILINE)


def _llm_reply(request: dict[str, Any]) -> Reply:
    """One fact per episode: its first turn's statement (distinct per episode, and supported
    by the episode, as the parser requires), on a slot of its own."""
    prompt = "\n".join(m["content"] for m in request["messages"] if m["role"] == "user")
    first = _TURN_LINE.search(prompt)
    alias, content = (first.group(1), first.group(2)) if first else ("t1", "none")
    action = {"op": "add", "content": content, "kind": "decision",
              "subject": f"episode step {content.split(':')[0]}", "confidence": 0.9,
              "source_turn_ids": [alias]}
    return Reply(text=json.dumps({"actions": [action]}), delay_s=0.05)


class Chaos:
    """Keeps named worker processes running; `strike()` SIGKILLs one and restarts it."""

    def __init__(self, start: Callable[..., Any], env: dict[str, str], rng: random.Random):
        self.start, self.env, self.rng = start, env, rng
        self.running: dict[str, Any] = {}
        self.kills: Counter[str] = Counter()

    def spawn(self, name: str, kind: str, *args: str) -> None:
        self.running[name] = self.start(self.env, kind, "--name", name, *args,
                                        command=WORKERS)

    def strike(self) -> None:
        """Kill a worker of the kind killed least so far (every kind gets its share)."""
        kinds = sorted({n.split("-")[0] for n in self.running})
        fewest = min(self.kills[k] for k in kinds)
        kind = self.rng.choice([k for k in kinds if self.kills[k] == fewest])
        name = self.rng.choice(sorted(n for n in self.running if n.startswith(kind)))
        proc = self.running[name]
        assert proc.process.poll() is None, f"{name} died by itself:\n{proc.output()[-3000:]}"
        proc.signal(signal.SIGKILL)
        proc.process.wait(timeout=10)
        kind = name.split("-")[0]
        self.kills[kind] += 1
        del self.running[name]
        if kind == "reflect":
            # rq refuses a second worker of the same name until the dead one's registration
            # expires (~7 min): a restarted reflect worker takes a new name.
            name = f"reflect-{self.kills[kind] + 1}"
        # A restarted stream worker keeps its consumer name: it takes its own pending first.
        self.spawn(name, kind)

    def stop_all(self) -> None:
        for proc in self.running.values():
            if proc.process.poll() is None:
                proc.signal(signal.SIGTERM)
        for proc in self.running.values():
            proc.wait(timeout=60)
        self.running.clear()


def _env(redis_url: str, qdrant: Path, llm_url: str) -> dict[str, str]:
    return worker_env(redis_url, qdrant, extra={
        "HIVEMEM_WORKER__BATCH_SIZE": "64",
        "HIVEMEM_WORKER__CLAIM_IDLE_MS": "1000",
        "HIVEMEM_WORKER__CLAIM_INTERVAL_S": "0.2",
        "HIVEMEM_WORKER__BACKOFF_MAX_S": "0.5",
        "HIVEMEM_EPISODES__MAX_TURNS": "6",
        "HIVEMEM_LLM__PROVIDER": "openai",
        "HIVEMEM_LLM__BASE_URL": llm_url,
        "HIVEMEM_LLM__MODEL": "scripted",
        "HIVEMEM_LLM__TIMEOUT_S": "5",
        "HIVEMEM_REFLECTION__LOCK_LEASE_MS": "1000",
        "HIVEMEM_REFLECTION__RETRY_INTERVALS_S": "[1]",
        "HIVEMEM_REFLECTION__RETRIES": "5",
        "HIVEMEM_REFLECTION__JOB_TIMEOUT_S": "30",
        "HIVEMEM_REFLECTION__DEDUP_THRESHOLD": "1.0",
    })


def _phase_load(
    chaos: Chaos, producer: MemoryClient, real_redis: redis.Redis, sessions: list[str],
    turns: list[dict[str, Any]],
) -> None:
    """Ingest (closing each session after its last turn) with kills every 0.5-1.5 s, until
    every turn is embedded and every seq assigned to an episode."""
    rng = chaos.rng

    def produce() -> None:
        by_session: Counter[str] = Counter()
        for start in range(0, len(turns), 40):
            chunk = turns[start : start + 40]
            producer.ingest_many(chunk)
            for t in chunk:
                by_session[t["session_id"]] += 1
                if by_session[t["session_id"]] == PER_SESSION:
                    producer.close_session(t["session_id"])
            time.sleep(pace)

    pace = (30.0 if SOAK else 4.0) / (len(turns) / 40)  # the load lasts ~4 s (soak: ~30 s)

    def settled() -> bool:
        # Every turn embedded, every seq (turns + the close_session) assigned.
        try:
            return all(
                (st.turns_processed, st.turns_assigned) == (PER_SESSION, PER_SESSION + 1)
                for st in (producer.get_session_stats(sid) for sid in sessions)
            )
        except NotFound:  # a session the loader has not written to yet
            return False

    loader = threading.Thread(target=produce)
    loader.start()
    deadline = time.monotonic() + (900 if SOAK else 150)
    next_kill = time.monotonic() + rng.uniform(0.5, 1.5)
    def enough_kills() -> bool:
        return chaos.kills["embed"] >= 2 and chaos.kills["boundary"] >= 2

    while loader.is_alive() or not settled() or not enough_kills():
        if time.monotonic() >= deadline:
            stats = [producer.get_session_stats(sid) for sid in sessions]
            logs = {k: p.output()[-1500:] for k, p in chaos.running.items()}
            pytest.fail(
                f"phase 1 did not finish: processed {processed_count(real_redis, sessions)},"
                f" assigned {[s.turns_assigned for s in stats]}, kills {dict(chaos.kills)},"
                f" stages {stats[0].stages}\n{logs}"
            )
        if time.monotonic() >= next_kill and (loader.is_alive() or not enough_kills()):
            chaos.strike()
            next_kill = time.monotonic() + rng.uniform(0.5, 1.5)
        time.sleep(0.05)
    loader.join()
    chaos.stop_all()


def _phase_reflect(
    chaos: Chaos, start_worker: Callable[..., Any], real_redis: redis.Redis,
    sessions: list[str], queue_name: str,
) -> int:
    """Reflect workers killed at random while jobs run; then rq's abandoned-job detection
    (its clock moved forward) and a last worker. Returns the number of episodes."""
    episodes = EpisodeStore(real_redis, KEYS, 1000)
    reflection = ReflectionState(real_redis, KEYS)
    total = sum(len(episodes.episodes(sid)) for sid in sessions)

    def reflected() -> int:
        return sum(reflection.reflected(sid) for sid in sessions)

    chaos.spawn("reflect-1", "reflect")
    kills = 0
    while kills < (8 if SOAK else 3) and reflected() < total:
        time.sleep(chaos.rng.uniform(1.0, 2.5))
        chaos.strike()
        kills += 1
    chaos.stop_all()
    from rq import Queue
    from rq.registry import StartedJobRegistry

    queue = Queue(queue_name, connection=real_redis)
    StartedJobRegistry(queue=queue).cleanup(timestamp=time.time() + 3600)
    last = start_worker(chaos.env, "reflect", "--name", "reflect-final", command=WORKERS)
    deadline = time.monotonic() + (600 if SOAK else 120)
    while reflected() < total:
        assert last.process.poll() is None, last.output()[-3000:]
        assert time.monotonic() < deadline, f"reflected {reflected()}/{total}"
        time.sleep(0.1)
    last.signal(signal.SIGTERM)
    # 0: it finished its job and stopped; -SIGTERM: there was nothing left for it and the
    # signal came while it was still starting (before rq installs its handlers).
    assert last.wait(timeout=60) in (0, -signal.SIGTERM), last.output()[-3000:]
    return total


def _check_episodes(
    producer: MemoryClient, real_redis: redis.Redis, sessions: list[str]
) -> dict[str, list[Any]]:
    """Closed exactly once, in order, covering each session's turns once; all reflected."""
    assert real_redis.xlen(KEYS.dead_letters(KEYS.turns_stream(0))) == 0
    assert real_redis.xlen(KEYS.dead_letters(KEYS.embedded_stream(0))) == 0
    episodes = EpisodeStore(real_redis, KEYS, 1000)
    reflection = ReflectionState(real_redis, KEYS)
    out: dict[str, list[Any]] = {}
    for sid in sessions:
        stats = producer.get_session_stats(sid)
        assert (stats.turns_processed, stats.turns_dead_lettered) == (PER_SESSION, 0), stats
        eps = episodes.episodes(sid)
        out[sid] = eps
        assert [e.index for e in eps] == list(range(1, len(eps) + 1)), sid
        ids = [tid for e in eps for tid in e.turn_ids]
        assert ids == [f"{sid}-t{i}" for i in range(PER_SESSION)], sid
        assert len({e.episode_id for e in eps}) == len(eps)
        assert reflection.reflected(sid) == len(eps), sid
    return out


def _check_store(qdrant: Path, sessions: list[str], episodes: dict[str, list[Any]]) -> int:
    """Each turn once, in its session's order; each episode's fact, none twice."""
    store = EdgeVectorStore(qdrant, DIM)
    try:
        stored = list(store.iter_turns())
        assert len(stored) == len(sessions) * PER_SESSION
        assert max(Counter((t.session_id, t.seq) for t in stored).values()) == 1
        for sid in sessions:
            mine = sorted((t for t in stored if t.session_id == sid), key=lambda t: t.seq)
            assert [t.turn_id for t in mine] == [f"{sid}-t{i}" for i in range(PER_SESSION)]
        facts = [f for sid in sessions for f in store.list_facts(sid, None)]
        contents = Counter(f.content for f in facts)
        assert max(contents.values()) == 1, contents.most_common(3)
        text = {t.turn_id: t.content for t in stored}
        # The LLM reflects on top of the change rules: the rules add facts of their own beside
        # each episode's LLM fact, and drop an LLM add that would overturn what they decided
        # (a few of these statements name the same things). Whatever survives, nothing is
        # written twice (above), and the episodes' LLM facts are there, bar those few.
        expected = {text[e.turn_ids[0]] for eps in episodes.values() for e in eps}
        missing = expected - set(contents)
        assert len(missing) <= len(expected) // 20, sorted(missing)
        return len(facts)
    finally:
        store.close()


def test_sigkill_random_workers_during_load_loses_and_duplicates_nothing(
    tmp_path: Path, redis_url: str, real_redis: redis.Redis, start_worker
) -> None:
    sessions = [f"cr-s{i:03d}" for i in range(N_SESSIONS)]
    turns = conversation(sessions, PER_SESSION)
    settings = Settings.model_validate({
        "redis": {"url": redis_url, "partitions": 1},
        "embedding": {"provider": "hashing", "dim": DIM}})
    with ScriptedLLM(default=Reply(body=_llm_reply)) as llm, \
            MemoryClient(settings) as producer:
        chaos = Chaos(start_worker, _env(redis_url, tmp_path / "qdrant", llm.url),
                      random.Random(8))
        chaos.spawn("embed-1", "embed")
        chaos.spawn("boundary-1", "boundary")
        chaos.spawn("boundary-2", "boundary")
        _phase_load(chaos, producer, real_redis, sessions, turns)
        assert chaos.kills["embed"] >= 1 and chaos.kills["boundary"] >= 1, chaos.kills
        total = _phase_reflect(chaos, start_worker, real_redis, sessions,
                               settings.episodes.reflect_queue)
        assert chaos.kills["reflect"] >= 1
        episodes = _check_episodes(producer, real_redis, sessions)
    assert total >= N_SESSIONS * PER_SESSION // 6
    facts = _check_store(tmp_path / "qdrant", sessions, episodes)
    print(f"\nkills: {dict(chaos.kills)}; turns {len(turns)}, episodes {total}, facts {facts}")
