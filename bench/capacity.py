#!/usr/bin/env python
"""A capacity model past one machine: per-turn costs measured here, machines per stage predicted.

    python bench/capacity.py                    # measure at 1 and 2 processes per stage, print the table
    python bench/capacity.py --quick            # 300 turns per run
    python bench/capacity.py --table-only bench/results/latest/capacity.json --cores 16

1. Measure. A real redis-server (AOF everysec), the Qdrant REST stand-in (test support: no
   Qdrant server installs here; it is the same for every row) and N worker processes per
   stage (`python -m hivemem.workers embed|boundary|reflect`: the real model on one ONNX
   thread per process, the heuristic reflector) are started on empty streams; once every
   partition is leased and spread over them, LoCoMo turns are ingested with `ingest_many`
   into `--sessions` sessions and the clock runs until every turn is assigned to an episode
   (embedded and through the boundary), then until every closed episode is reflected. The
   CPU time of every process (from /proc) over that span, divided by the turns (by the
   episodes for reflection), is the stage's cost: embed ms per turn, boundary and Redis
   microseconds per turn, reflection ms per episode, the producer's own CPU per turn.
2. Model. A stage's process uses at most one core (one ONNX thread; Python), so k processes
   of a stage carry at most k / cost turns/s, one Redis shard 1 / redis_cost (single-threaded),
   and everything on a machine with C free cores at most C / (the sum of the costs). The
   prediction for k processes per stage on this machine is the smallest of these. It is
   checked against the measured turns/s at k = 1 and 2, with C = the cores the run's
   processes actually got (the machine is shared: other processes take the rest), and with
   the k = 1 costs used for k = 2 (the model's claim: a turn costs the same however many
   processes share the work).
3. Table. For 1k / 10k / 100k turns/s and a number of sessions: processes and machines per
   stage (`--cores` per machine, `--utilisation` target), Redis shards, partitions, and the
   Redis memory the sessions hold (measured bytes per session at `--turns / --sessions`
   turns each). Qdrant is not sized from a measurement (the stand-in is not Qdrant): the
   table gives the points per second it must take.

Saves bench/results/latest/capacity.json (quick: results/quick/) and capacity.md (the table).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from harness import (  # noqa: E402
    RedisServer,
    locomo_conversations,
    locomo_turns,
    machine_facts,
    offline_model_env,
    write_result,
)

from hivemem import MemoryClient  # noqa: E402
from hivemem.config import Settings  # noqa: E402
from hivemem.runtime.wiring import Wiring  # noqa: E402
from tests.support.qdrant_standin import spawn  # noqa: E402

PARTITIONS = 16
STAGES = ("embed", "boundary", "reflect")
_TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process, every thread it ever ran included (10 ms
    ticks: fine over seconds of a worker's CPU; the stand-in's HTTP server starts a thread
    per connection)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def cpu_s_precise(pid: int) -> float:
    """CPU seconds of a long-lived process's threads in nanoseconds (/proc/PID/task/*/
    schedstat): Redis's microseconds per turn are below what 10 ms ticks can tell. A thread
    that ended is not counted (Redis's threads live as long as it does)."""
    ns = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            ns += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended meanwhile
    return ns / 1e9


def busy_s() -> float:
    """Busy CPU seconds of the whole machine (/proc/stat)."""
    values = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(values) - values[3] - values[4]) / _TICK  # minus idle and iowait


