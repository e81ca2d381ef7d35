#!/usr/bin/env python
"""Where a recall's wall time goes while the pipeline catches up, against idle.

    python bench/probes/catchup_wait.py                    # facts row, 1,500 turns
    python bench/probes/catchup_wait.py --turns 3000 --catchup-s 60

Runs one row of bench/suites/recall_load.py (the public pipeline, the embedded default) and
instruments each timed recall on the calling thread (and recall's helper thread):
- wall, on-CPU time of the recall's thread (`time.thread_time`), and the time it sat
  runnable on the OS run queue (`/proc/thread-self/schedstat`: another process, or another
  thread of ours, had the core);
- inside Redis calls (redis-py `Connection.send_packed_command` + `read_response`), inside
  vector-store calls (`EdgeVectorStore`'s methods, outermost only), inside `score_table`:
  wall, on-CPU, run queue, and blocked (the rest: the answer, and the GIL taken back);
- "blocked outside calls": wall - CPU - run queue - (Redis/vectors blocked). A recall's
  own Python waits for nothing but the GIL there, so this is GIL wait (plus lock waits).
  Off-CPU time inside a Redis call is the server's answer plus the GIL taken back after it.
Each phase (catch-up, idle) reports the means per recall. Reaches into internals (a probe).
Saved to bench/results/latest/catchup_wait.json.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis.connection
from harness import summarize, write_result
from suites import recall_load

import hivemem.recall.recaller as recaller_mod
from hivemem.store.vectors.edge import EdgeVectorStore

_local = threading.local()
_lock = threading.Lock()
# The recall being timed: component -> [wall_s, cpu_s, calls, run queue s]
_state: dict[str, dict[str, list[float]] | None] = {"current": None}
_recall_threads: set[int] = set()


def _schedstat() -> tuple[float, float]:
    with open("/proc/thread-self/schedstat") as f:
        cpu_ns, wait_ns, _ = f.read().split()
    return int(cpu_ns) / 1e9, int(wait_ns) / 1e9


def _counts() -> bool:
    return _state["current"] is not None and (threading.get_ident() in _recall_threads
                                     or threading.current_thread().name.startswith(
                                         "hivemem-recall"))


def _wrap(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if not _counts() or getattr(_local, "depth", 0):
            return fn(*args, **kwargs)
        _local.depth = 1
        q0 = _schedstat()[1]
        w0, c0 = time.perf_counter(), time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            _local.depth = 0
            w, c = time.perf_counter() - w0, time.thread_time() - c0
            q = _schedstat()[1] - q0
            cur = _state["current"]
            if cur is not None:
                with _lock:
                    slot = cur.setdefault(name, [0.0, 0.0, 0.0, 0.0])
                    slot[0] += w
                    slot[1] += c
                    slot[2] += 1
                    slot[3] += q
    return wrapped


def install() -> None:
    for meth in ("send_packed_command", "read_response"):
        setattr(redis.connection.AbstractConnection, meth,
                _wrap("redis", getattr(redis.connection.AbstractConnection, meth)))
    for meth in ("search", "search_fused", "search_sparse", "search_turns_and_windows",
                 "window_similarities", "retrieve", "visible_fact_ids", "get_turns",
                 "turns_by_seq", "scroll", "facts_written_after", "count"):
        if hasattr(EdgeVectorStore, meth):
            setattr(EdgeVectorStore, meth, _wrap("vectors", getattr(EdgeVectorStore, meth)))
    recaller_mod.score_table = _wrap("score_table", recaller_mod.score_table)  # type: ignore[assignment]


PHASES: dict[str, list[dict[str, float]]] = {"catchup": [], "idle": []}
_phase = ["catchup"]


def timed_recall(client: Any, session: str, query: str) -> float:
    cur: dict[str, list[float]] = {}
    _recall_threads.add(threading.get_ident())
    _state["current"] = cur
    s_wait0 = _schedstat()[1]
    w0, c0 = time.perf_counter(), time.thread_time()
    client.recall(session, query, limit=20)
    wall, cpu = time.perf_counter() - w0, time.thread_time() - c0
    s_wait1 = _schedstat()[1]
    _state["current"] = None
    runq = s_wait1 - s_wait0
    row = {"wall": wall, "cpu": cpu, "runqueue": runq}
    ext_off = 0.0
    for name, (w, c, n, q) in cur.items():
        row[f"{name}_wall"] = w
        row[f"{name}_cpu"] = c
        row[f"{name}_calls"] = n
        row[f"{name}_runqueue"] = q
        # Off-CPU and off the run queue inside the call: the engine's or the server's
        # answer, and the GIL taken back after it.
        row[f"{name}_blocked"] = max(0.0, w - c - q)
        if name != "score_table":
            ext_off += max(0.0, w - c - q)
    row["blocked_outside_calls"] = max(0.0, wall - cpu - runq - ext_off)
    PHASES[_phase[0]].append(row)
    return wall * 1000


def _window(client: Any, session: str, texts: Any, n: int) -> dict[str, Any]:
    ms = [timed_recall(client, session, texts.query()) for _ in range(n)]
    info = client.admin.session_info(session)
    import os
    return {"ms": ms, "episodes": info.episodes, "facts_active": info.facts_active,
            "load1": round(os.getloadavg()[0], 2)}


def _mean(rows: list[dict[str, float]], key: str) -> float:
    return round(1000 * sum(r.get(key, 0.0) for r in rows) / max(1, len(rows)), 2)


def breakdown(rows: list[dict[str, float]]) -> dict[str, Any]:
    keys = ["wall", "cpu", "runqueue", "blocked_outside_calls", "redis_wall", "redis_cpu",
            "redis_runqueue", "redis_blocked", "vectors_wall", "vectors_cpu",
            "vectors_runqueue", "vectors_blocked", "score_table_wall", "score_table_cpu"]
    out: dict[str, Any] = {"recalls": len(rows),
                           "wall_ms": summarize([1000 * r["wall"] for r in rows])}
    out["mean_ms"] = {k: _mean(rows, k) for k in keys}
    out["calls"] = {k: round(sum(r.get(k, 0) for r in rows) / max(1, len(rows)), 1)
                    for k in ("redis_calls", "vectors_calls")}
    slow = sorted(rows, key=lambda r: r["wall"])[int(0.9 * len(rows)):]
    out["slowest_decile_mean_ms"] = {k: _mean(slow, k) for k in keys}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=1500)
    ap.add_argument("--shape", choices=["facts", "turns"], default="facts")
    ap.add_argument("--catchup-s", type=float, default=40)
    ap.add_argument("--settle-s", type=float, default=240)
    ap.add_argument("--queries", type=int, default=10)
    ap.add_argument("--tag", default="")
    args = ap.parse_args()
    install()
    recall_load._window = _window  # type: ignore[assignment]
    orig_wait = recall_load.MemoryClient.wait_until_reflected

    def wait_and_flip(self: Any, session: str, timeout: float = 0.0, **kw: Any) -> Any:
        out = orig_wait(self, session, timeout=timeout, **kw)
        if timeout > 1:  # the settle: what follows is idle
            _phase[0] = "idle"
        return out

    recall_load.MemoryClient.wait_until_reflected = wait_and_flip  # type: ignore[method-assign]
    share, distinct = (0.95, True) if args.shape == "facts" else (0.25, False)
    row = recall_load.run_row(args.shape, turns=args.turns, fact_share=share,
                              distinct=distinct, queries=args.queries,
                              catchup_s=args.catchup_s, settle_s=args.settle_s)
    result = {"probe": "catchup_wait", "tag": args.tag, "row": row,
              "catchup": breakdown(PHASES["catchup"]), "idle": breakdown(PHASES["idle"])}
    for phase in ("catchup", "idle"):
        b = result[phase]
        print(phase, b["recalls"], "recalls; wall p50/p95", b["wall_ms"]["p50"],
              b["wall_ms"]["p95"])
        print("  mean ms:", b["mean_ms"])
        print("  slowest 10% mean ms:", b["slowest_decile_mean_ms"])
        print("  calls/recall:", b["calls"])
    write_result(f"catchup_wait{('_' + args.tag) if args.tag else ''}", result)


if __name__ == "__main__":
    main()
