#!/usr/bin/env python
"""Chaos soak: faults of every kind at random under steady ingest, then the books checked.

    python bench/chaos.py                 # 10 minutes, 20 faults of each kind
    python bench/chaos.py --quick         # 90 s, 2 of each kind
    python bench/chaos.py --duration 1200 --per-kind 40 --rate 20

The deployment, started here: one redis-server with AOF (appendfsync everysec, on a unix
socket), the networked Qdrant stand-in, and worker processes (`python -m hivemem.workers`):
2 embed, 2 boundary, 2 reflect (the reflect workers also dispatch the outbox; heuristic
reflector). A producer thread ingests at `--rate` turns/s over `--sessions` sessions,
retrying a failed ingest with the same turn id (what a careful producer does); a turn is
acknowledged when `ingest` returns.

Fault kinds (shuffled, evenly spaced over the run; the same ones tests/integration/
test_fault_outage.py and test_cluster_pipeline.py stage once each):
- redis_kill: SIGKILL of Redis, restarted on the same socket and AOF 1-3 s later;
- redis_pause: SIGSTOP of Redis for 1-3 s, then SIGCONT (a stalled network or host);
- kill_embed, kill_boundary, kill_reflect: SIGKILL of one worker of that stage, a new one
  started in its place (a new name: rq keeps a dead worker's name for minutes);
- term_worker: SIGTERM of a worker of any stage (a warm shutdown), a new one in its place.

Per fault kind, the longest stall: per partition and stage (embed: turns embedded, boundary:
turns assigned to episodes, reflect: closed episodes reflected), the longest time the stage
stayed behind on that partition without moving (polled every 0.25 s, so about 0.25-0.5 s
is the floor), counted against the last fault injected before it began. And the catch-up:
seconds from the fault until everything acknowledged (or closed) before it was done, which
can include the faults that followed (they come every few seconds). After the run: the faults stop, every session is closed, the pipeline drains,
and the books: acknowledged, processed (in Qdrant), duplicated (a turn id with a second seq
or in two episodes), lost (acknowledged and not in Qdrant), dead-lettered, unreflected,
episodes out of order, jobs left started, workers that exited on their own.
Saved to bench/results/latest/chaos.json (--quick: results/quick/).
"""

from __future__ import annotations

import argparse
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "integration"))

import redis  # noqa: E402
from harness import machine_facts, write_result  # noqa: E402
from integration_support import WorkerProcess, conversation, worker_env  # noqa: E402

from hivemem.config import Settings  # noqa: E402
from hivemem.errors import StoreUnavailable  # noqa: E402
from hivemem.pipeline.topology import Keys  # noqa: E402
from hivemem.producer.client import MemoryClient  # noqa: E402
from hivemem.store.episodes import EpisodeStore  # noqa: E402
from hivemem.store.reflection import ReflectionState  # noqa: E402
from hivemem.store.vectors.base import TURNS  # noqa: E402
from hivemem.store.vectors.server import ServerVectorStore  # noqa: E402
from hivemem.testing import RedisServer  # noqa: E402
from tests.support.qdrant_standin import spawn  # noqa: E402

KINDS = ("redis_kill", "redis_pause", "kill_embed", "kill_boundary", "kill_reflect",
         "term_worker")
STAGES = ("embed", "boundary", "reflect")
PARTITIONS = 4
DIM = 64
KEYS = Keys("hm", PARTITIONS)
WORKERS = [sys.executable, "-m", "hivemem.workers"]
# The deployment's settings for the run: shorter reclaim and lock leases than the defaults,
# so that a killed worker's entries and locks are handed on in seconds (docs/deployment.md).
TUNING = {
    "HIVEMEM_REDIS__PARTITIONS": str(PARTITIONS),
    "HIVEMEM_REDIS__SOCKET_TIMEOUT": "2",
    "HIVEMEM_REDIS__CONNECT_TIMEOUT": "0.5",
    "HIVEMEM_WORKER__BATCH_SIZE": "64",
    "HIVEMEM_WORKER__BLOCK_MS": "200",
    "HIVEMEM_WORKER__CLAIM_IDLE_MS": "5000",
    "HIVEMEM_WORKER__CLAIM_INTERVAL_S": "1",
    "HIVEMEM_WORKER__BACKOFF_INITIAL_S": "0.05",
    "HIVEMEM_WORKER__BACKOFF_MAX_S": "1",
    "HIVEMEM_EPISODES__MAX_TURNS": "6",
    "HIVEMEM_EPISODES__LEASE_MS": "3000",
    "HIVEMEM_REFLECTION__LOCK_LEASE_MS": "10000",
    # A replacement started while Redis is away waits for it instead of exiting.
    "HIVEMEM_WORKER__STARTUP_WAIT_S": "60",
}


