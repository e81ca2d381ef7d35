#!/usr/bin/env python
"""The partitioned pipeline on a real 3-master Redis Cluster (loopback ports, started here).

    python bench/probes/cluster.py                  # ~3-5 min on a quiet 2-CPU VM
    python bench/probes/cluster.py --quick          # smoke run
    python bench/probes/cluster.py --processes 1,2  # only the worker-process rows
    python bench/probes/cluster.py --cpu-only       # only the baseline and Redis CPU per turn

Measured, in one run, with the hashing embedder (Redis and the pipeline are measured, not
ONNX), rq on its own plain redis-server (rq does not run on a cluster):
1. baseline: bare pipelined XADD (batches of 100, spread over 16 hash-tagged streams) on the
   same cluster: entries/s, server usec per XADD by commandstats and by the server
   processes' own CPU time (INFO cpu: network I/O and parsing included).
2. Redis CPU per turn after ingest_many + embed + boundary + dispatch of N turns in 40
   sessions, each stage run alone so that the difference of the counters before and after
   it is that stage's cost: commandstats usec (a script's inner commands are counted twice
   there, in their own rows and inside EVALSHA's time, so this over-counts scripts) and the
   server processes' CPU time (which also holds the background: cron and the cluster bus,
   measured over an idle second and reported), per stage, per command, per node, end to
   end (goal <= 25 us per turn); keys and calls per node (the spread).
3. boundary round trips per entry (socket sends from inside the boundary handler, and with
   the consume loop's read and ack) on a trickle (one entry per batch) and on a backlog.
4. throughput of the whole pipeline with 1, 2 and 4 worker processes per stage (embed and
   boundary), Qdrant REST stand-in as the shared vector store (test support code; it is the
   same for every row): the workers start on empty streams, and once every partition's
   lease is held and spread over them the turns are ingested and the clock runs until
   every turn is assigned to an episode. Start-up and rebalancing are reported apart.

The machine is shared: the load average is saved next to every section. Results: printed,
and saved as JSON to bench/results/cluster.json (quick: cluster-quick.json).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import redis

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from harness import RESULTS, RedisServer, machine_facts  # noqa: E402

from hivemem.config import Settings  # noqa: E402
from hivemem.logs import configure_logging  # noqa: E402
from hivemem.pipeline.topology import partition_tags  # noqa: E402
from hivemem.producer.client import MemoryClient  # noqa: E402
from hivemem.providers.embedders import HashingEmbedder  # noqa: E402
from hivemem.runtime.wiring import Wiring  # noqa: E402
from hivemem.store.partitions import PartitionLeases  # noqa: E402
from hivemem.store.vectors.server import ServerVectorStore  # noqa: E402
from tests.support.qdrant_standin import spawn  # noqa: E402
from tests.support.redis_cluster import RedisCluster  # noqa: E402

DIM = 64
PARTITIONS = 16


def log(msg: str) -> None:
    print(msg, flush=True)


def note_load(result: dict[str, Any], when: str) -> None:
    """The machine is shared: the 1/5/15 min load average next to every section."""
    result.setdefault("load_average", {})[when] = [round(x, 2) for x in os.getloadavg()]


def masters(cluster: RedisCluster) -> list[int]:
    return [p for p, role in cluster.roles().items() if role == "master"]


def reset_stats(cluster: RedisCluster) -> None:
    for p in masters(cluster):
        cluster.node(p).config_resetstat()


def node_stats(cluster: RedisCluster) -> dict[int, dict[str, Any]]:
    """Per master: commandstats summed (a script's inner commands are counted in their own
    rows AND inside EVALSHA's time, so this over-counts scripts) and the server process's
    own CPU (INFO cpu, user + sys: everything, network I/O and parsing included)."""
    out: dict[int, dict[str, Any]] = {}
    for p in masters(cluster):
        node = cluster.node(p)
        stats = node.info("commandstats")
        cpu = node.info("cpu")
        usec = sum(float(v["usec"]) for v in stats.values())
        calls = sum(int(v["calls"]) for v in stats.values())
        by_cmd = {k.removeprefix("cmdstat_"): int(v["usec"]) for k, v in stats.items()}
        calls_by = {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}
        out[p] = {"usec": usec, "calls": calls, "keys": node.dbsize(),
                  "cpu_usec": (float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])) * 1e6,
                  "by_cmd": by_cmd, "calls_by": calls_by,
                  "top_usec": dict(sorted(by_cmd.items(), key=lambda kv: -kv[1])[:6])}
    return out


def diff_stats(after: dict[int, dict[str, Any]],
               before: dict[int, dict[str, Any]] | None) -> dict[str, Any]:
    """Totals over the masters between two `node_stats` snapshots."""
    usec = cpu = 0.0
    by_cmd: dict[str, int] = {}
    calls: dict[str, int] = {}
    for p, s in after.items():
        b = before[p] if before else {"usec": 0.0, "cpu_usec": 0.0, "by_cmd": {}, "calls_by": {}}
        usec += s["usec"] - b["usec"]
        cpu += s["cpu_usec"] - b["cpu_usec"]
        for k, v in s["by_cmd"].items():
            by_cmd[k] = by_cmd.get(k, 0) + v - b["by_cmd"].get(k, 0)
        for k, v in s["calls_by"].items():
            calls[k] = calls.get(k, 0) + v - b["calls_by"].get(k, 0)
    return {"usec": usec, "cpu_usec": cpu, "by_cmd": {k: v for k, v in by_cmd.items() if v},
            "calls": {k: v for k, v in calls.items() if v}}


def settings_for(cluster: RedisCluster, prefix: str, rq_url: str, **extra: Any) -> Settings:
    doc: dict[str, Any] = {
        "redis": {"url": cluster.url, "key_prefix": prefix, "partitions": PARTITIONS,
                  "rq_url": rq_url},
        "embedding": {"provider": "hashing", "dim": DIM},
        "worker": {"block_ms": 100, "claim_interval_s": 5.0, "trim_interval_s": 0},
        "episodes": {"max_turns": 8},
        "log_level": "warning",
    }
    for section, values in extra.items():
        doc.setdefault(section, {}).update(values)
    return Settings.model_validate(doc)


def rows(n: int, sessions: int, tag: str) -> list[dict[str, Any]]:
    return [{"session_id": f"{tag}-s{i % sessions}", "role": "user" if i % 2 else "assistant",
             "content": f"turn {i}: the planner measured the retry policy for ticket {i % 97}",
             "turn_id": f"{tag}-t{i}"} for i in range(n)]


# -- 1. baseline -----------------------------------------------------------------------------


def bench_xadd(cluster: RedisCluster, n: int) -> dict[str, Any]:
    client = cluster.client()
    payload = {"seq": "1", "turn": "x" * 330}  # about a turn's wire JSON
    # The partitions' own hash tags: the same spread over the nodes as the pipeline's keys.
    streams = [f"bench:{{{tag}}}:xadd" for tag in partition_tags(PARTITIONS)]
    reset_stats(cluster)
    before = node_stats(cluster)
    t0 = time.perf_counter()
    for b in range(n // 100):
        pipe = client.pipeline(transaction=False)
        for j in range(100):
            pipe.xadd(streams[(b * 100 + j) % PARTITIONS], payload)
        pipe.execute()
    rate = n / (time.perf_counter() - t0)
    d = diff_stats(node_stats(cluster), before)
    client.close()
    log(f"baseline: bare pipelined XADD {rate:.0f}/s, {d['usec'] / n:.2f} us commandstats,"
        f" {d['cpu_usec'] / n:.2f} us server process CPU per XADD")
    return {"xadd_pipelined_per_s": round(rate, 1), "server_usec_per_xadd": round(d["usec"] / n, 3),
            "server_cpu_usec_per_xadd": round(d["cpu_usec"] / n, 3), "entries": n}


# -- 2. Redis CPU per turn ------------------------------------------------------------------


def _per_turn(d: dict[str, Any], n: int) -> dict[str, Any]:
    return {"commandstats_usec_per_turn": round(d["usec"] / n, 2),
            "cpu_usec_per_turn": round(d["cpu_usec"] / n, 2),
            "calls_per_turn": round(sum(d["calls"].values()) / n, 2),
            "usec_per_turn_by_cmd": {k: round(v / n, 2) for k, v in
                                     sorted(d["by_cmd"].items(), key=lambda kv: -kv[1])},
            "calls_per_turn_by_cmd": {k: round(v / n, 3) for k, v in
                                      sorted(d["calls"].items(), key=lambda kv: -kv[1])}}


def bench_cpu_repeated(cluster: RedisCluster, rq_url: str, n: int,
                       repeats: int) -> dict[str, Any]:
    """`bench_cpu` `repeats` times on fresh keys. Other processes on the machine only ever
    add to a command's measured time (a server descheduled mid-command), so the run with
    the least server CPU is reported in full, and every run's totals beside it."""
    runs = [bench_cpu(cluster, rq_url, n, f"cpu{i}") for i in range(repeats)]
    best = min(runs, key=lambda r: r["cpu_usec_per_turn_total"])
    best = dict(best)
    best["runs"] = [{k: r[k] for k in ("usec_per_turn_total", "cpu_usec_per_turn_total",
                                       "usec_per_turn_ingest", "ingest_many_turns_per_s",
                                       "load_average")} for r in runs]
    best["reported"] = "the run with the least server process CPU of the repeats"
    return best


def bench_cpu(cluster: RedisCluster, rq_url: str, n: int, prefix: str = "cpu") -> dict[str, Any]:
    """Each stage runs alone, one after the other, so the difference of the counters before
    and after it is that stage's cost (a script's inner commands show as their own rows)."""
    load = [round(x, 2) for x in os.getloadavg()]
    settings = settings_for(cluster, prefix, rq_url)
    emb = HashingEmbedder(DIM)
    vectors = ServerVectorStore(settings.qdrant, DIM, location=":memory:")
    wiring = Wiring(settings, vectors=vectors, embedder=emb)
    client = MemoryClient(settings, vector_store=vectors, embedder=emb)
    batches = rows(n, 40, prefix)
    # The background: cron and cluster bus over one idle second.
    idle0 = node_stats(cluster)
    time.sleep(1.0)
    idle = diff_stats(node_stats(cluster), idle0)
    reset_stats(cluster)
    snaps = [("start", node_stats(cluster))]
    t0 = time.perf_counter()
    for start in range(0, n, 100):
        client.ingest_many(batches[start:start + 100])
    ingest_s = time.perf_counter() - t0
    snaps.append(("ingest", node_stats(cluster)))
    wiring.embed_worker().run(burst=True)
    snaps.append(("embed", node_stats(cluster)))
    wiring.boundary_worker().run(burst=True)
    snaps.append(("boundary", node_stats(cluster)))
    wiring.dispatch_worker().run(burst=True)
    snaps.append(("dispatch", node_stats(cluster)))
    elapsed = time.perf_counter() - t0
    stages = {name: _per_turn(diff_stats(snap, snaps[i][1]), n)
              for i, (name, snap) in enumerate(snaps[1:])}
    total = diff_stats(snaps[-1][1], snaps[0][1])
    stats = snaps[-1][1]
    per_node = {str(p): {"usec_per_turn": round(s["usec"] / n, 2),
                         "cpu_usec_per_turn": round((s["cpu_usec"] - snaps[0][1][p]["cpu_usec"])
                                                    / n, 2),
                         "calls": s["calls"], "keys": s["keys"], "top_usec": s["top_usec"]}
                for p, s in stats.items()}
    log(f"redis CPU per turn, end to end: {total['usec'] / n:.2f} us commandstats,"
        f" {total['cpu_usec'] / n:.2f} us server process CPU (ingest alone"
        f" {stages['ingest']['commandstats_usec_per_turn']:.2f} us,"
        f" ingest_many {n / ingest_s:.0f} turns/s on the cluster)")
    for name, st in stages.items():
        top = list(st["usec_per_turn_by_cmd"].items())[:5]
        log(f"  {name}: {st['commandstats_usec_per_turn']} us commandstats,"
            f" {st['cpu_usec_per_turn']} us CPU, {st['calls_per_turn']} calls/turn; {top}")
    for p, s in per_node.items():
        log(f"  node {p}: {s['usec_per_turn']} us/turn, {s['calls']} calls, {s['keys']} keys")
    client.close()
    wiring.close()
    vectors.close()
    return {"turns": n, "usec_per_turn_total": round(total["usec"] / n, 2),
            "cpu_usec_per_turn_total": round(total["cpu_usec"] / n, 2),
            "idle_cpu_usec_per_s": round(idle["cpu_usec"], 1),
            "idle_cpu_usec_per_turn_over_run": round(idle["cpu_usec"] * elapsed / n, 2),
            "usec_per_turn_ingest": stages["ingest"]["commandstats_usec_per_turn"],
            "ingest_many_turns_per_s": round(n / ingest_s, 1), "stages": stages,
            "per_node": per_node, "goal_usec_per_turn": 25, "load_average": load}


# -- 3. boundary round trips -----------------------------------------------------------------


class SendCounter:
    """Counts socket sends (one per command, one per pipeline per node): round trips."""

    def __init__(self) -> None:
        self.total = 0
        self.in_handler = 0
        self.local = threading.local()
        original = redis.connection.AbstractConnection.send_packed_command
        counter = self

        def counted(conn: Any, command: Any, check_health: bool = True) -> None:
            counter.total += 1
            if getattr(counter.local, "active", False):
                counter.in_handler += 1
            return original(conn, command, check_health)

        redis.connection.AbstractConnection.send_packed_command = counted  # type: ignore[method-assign]


def bench_round_trips(cluster: RedisCluster, rq_url: str, n: int,
                      counter: SendCounter) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for label, batch in (("trickle", 1), ("backlog", 1024)):
        settings = settings_for(cluster, f"rt{batch}", rq_url, worker={"batch_size": batch})
        emb = HashingEmbedder(DIM)
        vectors = ServerVectorStore(settings.qdrant, DIM, location=":memory:")
        wiring = Wiring(settings, vectors=vectors, embedder=emb)
        client = MemoryClient(settings, vector_store=vectors, embedder=emb)
        data = rows(n, 20, f"rt{batch}")
        for start in range(0, n, 100):
            client.ingest_many(data[start:start + 100])
        # A trickle is turns arriving one at a time: each embed batch holds one turn, so
        # each embedded-stream entry does too (the embed stage writes one entry per session
        # and batch). A backlog comes out of the embed stage in big batches.
        wiring.embed_worker(worker_settings=settings.worker.model_copy(
            update={"batch_size": 1 if batch == 1 else 256})).run(burst=True)
        stage = wiring.boundary_stage()
        inner = stage.handle

        def handle(items: list[Any], inner: Any = inner) -> None:
            counter.local.active = True
            try:
                inner(items)
            finally:
                counter.local.active = False

        worker = wiring.stream_worker(stage.__class__(
            name=stage.name, streams=stage.streams, group=stage.group, decode=stage.decode,
            handle=handle, on_dead_letter=stage.on_dead_letter))
        before_total, before_handler = counter.total, counter.in_handler
        t0 = time.perf_counter()
        worker.run(burst=True)
        seconds = time.perf_counter() - t0
        handler = (counter.in_handler - before_handler) / n
        total = (counter.total - before_total) / n
        out[label] = {"batch_size": batch, "entries": n,
                      "handler_round_trips_per_entry": round(handler, 3),
                      "loop_round_trips_per_entry": round(total, 3),
                      "entries_per_s": round(n / seconds, 1)}
        log(f"boundary round trips per entry, {label}: {handler:.2f} in the handler,"
            f" {total:.2f} with the loop's reads/acks/leases ({n / seconds:.0f} entries/s)")
        client.close()
        wiring.close()
        vectors.close()
    return out


# -- 4. worker processes per stage ------------------------------------------------------------


def _balanced(wiring: Wiring, stages: tuple[str, ...], workers: int) -> bool:
    """Every partition of each stage leased, spread over exactly `workers` processes."""
    for stage in stages:
        leases = PartitionLeases(wiring.redis, wiring.keys, stage, "bench-observer", 1000,
                                 partitions=PARTITIONS)
        holders = leases.holders()
        if len(holders) != PARTITIONS or len(set(holders.values())) != workers:
            return False
    return True


def bench_processes(cluster: RedisCluster, rq_url: str, n: int, counts: list[int],
                    folder: Path) -> dict[str, Any]:
    """N embed + N boundary worker processes. They start on empty streams; once every
    partition's lease is held and spread over the N processes (start-up and rebalancing
    done), the backlog is ingested and the clock runs until every turn is assigned to an
    episode. Start-up (interpreter, imports, joining) is reported apart: on 2 cores it is
    seconds of CPU per process, and it is not the pipeline's throughput."""
    qdrant = spawn(folder / "qdrant")
    out: dict[str, Any] = {}
    try:
        for workers in counts:
            prefix = f"proc{workers}"
            settings = settings_for(cluster, prefix, rq_url)
            settings = settings.model_copy(update={"qdrant": settings.qdrant.model_copy(
                update={"url": qdrant.url})})
            client = MemoryClient(settings)
            observer = Wiring(settings)
            data = rows(n, 40, prefix)
            env = {k: v for k, v in os.environ.items() if not k.startswith("HIVEMEM_")}
            env.update({
                "HIVEMEM_REDIS__URL": cluster.url, "HIVEMEM_REDIS__KEY_PREFIX": prefix,
                "HIVEMEM_REDIS__PARTITIONS": str(PARTITIONS), "HIVEMEM_REDIS__RQ_URL": rq_url,
                "HIVEMEM_QDRANT__URL": qdrant.url, "HIVEMEM_EMBEDDING__PROVIDER": "hashing",
                "HIVEMEM_EMBEDDING__DIM": str(DIM), "HIVEMEM_LOG_LEVEL": "warning",
                "HIVEMEM_WORKER__BLOCK_MS": "100", "HIVEMEM_WORKER__BATCH_SIZE": "256",
                "HIVEMEM_EPISODES__MAX_TURNS": "8",
                # The workers run this checkout's code, whatever is installed.
                "PYTHONPATH": os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])})
            load_before = [round(x, 2) for x in os.getloadavg()]
            t_spawn = time.perf_counter()
            procs = [subprocess.Popen([sys.executable, "-m", "hivemem.workers", kind],
                                      env=env, cwd=folder, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)
                     for kind in ("embed", "boundary") for _ in range(workers)]
            deadline = time.monotonic() + 120
            while not _balanced(observer, ("embed", "boundary"), workers):
                if time.monotonic() > deadline:
                    raise SystemExit(f"{workers} workers per stage never balanced")
                time.sleep(0.1)
            startup_s = time.perf_counter() - t_spawn
            t0 = time.perf_counter()
            for start in range(0, n, 100):
                client.ingest_many(data[start:start + 100])
            sessions = sorted({r["session_id"] for r in data})
            per = n // len(sessions)
            # Poll only the boundary pointer (one HGETALL per session): the full session
            # stats fan out over every partition and would load the Redis being measured.
            # The boundary assigns a turn only after the embed stage published it.
            deadline = time.monotonic() + 600
            waiting = list(sessions)
            while waiting and time.monotonic() < deadline:
                waiting = [s for s in waiting if observer.episodes.progress(s)[0] < per]
                if waiting:
                    time.sleep(0.02)
            seconds = time.perf_counter() - t0
            stats = [client.get_session_stats(s) for s in sessions]
            if not all(s.turns_processed == per and s.turns_assigned == per for s in stats):
                raise SystemExit(f"{workers} workers per stage: not every turn processed")
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(timeout=30)
            client.close()
            observer.close()
            out[str(workers)] = {"workers_per_stage": workers, "turns": n,
                                 "seconds": round(seconds, 2),
                                 "turns_per_s": round(n / seconds, 1),
                                 "startup_and_balance_s": round(startup_s, 2),
                                 "load_average_before": load_before}
            log(f"pipeline with {workers} embed + {workers} boundary processes:"
                f" {n / seconds:.0f} turns/s ({seconds:.1f} s for {n} once started;"
                f" start-up and balancing {startup_s:.1f} s; load {load_before})")
    finally:
        qdrant.stop()
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--processes", default=None, metavar="N,N",
                    help="only the worker-process rows, with these counts (cluster-partial.json)")
    ap.add_argument("--cpu-only", action="store_true",
                    help="only the XADD baseline and the Redis CPU per turn (cluster-cpu.json)")
    ap.add_argument("--round-trips-only", action="store_true",
                    help="only the boundary round trips (cluster-round-trips.json)")
    ap.add_argument("--repeats", type=int, default=None,
                    help="repeats of the CPU section (default 3, quick 1)")
    args = ap.parse_args()
    only = [int(x) for x in args.processes.split(",")] if args.processes else None
    configure_logging("warning")
    folder = Path(tempfile.mkdtemp(prefix="hivemem-bench-cluster-"))
    cluster = RedisCluster(folder / "cluster", masters=3, replicas=0)
    rq_server = RedisServer(folder / "rq")
    n = 800 if args.quick else 4000
    result: dict[str, Any] = {"machine": machine_facts(), "partitions": PARTITIONS,
                              "masters": 3, "quick": args.quick}
    counter = SendCounter()
    try:
        cluster.start()
        (folder / "rq").mkdir()
        rq_server.start()
        log(f"cluster: {cluster.url}; rq on {rq_server.url}")
        note_load(result, "start")
        if only:
            result["processes"] = bench_processes(cluster, rq_server.url,
                                                  2000 if args.quick else 10000, only, folder)
            note_load(result, "after processes")
            return _save(result, "cluster-partial.json")
        if args.round_trips_only:
            result["round_trips"] = bench_round_trips(cluster, rq_server.url,
                                                      400 if args.quick else 1000, counter)
            note_load(result, "after round trips")
            return _save(result, "cluster-round-trips.json")
        result["baseline"] = bench_xadd(cluster, 4000 if args.quick else 20000)
        repeats = args.repeats or (1 if args.quick else 3)
        result["cpu"] = bench_cpu_repeated(cluster, rq_server.url, n, repeats)
        result["cpu"]["usec_per_turn_over_xadd"] = round(
            result["cpu"]["usec_per_turn_total"] / result["baseline"]["server_usec_per_xadd"], 2)
        result["cpu"]["cpu_usec_per_turn_over_xadd"] = round(
            result["cpu"]["cpu_usec_per_turn_total"]
            / result["baseline"]["server_cpu_usec_per_xadd"], 2)
        note_load(result, "after cpu")
        if args.cpu_only:
            return _save(result, "cluster-cpu-quick.json" if args.quick else "cluster-cpu.json")
        result["round_trips"] = bench_round_trips(cluster, rq_server.url, 400 if args.quick
                                                  else 1000, counter)
        note_load(result, "after round trips")
        result["processes"] = bench_processes(cluster, rq_server.url, 1000 if args.quick
                                              else 10000, [1, 2] if args.quick else [1, 2, 4],
                                              folder)
        note_load(result, "after processes")
        base = result["processes"]["1"]["turns_per_s"]
        for row in result["processes"].values():
            row["speedup_over_1"] = round(row["turns_per_s"] / base, 2)
    finally:
        cluster.stop()
        rq_server.stop()
    return _save(result, "cluster-quick.json" if args.quick else "cluster.json")


def _save(result: dict[str, Any], name: str) -> int:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / name
    path.write_text(json.dumps(result, indent=2) + "\n")
    log(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