def texts_of(n: int) -> list[str]:
    per = [locomo_turns(c) for c in locomo_conversations()]
    out: list[str] = []
    for i in range(max(len(t) for t in per)):
        out.extend(t[i] for t in per if i < len(t))
    return (out * (n // len(out) + 1))[:n]


def worker_env(redis_url: str, qdrant_url: str, prefix: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIVEMEM_")}
    env.update({
        "HIVEMEM_REDIS__URL": redis_url, "HIVEMEM_REDIS__KEY_PREFIX": prefix,
        "HIVEMEM_REDIS__PARTITIONS": str(PARTITIONS), "HIVEMEM_QDRANT__URL": qdrant_url,
        "HIVEMEM_EMBEDDING__THREADS": "1", "HIVEMEM_LOG_LEVEL": "warning",
        # The workers run this checkout's code, whatever is installed.
        "PYTHONPATH": os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])})
    return env


def settings_for(redis_url: str, qdrant_url: str, prefix: str) -> Settings:
    return Settings.model_validate({
        "redis": {"url": redis_url, "key_prefix": prefix, "partitions": PARTITIONS},
        "qdrant": {"url": qdrant_url}, "embedding": {"threads": 1}, "log_level": "warning"})


def leased(redis: RedisServer, prefix: str, stage: str) -> set[str]:
    """Holders of the stage's partition leases (`Keys.partition_lease`), once all are held."""
    r = redis.client()
    values = r.mget([f"{prefix}:lease:{stage}:{p}" for p in range(PARTITIONS)])
    r.close()
    if any(v is None for v in values):
        return set()
    return {v.decode() if isinstance(v, bytes) else str(v) for v in values}


def run_point(redis: RedisServer, qdrant: Any, k: int, texts: list[str], sessions: int,
              folder: Path) -> dict[str, Any]:
    """k processes per stage on `texts`: throughput, and every process's CPU per unit."""
    prefix = f"cap{k}-{int(time.time())}"
    env = worker_env(redis.url, qdrant.url, prefix)
    procs = {(stage, i): subprocess.Popen(
        [sys.executable, "-m", "hivemem.workers", stage], env=env, cwd=folder,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for stage in STAGES for i in range(k)}
    settings = settings_for(redis.url, qdrant.url, prefix)
    client = MemoryClient(settings)
    # Progress read as the boundary stage keeps it (one HGETALL per session): the full
    # session stats fan out over every partition and would load the Redis being measured.
    observer = Wiring(settings)
    try:
        # Warm every process (model loaded, leases taken): one turn per partition's worth
        # of sessions, processed and reflected, before the clock starts.
        t_start = time.perf_counter()
        deadline = time.monotonic() + 300
        while len(leased(redis, prefix, "embed")) != k or \
                len(leased(redis, prefix, "boundary")) != k:
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs.values()):
                raise SystemExit(f"{k} processes per stage did not start")
            time.sleep(0.2)
        for s in range(4):
            client.ingest(f"warm-{s}", "user", "warming up the embed workers")
            client.wait_until_processed(f"warm-{s}", timeout=300)
        startup_s = time.perf_counter() - t_start
        rows = [{"session_id": f"s{i % sessions}", "role": "user" if i % 2 else "assistant",
                 "content": t} for i, t in enumerate(texts)]
        assert redis.process is not None
        redis_pid = redis.process.pid
        # The server's own background (cron, AOF) while idle, per second: not a turn's cost.
        idle0 = cpu_s_precise(redis_pid)
        time.sleep(3.0)
        redis_idle_per_s = (cpu_s_precise(redis_pid) - idle0) / 3.0
        pids = {key: p.pid for key, p in procs.items()}
        cpu0 = {key: cpu_s(pid) for key, pid in pids.items()}
        redis0, qdrant0, busy0 = cpu_s_precise(redis_pid), cpu_s(qdrant.process.pid), busy_s()
        own0 = time.process_time()
        t0 = time.perf_counter()
        for start in range(0, len(rows), 100):
            client.ingest_many(rows[start:start + 100])
        ingest_cpu = time.process_time() - own0
        ingest_s = time.perf_counter() - t0
        names = [f"s{i}" for i in range(sessions)]
        per = {n: sum(1 for r in rows if r["session_id"] == n) for n in names}
        waiting = list(names)
        deadline = time.monotonic() + 1800
        polls = 0
        while waiting and time.monotonic() < deadline:
            # One session at a time (the sessions finish together): ~10 reads a second,
            # not one per session, so the Redis being measured is not loaded by the poll.
            polls += 1
            if observer.episodes.progress(waiting[0])[0] >= per[waiting[0]]:
                waiting.pop(0)
            else:
                time.sleep(0.1)
        processed_s = time.perf_counter() - t0
        cpu_processed = {key: cpu_s(pid) - cpu0[key] for key, pid in pids.items()}
        redis_processed = cpu_s_precise(redis_pid) - redis0 - redis_idle_per_s * processed_s
        qdrant_processed = cpu_s(qdrant.process.pid) - qdrant0
        busy_processed = busy_s() - busy0
        for n in names:
            client.wait_until_reflected(n, timeout=1800)
        reflected_s = time.perf_counter() - t0
        cpu = {key: cpu_s(pid) - cpu0[key] for key, pid in pids.items()}
        stats = [client.get_session_stats(n) for n in names]
        redis_cpu = cpu_s_precise(redis_pid) - redis0 - redis_idle_per_s * reflected_s
        qdrant_cpu = cpu_s(qdrant.process.pid) - qdrant0
        busy = busy_s() - busy0
        info = redis.client().info("memory")
    finally:
        client.close()
        observer.close()
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
    n = len(texts)
    episodes = sum(s.episodes for s in stats)
    if sum(s.turns_processed for s in stats) != n:
        raise SystemExit(f"{k} per stage: {sum(s.turns_processed for s in stats)} of {n} processed")
    by_stage = {stage: sum(v for (s, _), v in cpu.items() if s == stage) for stage in STAGES}
    window = {stage: sum(v for (s, _), v in cpu_processed.items() if s == stage)
              for stage in STAGES}
    window.update({"redis": redis_processed, "ingest": ingest_cpu, "vector_store": qdrant_processed})
    return {
        "processes_per_stage": k, "turns": n, "sessions": sessions, "episodes": episodes,
        "startup_s": round(startup_s, 1), "ingest_s": round(ingest_s, 3),
        "processed_s": round(processed_s, 2), "reflected_s": round(reflected_s, 2),
        "turns_per_s": round(n / processed_s, 1),
        "episodes_per_s": round(episodes / reflected_s, 2),
        # Embed, boundary, Redis and the vector store until every turn is processed (after
        # that the embed processes refine window vectors on idle time: reported apart);
        # reflection until every episode is reflected.
        "cost": {
            "embed_ms_per_turn": round(window["embed"] / n * 1000, 3),
            "boundary_us_per_turn": round(window["boundary"] / n * 1e6, 1),
            "reflect_ms_per_episode": round(by_stage["reflect"] / max(1, episodes) * 1000, 3),
            "redis_us_per_turn": round(redis_processed / n * 1e6, 1),
            "ingest_client_us_per_turn": round(ingest_cpu / n * 1e6, 1),
            "vector_store_standin_ms_per_turn": round(qdrant_processed / n * 1000, 3),
        },
        "after_processed": {
            "embed_processes_ms_per_turn": round((by_stage["embed"] - window["embed"]) / n
                                                 * 1000, 3),
            "redis_us_per_turn": round((redis_cpu - redis_processed) / n * 1e6, 1),
            "vector_store_standin_ms_per_turn": round((qdrant_cpu - qdrant_processed) / n
                                                      * 1000, 3),
        },
        "episodes_per_turn": round(episodes / n, 4),
        "progress_polls": polls,
        # CPU seconds per turn of each part while the turns were being processed (the
        # reflect workers' share of that window included): what the machine-bound term
        # of the prediction sums.
        "window_cpu_ms_per_turn": {k_: round(v / n * 1000, 3) for k_, v in window.items()},
        "redis_idle_cores": round(redis_idle_per_s, 4),
        # What our processes got of the machine while turns were being processed, and
        # what everything on it took meanwhile.
        "cores_ours_while_processing": round(sum(window.values()) / processed_s, 2),
        "cores_busy_machine_while_processing": round(busy_processed / processed_s, 2),
        "cores_busy_machine_to_reflected": round(busy / reflected_s, 2),
        "redis_used_memory_bytes": int(info["used_memory"]),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def stage_costs_s(cost: dict[str, float], episodes_per_turn: float) -> dict[str, float]:
    """CPU seconds per turn of each part."""
    return {
        "embed": cost["embed_ms_per_turn"] / 1000,
        "boundary": cost["boundary_us_per_turn"] / 1e6,
        "reflect": cost["reflect_ms_per_episode"] / 1000 * episodes_per_turn,
        "redis": cost["redis_us_per_turn"] / 1e6,
        "ingest": cost["ingest_client_us_per_turn"] / 1e6,
        "vector_store": cost["vector_store_standin_ms_per_turn"] / 1000,
    }


def predict(costs: dict[str, float], window: dict[str, float], k: int,
            cores: float) -> dict[str, Any]:
    """Turns/s of k processes per stage with `cores` for them, and what bounds it. `window`:
    CPU seconds per turn of every part while turns are processed (reflection's share
    included: it runs beside, on the same cores)."""
    bounds = {f"{stage} ({k} x 1 core)": k / costs[stage] for stage in ("embed", "boundary")}
    bounds["redis (1 shard, 1 core)"] = 1 / costs["redis"]
    # Reflection runs behind (episodes queue): it bounds how fast episodes are reflected,
    # not how fast turns are recallable, so it is in the machine's CPU sum only.
    bounds[f"machine ({cores:.2f} cores)"] = cores / sum(window.values())
    limit = min(bounds, key=bounds.__getitem__)
    return {"turns_per_s": round(bounds[limit], 1), "bound": limit,
            "bounds": {k_: round(v, 1) for k_, v in bounds.items()}}


def table(costs: dict[str, float], memory_per_session: float, rates: list[int],
          sessions: list[int], cores: int, utilisation: float) -> list[dict[str, Any]]:
    usable = cores * utilisation
    rows = []
    for rate in rates:
        for s in sessions:
            procs = {stage: math.ceil(rate * costs[stage] / utilisation)
                     for stage in ("embed", "boundary", "reflect")}
            shards = math.ceil(rate * costs["redis"] / utilisation)
            partitions = 2 ** math.ceil(math.log2(max(16, *procs.values(), shards)))
            rows.append({
                "turns_per_s": rate, "sessions": s,
                **{f"{stage}_processes": n for stage, n in procs.items()},
                **{f"{stage}_machines": math.ceil(rate * costs[stage] / usable)
                   for stage in ("embed", "boundary", "reflect")},
                "api_machines": math.ceil(rate * costs["ingest"] / usable),
                "redis_shards": shards,
                "redis_memory_gb_at_most": round(s * memory_per_session / 1e9, 2),
                "partitions": partitions,
                "vector_points_per_s": rate,
            })
    return rows


def markdown(result: dict[str, Any]) -> str:
    m = result["model"]
    lines = [f"Per-turn costs (k = 1 run): embed {m['cost']['embed_ms_per_turn']} ms, boundary"
             f" {m['cost']['boundary_us_per_turn']} us, Redis {m['cost']['redis_us_per_turn']} us,"
             f" reflection {m['cost']['reflect_ms_per_episode']} ms per episode"
             f" ({m['episodes_per_turn']} episodes per turn), producer"
             f" {m['cost']['ingest_client_us_per_turn']} us; machines of {m['cores']} cores at"
             f" {m['utilisation']:.0%}.", "",
             "| turns/s | sessions | embed proc. / machines | boundary | reflect | API machines"
             " | Redis shards | Redis memory | partitions |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in result["table"]:
        lines.append(
            f"| {r['turns_per_s']:,} | {r['sessions']:,} | {r['embed_processes']} /"
            f" {r['embed_machines']} | {r['boundary_processes']} / {r['boundary_machines']} |"
            f" {r['reflect_processes']} / {r['reflect_machines']} | {r['api_machines']} |"
            f" {r['redis_shards']} | <= {r['redis_memory_gb_at_most']} GB | {r['partitions']} |")
    lines += ["", "| processes per stage | measured turns/s | predicted (cores the run got) |"
              " error | bound | predicted on an idle machine |", "|---|---|---|---|---|---|"]
    for c in result.get("checks", []):
        lines.append(f"| {c['processes_per_stage']} | {c['measured_turns_per_s']} |"
                     f" {c['predicted']['turns_per_s']} ({c['cores_ours']} cores) |"
                     f" {c['error']:+.0%} | {c['predicted']['bound']} |"
                     f" {c['predicted_idle']['turns_per_s']} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--turns", type=int, default=2000)
    ap.add_argument("--sessions", type=int, default=40)
    ap.add_argument("--processes", default="1,2", help="processes per stage to measure")
    ap.add_argument("--cores", type=int, default=8, help="cores per machine in the table")
    ap.add_argument("--utilisation", type=float, default=0.7)
    ap.add_argument("--rates", default="1000,10000,100000")
    ap.add_argument("--table-sessions", default="10000,1000000")
    ap.add_argument("--table-only", type=Path, default=None,
                    help="recompute the table from a saved capacity.json")
    args = ap.parse_args()
    offline_model_env()
    # A SIGTERM ends the run through the `finally`s: its workers, Redis and stand-in stop.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    rates = [int(x) for x in args.rates.split(",")]
    table_sessions = [int(x) for x in args.table_sessions.split(",")]
    if args.table_only:
        result = json.loads(args.table_only.read_text())
    else:
        n = 300 if args.quick else args.turns
        texts = texts_of(n)
        folder = Path(tempfile.mkdtemp(prefix="hivemem-capacity-"))
        redis = RedisServer(folder / "redis")
        (folder / "redis").mkdir()
        redis.start()
        qdrant = spawn(folder / "qdrant", cwd=REPO)
        points = []
        try:
            for k in [int(x) for x in args.processes.split(",")]:
                point = run_point(redis, qdrant, k, texts, args.sessions, folder)
                print(f"{k} per stage: {point['turns_per_s']} turns/s, costs {point['cost']},"
                      f" our cores {point['cores_ours_while_processing']}, machine busy"
                      f" {point['cores_busy_machine_while_processing']}", flush=True)
                points.append(point)
        finally:
            qdrant.stop()
            redis.stop()
            shutil.rmtree(folder, ignore_errors=True)
        result = {"benchmark": "capacity", "quick": args.quick, "points": points,
                  "machine": machine_facts()}
    base = result["points"][0]
    costs = stage_costs_s(base["cost"], base["episodes_per_turn"])
    # Redis memory per session: what the k = 1 run's sessions hold once reflected, streams
    # not yet trimmed (their entries, the embedded stream's with vectors, go at the next
    # trim): an upper bound of what a session keeps.
    memory_per_session = base["redis_used_memory_bytes"] / base["sessions"]
    result["model"] = {"cost": base["cost"], "episodes_per_turn": base["episodes_per_turn"],
                       "cpu_s_per_turn": {k: round(v, 7) for k, v in costs.items()},
                       "redis_bytes_per_session": round(memory_per_session),
                       "turns_per_session": base["turns"] // base["sessions"],
                       "cores": args.cores, "utilisation": args.utilisation}
    window = {k_: v / 1000 for k_, v in base["window_cpu_ms_per_turn"].items()}
    result["checks"] = []
    for point in result["points"]:
        k = point["processes_per_stage"]
        got = predict(costs, window, k, point["cores_ours_while_processing"])
        idle = predict(costs, window, k,
                       float(result["machine"].get("nproc") or os.cpu_count() or 1))
        result["checks"].append({
            "processes_per_stage": k, "measured_turns_per_s": point["turns_per_s"],
            "cores_ours": point["cores_ours_while_processing"], "predicted": got,
            "predicted_idle": idle,
            "error": round(got["turns_per_s"] / point["turns_per_s"] - 1, 3)})
    result["table"] = table(costs, memory_per_session, rates, table_sessions, args.cores,
                            args.utilisation)
    text = markdown(result)
    print(text)
    print(f"saved {write_result('capacity', result, text, quick=args.quick)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