@dataclass
class Fault:
    kind: str
    at: float  # monotonic, when it was injected
    target: str
    recovered_at: float = 0.0
    # what had to catch up: acknowledged turns and closed episodes at the fault
    acked: int = 0
    closed: int = 0
    stall_s: dict[str, float | None] = field(default_factory=dict)


class Deployment:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        (folder / "redis").mkdir(parents=True)
        self.redis = RedisServer(folder / "redis", appendfsync="everysec")
        self.redis.start()
        self.qdrant = spawn(folder / "qdrant")
        self.env = worker_env(self.redis.url, None, extra={
            "HIVEMEM_QDRANT__URL": self.qdrant.url, "HIVEMEM_EMBEDDING__DIM": str(DIM),
            **TUNING})
        self.workers: dict[str, list[WorkerProcess]] = {s: [] for s in STAGES}
        self.generation = 0
        self.exited_on_their_own: list[str] = []
        self.told: set[int] = set()  # pids this script signalled

    def start_worker(self, stage: str) -> WorkerProcess:
        self.generation += 1
        name = f"{stage}-{self.generation}"
        log = self.folder / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen([*WORKERS, stage, "--name", name], env=self.env,
                                    cwd=self.folder, stdout=out, stderr=subprocess.STDOUT)
        worker = WorkerProcess(proc, log)
        self.workers[stage].append(worker)
        return worker

    def live(self, stage: str) -> list[WorkerProcess]:
        return [w for w in self.workers[stage] if w.process.poll() is None]

    def check_alive(self, expected: dict[str, int]) -> None:
        """A worker that exited without being told to is counted and replaced."""
        for stage, want in expected.items():
            while len(self.live(stage)) < want:
                gone = next(w for w in self.workers[stage] if w.process.poll() is not None
                            and w.pid not in self.told)
                self.told.add(gone.pid)
                self.exited_on_their_own.append(gone.log_path.name)
                self.start_worker(stage)

    def replace(self, stage: str, sig: int) -> str:
        victims = self.live(stage)
        victim = random.choice(victims)
        self.told.add(victim.pid)
        victim.process.send_signal(sig)
        if sig == signal.SIGKILL:
            victim.process.wait(timeout=10)
        self.start_worker(stage)
        return victim.log_path.stem

    def stop(self) -> None:
        for workers in self.workers.values():
            for w in workers:
                self.told.add(w.pid)
                if w.process.poll() is None:
                    w.process.send_signal(signal.SIGTERM)
        for workers in self.workers.values():
            for w in workers:
                try:
                    w.process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    w.kill()
        self.qdrant.stop()
        if self.redis.process is not None:
            self.redis.process.send_signal(signal.SIGCONT)
        self.redis.stop()


class Books:
    """What the producer acknowledged, and the pipeline's progress, polled: in total (for
    the catch-up times) and per partition and stage (for the stalls: a partition behind
    whose stage makes no progress is stalled, the way a dead worker's partitions are until
    another takes them over)."""

    def __init__(self, settings: Settings, sessions: list[str]) -> None:
        self.sessions = sessions
        self.acked: dict[str, list[str]] = {s: [] for s in sessions}
        self.acked_count = 0
        self.ingest_errors = 0
        self.settings = settings
        self.progress: dict[str, int] = {"embed": 0, "boundary": 0, "reflect": 0, "closed": 0}
        self._seen: dict[tuple[str, int], tuple[int, float, bool]] = {}
        self.stalls: list[tuple[str, int, float, float]] = []  # stage, partition, from, to

    def poll(self, redis: Any) -> None:
        episodes = EpisodeStore(redis, KEYS, 1000)
        reflection = ReflectionState(redis, KEYS)
        pipe = redis.pipeline(transaction=False)
        for sid in self.sessions:
            pipe.bitcount(KEYS.session_processed(sid))
        processed = [int(n) for n in pipe.execute()]
        per: dict[tuple[str, int], list[int]] = {}  # (stage, partition) -> [done, wanted]
        totals = {"embed": 0, "boundary": 0, "reflect": 0, "closed": 0}
        for sid, done in zip(self.sessions, processed, strict=True):
            part = KEYS.partition(sid)
            acked = len(self.acked[sid])
            got = episodes.progress(sid)
            assigned = min(got[0], acked)  # the close control is not a turn
            reflected = reflection.reflected(sid)
            for stage, have, want in (("embed", done, acked), ("boundary", assigned, acked),
                                      ("reflect", reflected, got[1])):
                cell = per.setdefault((stage, part), [0, 0])
                cell[0] += have
                cell[1] += want
            totals["embed"] += done
            totals["boundary"] += assigned
            totals["reflect"] += reflected
            totals["closed"] += got[1]
        self.progress = totals
        now = time.monotonic()
        for key, (have, want) in per.items():
            seen = self._seen.get(key)  # (value, first seen at, behind then)
            if seen is not None and seen[0] == have and have < want:
                continue  # still stuck (or still idle while behind): the interval goes on
            if seen is not None and seen[2]:
                self.stalls.append((*key, seen[1], now))
            self._seen[key] = (have, now, have < want)

    def close_stalls(self) -> None:
        now = time.monotonic()
        for key, (_value, since, behind) in self._seen.items():
            if behind:
                self.stalls.append((*key, since, now))
        self._seen.clear()


def produce(client: MemoryClient, turns: list[dict[str, Any]], books: Books, rate: float,
            stop: threading.Event) -> None:
    period = 1.0 / rate
    next_at = time.monotonic()
    for turn in turns:
        if stop.is_set():
            return
        while True:
            try:
                client.ingest(**turn)
                break
            except StoreUnavailable:
                books.ingest_errors += 1
                if stop.wait(0.05):
                    return
        books.acked[turn["session_id"]].append(turn["turn_id"])
        books.acked_count += 1
        next_at += period
        delay = next_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        else:
            next_at = time.monotonic()


def inject(dep: Deployment, kind: str) -> tuple[str, float]:
    """Inject one fault; returns (its target, when it was undone)."""
    if kind == "redis_kill":
        dep.redis.kill()
        time.sleep(random.uniform(1.0, 3.0))
        dep.redis.start(timeout=60)
        return "redis", time.monotonic()
    if kind == "redis_pause":
        assert dep.redis.process is not None
        dep.redis.process.send_signal(signal.SIGSTOP)
        time.sleep(random.uniform(1.0, 3.0))
        dep.redis.process.send_signal(signal.SIGCONT)
        return "redis", time.monotonic()
    if kind == "term_worker":
        stage = random.choice(STAGES)
        return dep.replace(stage, signal.SIGTERM), time.monotonic()
    stage = kind.removeprefix("kill_")
    return dep.replace(stage, signal.SIGKILL), time.monotonic()


def measure_stalls(faults: list[Fault], books: Books, now: float) -> None:
    p = books.progress
    for f in faults:
        for stage, target in (("embed", f.acked), ("boundary", f.acked),
                              ("reflect", f.closed)):
            if f.stall_s.get(stage) is None and p[stage] >= target:
                f.stall_s[stage] = round(now - f.at, 2)


def run(args: argparse.Namespace) -> dict[str, Any]:
    random.seed(args.seed)
    duration = 90.0 if args.quick else args.duration
    per_kind = 2 if args.quick else args.per_kind
    folder = Path(tempfile.mkdtemp(prefix="hivemem-chaos-"))
    dep = Deployment(folder)
    expected = {"embed": 2, "boundary": 2, "reflect": 2}
    for stage, n in expected.items():
        for _ in range(n):
            dep.start_worker(stage)
    settings = Settings.model_validate({
        "redis": {"url": dep.redis.url, "partitions": PARTITIONS, "socket_timeout": 2,
                  "connect_timeout": 0.5},
        "embedding": {"provider": "hashing", "dim": DIM}, "qdrant": {"url": dep.qdrant.url},
    })
    sessions = [f"chaos-s{i}" for i in range(args.sessions)]
    per_session = int(duration * args.rate / len(sessions)) + 1
    turns = conversation(sessions, per_session)
    books = Books(settings, sessions)
    faults: list[Fault] = []
    plan = [k for k in KINDS for _ in range(per_kind)]
    random.shuffle(plan)
    gap = duration / (len(plan) + 1)
    deadline_ready = time.monotonic() + 120
    while not all(w.events("worker.started") for ws in dep.workers.values() for w in ws):
        if time.monotonic() > deadline_ready:
            raise SystemExit("the workers did not start")
        time.sleep(0.2)
    stop = threading.Event()
    client = MemoryClient(settings)
    producer = threading.Thread(target=produce, args=(client, turns, books, args.rate, stop),
                                daemon=True)
    probe = dep.redis.client()
    started = time.monotonic()
    producer.start()
    print(f"chaos: {len(plan)} faults over {duration:.0f} s, {args.rate} turns/s over "
          f"{len(sessions)} sessions; folder {folder}", flush=True)

    def watch(until: float) -> None:
        while time.monotonic() < until:
            try:
                books.poll(probe)
                measure_stalls(faults, books, time.monotonic())
            except (redis.RedisError, StoreUnavailable):  # Redis away: poll again
                pass
            dep.check_alive(expected)
            time.sleep(0.25)

    for i, kind in enumerate(plan):
        watch(started + gap * (i + 1))
        fault = Fault(kind, time.monotonic(), "", acked=books.acked_count,
                      closed=books.progress["closed"])
        faults.append(fault)
        fault.target, fault.recovered_at = inject(dep, kind)
        print(f"  {time.monotonic() - started:6.1f}s {kind:13s} {fault.target}"
              f" (acked {books.acked_count})", flush=True)
    watch(started + duration)
    stop.set()
    producer.join(timeout=60)
    ingest_s = time.monotonic() - started
    # Close every session, then let the pipeline drain.
    for sid in sessions:
        while True:
            try:
                client.close_session(sid)
                break
            except StoreUnavailable:
                time.sleep(0.1)
    drain_started = time.monotonic()
    closed_target = 0
    while time.monotonic() - drain_started < args.drain_s:
        try:
            books.poll(probe)
            measure_stalls(faults, books, time.monotonic())
            p = books.progress
            closed_target = p["closed"]
            done_assigning = all(
                EpisodeStore(probe, KEYS, 1000).progress(s)[0] >= len(books.acked[s]) + 1
                for s in sessions)
            if (p["embed"] >= books.acked_count and done_assigning
                    and p["reflect"] >= closed_target):
                break
        except (redis.RedisError, StoreUnavailable):
            pass
        dep.check_alive(expected)
        time.sleep(0.5)
    drain_s = time.monotonic() - drain_started
    result = audit(dep, settings, books, probe)
    result.update({
        "duration_s": round(ingest_s, 1), "drain_s": round(drain_s, 1),
        "rate_turns_per_s": args.rate, "sessions": len(sessions), "per_kind": per_kind,
        "faults": len(faults), "ingest_retries": books.ingest_errors,
        "workers_exited_on_their_own": dep.exited_on_their_own,
        "settings": TUNING,
    })
    by_kind: dict[str, Any] = {}
    for kind in KINDS:
        mine = [f for f in faults if f.kind == kind]
        longest: dict[str, float | None] = {}
        for stage in STAGES:
            values = [f.stall_s.get(stage) for f in mine]
            known = [v for v in values if v is not None]
            longest[stage] = max(known) if known and len(known) == len(values) else None
        by_kind[kind] = {"count": len(mine), "longest_catch_up_s": longest}
    books.close_stalls()
    for kind in KINDS:
        by_kind[kind]["longest_stall_s"] = {stage: 0.0 for stage in STAGES}
    for stage, _part, since, until in books.stalls:
        cause = next((f for f in reversed(faults) if f.at <= since + 0.3), None)
        if cause is None:
            continue
        cell = by_kind[cause.kind]["longest_stall_s"]
        cell[stage] = max(cell[stage], round(until - since, 2))
    result["by_kind"] = by_kind
    result["fault_log"] = [{"kind": f.kind, "at_s": round(f.at - started, 1),
                            "target": f.target, "stall_s": f.stall_s} for f in faults]
    client.close()
    probe.close()
    dep.stop()
    return result


def audit(dep: Deployment, settings: Settings, books: Books, probe: Any) -> dict[str, Any]:
    vectors = ServerVectorStore(settings.qdrant, DIM)
    episodes = EpisodeStore(probe, KEYS, 1000)
    reflection = ReflectionState(probe, KEYS)
    processed = duplicated = lost = unassigned = dead = unreflected = out_of_order = 0
    client = MemoryClient(settings)
    for sid in books.sessions:
        acked = books.acked[sid]
        stats = client.get_session_stats(sid)
        in_qdrant = vectors.count(TURNS, {"session_id": sid})
        processed += min(in_qdrant, len(acked))
        lost += max(0, len(acked) - in_qdrant)
        duplicated += max(0, stats.turns_enqueued - len(acked))
        dead += stats.turns_dead_lettered
        eps = episodes.episodes(sid)
        members = [t for e in eps for t in e.turn_ids]
        duplicated += len(members) - len(set(members))
        known, closed_ids = set(acked), set(members)
        unassigned += len(known - closed_ids)  # acknowledged, in no closed episode
        in_order = [t for t in members if t in known] == [t for t in acked if t in closed_ids]
        if not in_order or [e.index for e in eps] != list(range(1, len(eps) + 1)):
            out_of_order += 1
        unreflected += max(0, len(eps) - reflection.reflected(sid))
    client.close()
    vectors.close()
    from rq import Queue

    queue = Queue(settings.episodes.reflect_queue, connection=dep.redis.client())
    return {
        "acked": books.acked_count, "processed": processed, "duplicated": duplicated,
        "lost": lost, "unassigned": unassigned, "dead_lettered": dead,
        "unreflected": unreflected,
        "sessions_out_of_order": out_of_order,
        "jobs_left_started": queue.started_job_registry.get_job_count(cleanup=False),
        "jobs_failed": queue.failed_job_registry.get_job_count(cleanup=False),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--quick", action="store_true", help="90 s, 2 faults of each kind")
    ap.add_argument("--duration", type=float, default=600.0, help="seconds of faults")
    ap.add_argument("--per-kind", type=int, default=20, help="faults of each kind")
    ap.add_argument("--rate", type=float, default=15.0, help="turns per second ingested")
    ap.add_argument("--sessions", type=int, default=40)
    ap.add_argument("--drain-s", type=float, default=300.0,
                    help="longest wait for the pipeline to drain after the faults")
    ap.add_argument("--seed", type=int, default=39)
    args = ap.parse_args()
    result = {"benchmark": "chaos", **run(args), "machine": machine_facts()}
    keys = ("acked", "processed", "duplicated", "lost", "unassigned", "dead_lettered",
            "unreflected", "sessions_out_of_order", "jobs_left_started")
    print("\n" + " ".join(f"{k}={result[k]}" for k in keys))
    print(f"workers that exited on their own: {len(result['workers_exited_on_their_own'])}")
    for kind, r in result["by_kind"].items():
        stalls = ", ".join(f"{s} {v}s" for s, v in r["longest_stall_s"].items())
        catch = ", ".join(f"{s} {v}s" if v is not None else f"{s} -"
                          for s, v in r["longest_catch_up_s"].items())
        print(f"  {kind:13s} x{r['count']}: longest stall {stalls}; catch-up {catch}")
    print(f"saved {write_result('chaos', result, quick=args.quick)}")
    bad = any(result[k] for k in keys[2:])
    return 1 if bad or result["workers_exited_on_their_own"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
