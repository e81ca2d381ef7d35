#!/usr/bin/env python
"""Recall at scale on the embedded engine: latency with the bare Qdrant search as baseline.

    python bench/probes/recall_scale.py                           # rows c, b, a (defaults below)
    python bench/probes/recall_scale.py --rows a --a-points 1000000 --queries 200

Rows (synthetic 384-d vectors around 512 topic centres, synthetic word texts for BM25; the
model is not the point, except in the "incl. embedding" column):
- c: 10k turns in one session (below `index_after_points`: the product never builds a
  graph for it, the filtered search compares exactly);
- b: 1M points across 10k sessions (the multi-tenant shape), recall in one session;
- a: one session of 100k (or --a-points) points, before and after the HNSW build the store
  runs in its background child (build wall and CPU time, child peak RSS, recall latency
  while the build runs, the graph's recall@k against an exact scan).
  `--lock-arm [--idle-s S]`: then the same store closed, left S seconds and opened again,
  unlocked, locked in memory (`lock_in_memory`), unlocked again, with each pass's major
  page faults (a host that pages out idle memory sends recall's searches to the disk).
  `--pause-niced`: on a machine shared with background work run at a positive nice value,
  that work is stopped during each timed phase (not the fill or the build) and continued
  after; each phase records how many processes it paused.

The store is filled through `EdgeVectorStore.upsert` with prebuilt vectors (bench/
scale_fill.py: not what is measured). Per row, interleaved query by query: p50/p95 of the
bare dense search (`VectorStore.search_turns`, filtered to the session: the baseline), of
`Recaller.recall` with a precomputed query vector (excl. embedding), and of `Recaller.recall`
embedding the query with the product's query embedder (incl.). Recall runs the default
`balanced` policy: dense + BM25 searches over turns and facts, neighbours, scoring, budget.
Redis is a redis-server of the bench's own on a unix socket (an empty recent window: the
point is the vector store; fakeredis, pure Python, cost recall ~1 ms here). Each row notes
the load average before and after. Saved to bench/results/recall_scale.json.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: harness, suites

from harness import (
    RESULTS,
    PausedBackground,
    RedisServer,
    machine_facts,
    offline_model_env,
    summarize,
)
from scale_fill import DIM, FixedQuery, bulk_fill, load_avg, summarize_versus, versus_exact


def rss_mb() -> float:
    with open("/proc/self/status", encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def child_rss(store: Any) -> dict[str, float]:
    """The build child's resident memory now (anonymous and file-backed, MB): ru_maxrss
    counts the shard files it maps as well."""
    child = store.indexer._child
    out: dict[str, float] = {}
    if child is None:
        return out
    try:
        with open(f"/proc/{child.pid}/status", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith(("RssAnon:", "RssFile:")):
                    out[line.split(":")[0]] = int(line.split()[1]) / 1024
    except OSError:
        pass
    return out


def exact_hits(store: Any, session: str, vector: np.ndarray,
               limit: int) -> list[tuple[str, float]]:
    import qdrant_edge as qe

    request = qe.QueryRequest(
        limit=limit, query=qe.Query.Nearest(vector.tolist(), using="dense"),
        filter=store._filter({"session_id": session}), with_payload=True,
        with_vector=False, params=qe.SearchParams(exact=True))
    return [(str(p.payload["turn_id"]), float(p.score))
            for p in store._on("bench", "turns", "query", request)]


def measure(store: Any, recaller: Any, fixed: FixedQuery, session: str, queries: list[str],
            qvecs: np.ndarray, policy: Any, *, check: bool = False,
            pause: bool = False) -> dict[str, Any]:
    with PausedBackground(pause) as paused:
        out = _measure(store, recaller, fixed, session, queries, qvecs, policy, check=check)
    out["paused_niced_processes"] = paused.paused
    return out


def _measure(store: Any, recaller: Any, fixed: FixedQuery, session: str, queries: list[str],
             qvecs: np.ndarray, policy: Any, *, check: bool) -> dict[str, Any]:
    bare: list[float] = []
    excl: list[float] = []
    incl: list[float] = []
    overlap: list[tuple[float, float, float]] = []
    graph_hits: list[Any] = []
    for text, vec in zip(queries[:10], qvecs[:10], strict=True):  # first reads after opening
        store.search_turns(session, vec, policy.search_limit)
        fixed.vector = vec
        recaller.embedder = fixed
        recaller.recall(session, text, 4000, policy)
    for text, vec in zip(queries, qvecs, strict=True):
        t0 = time.perf_counter()
        hits = store.search_turns(session, vec, policy.search_limit)
        bare.append((time.perf_counter() - t0) * 1000)
        recaller.embedder = fixed
        fixed.vector = vec
        t0 = time.perf_counter()
        recaller.recall(session, text, 4000, policy)
        excl.append((time.perf_counter() - t0) * 1000)
        recaller.embedder = fixed.inner
        t0 = time.perf_counter()
        recaller.recall(session, text, 4000, policy)
        incl.append((time.perf_counter() - t0) * 1000)
        if check:
            graph_hits.append(hits)
    # The graph against an exact scan, after the timed loop: a scan reads every vector of
    # the session (~150 MB at 100k points) and, run between the timed calls, evicted what
    # the next search and recall had in cache (+2.3 ms a recall at 100k, measured).
    if check:
        for hits, vec in zip(graph_hits, qvecs, strict=True):
            overlap.append(versus_exact(hits, exact_hits(store, session, vec,
                                                         policy.search_limit)))
    out: dict[str, Any] = {
        "bare_search_ms": summarize(bare), "recall_excl_embedding_ms": summarize(excl),
        "recall_incl_embedding_ms": summarize(incl),
        "excl_over_bare_p95": round(summarize(excl)["p95"] / summarize(bare)["p95"], 2)}
    if check:
        out["search_vs_exact"] = summarize_versus(overlap, policy.search_limit)
    return out


def row(name: str, points: int, per_session: int, build: bool, args: argparse.Namespace,
        embedder: Any, log: Any) -> dict[str, Any]:
    import redis as redis_py

    from hivemem.config import VectorIndexSettings
    from hivemem.domain.recall.policy import PRESETS
    from hivemem.pipeline.topology import Keys
    from hivemem.recall.recaller import Recaller
    from hivemem.store.episodes import EpisodeStore
    from hivemem.store.state import TurnLog
    from hivemem.store.vectors.base import TURNS
    from hivemem.store.vectors.edge import EdgeVectorStore

    rng = np.random.default_rng(7)
    n_sessions = max(1, points // per_session)
    tmp = Path(tempfile.mkdtemp(prefix="hivemem-scale-", dir=args.tmp))
    # Builds by hand here (timed), not by growth; the child not niced (the build is timed).
    settings = VectorIndexSettings(index_after_points=0, index_build_nice=0, **args.index)
    out: dict[str, Any] = {"points": points, "sessions": n_sessions,
                           "points_per_session": points // n_sessions,
                           "index_settings": settings.model_dump(), "load_before": load_avg()}
    store = None
    recaller = None
    server = None
    try:
        log(f"{name}: {points} points in {n_sessions} session(s)")
        t0 = time.perf_counter()
        qbase, sessions, texts = bulk_fill(tmp / "q", points, n_sessions, rng, settings,
                                           log=log)
        out["fill_s"] = round(time.perf_counter() - t0, 1)
        store = EdgeVectorStore(tmp / "q", DIM, settings)
        server = RedisServer(tmp, appendonly=False)
        server.start()
        redis = redis_py.Redis.from_url(server.url)
        keys = Keys("bench")
        recaller = Recaller(TurnLog(redis, keys, 50), EpisodeStore(redis, keys, 10_000),
                            store, embedder)
        fixed = FixedQuery(embedder)
        policy = PRESETS["balanced"]
        session = sessions[0]
        picks = rng.choice(len(qbase), size=args.queries)
        qvecs = qbase[picks] + 0.3 * rng.standard_normal((args.queries, DIM)).astype(
            np.float32)
        qvecs /= np.linalg.norm(qvecs, axis=1, keepdims=True)
        queries = [" ".join(texts[i].split()[:5]) for i in picks]
        out["segments_before"] = store.index_info(TURNS)
        out["rss_mb_after_fill"] = rss_mb()
        out["unindexed"] = measure(store, recaller, fixed, session, queries, qvecs, policy,
                                   pause=args.pause_niced)
        log(f"  unindexed: {_line(out['unindexed'])}  load {load_avg()}")
        if build:
            during: list[float] = []
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            store.build_index(TURNS, wait=False)
            peak: dict[str, float] = {}
            while store.indexer.running:
                for k, v in child_rss(store).items():
                    peak[k] = max(peak.get(k, 0.0), v)
                i = len(during) % len(qvecs)
                fixed.vector = qvecs[i]
                recaller.embedder = fixed
                s = time.perf_counter()
                recaller.recall(session, queries[i], 4000, policy)
                during.append((time.perf_counter() - s) * 1000)
                time.sleep(0.05)
            store.indexer.wait()
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            out["index_build_wall_s"] = round(time.perf_counter() - t0, 1)
            out["index_build_child_cpu_s"] = round(
                after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1)
            out["index_builds"] = store.indexer.builds
            out["recall_excl_embedding_during_build_ms"] = summarize(during) if during else None
            out["child_peak_rss_mb"] = round(after.ru_maxrss / 1024, 1)
            out["child_peak_rss_sampled_mb"] = {k: round(v, 1) for k, v in peak.items()}
            out["segments_after"] = store.index_info(TURNS)
            out["load_after_build"] = load_avg()
            # The first recalls on the swapped-in shard (its files are new to this process).
            first = []
            for i in range(20):
                fixed.vector = qvecs[i]
                recaller.embedder = fixed
                s = time.perf_counter()
                recaller.recall(session, queries[i], 4000, policy)
                first.append(round((time.perf_counter() - s) * 1000, 2))
            out["first_recalls_after_swap_excl_embedding_ms"] = first
            out["indexed"] = measure(store, recaller, fixed, session, queries, qvecs, policy,
                                     check=True, pause=args.pause_niced)
            log(f"  built in {out['index_build_wall_s']} s wall,"
                f" {out['index_build_child_cpu_s']} CPU-s, {out['segments_after']}")
            log(f"  indexed:   {_line(out['indexed'])}  load {load_avg()}")
            if args.lock_arm:
                store, recaller = lock_arm(store, recaller, fixed, session, queries, qvecs,
                                           policy, out, log, args)
        out["process_peak_rss_mb"] = round(
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        out["rss_mb_end"] = rss_mb()
        out["folder_mb"] = round(sum(f.stat().st_blocks * 512 for f in tmp.rglob("*")
                                     if f.is_file()) / 2**20, 1)
        out["load_after"] = load_avg()
    finally:
        if recaller is not None:
            recaller.close()
        if store is not None:
            store.close()
        if server is not None:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def lock_arm(store: Any, recaller: Any, fixed: FixedQuery, session: str, queries: list[str],
             qvecs: np.ndarray, policy: Any, out: dict[str, Any], log: Any,
             args: argparse.Namespace) -> tuple[Any, Any]:
    """The store closed, left alone `--idle-s` seconds and opened again: unlocked, with
    `lock_in_memory`, unlocked again (A-B-A in one run), with each pass's major page faults
    and the open's time. A host that pages out idle memory empties the page cache of a
    store nobody has open, and the first recalls after it is opened (a restart, a
    deploy) read the files from disk a page at a time. Returns the store and recaller
    open at the end (the caller closes them)."""
    from hivemem.recall.recaller import Recaller
    from hivemem.store.vectors.edge import EdgeVectorStore

    def reopen(name: str, lock: bool) -> None:
        nonlocal store, recaller
        path, settings = store.path, store.index
        recaller.close()
        store.close()
        if args.idle_s:
            log(f"  closed; idle {args.idle_s} s before {name}")
            time.sleep(args.idle_s)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_majflt
        t0 = time.perf_counter()
        store = EdgeVectorStore(path, DIM, settings.model_copy(update={"lock_in_memory": lock}))
        opened = round((time.perf_counter() - t0) * 1000, 1)
        recaller = Recaller(recaller.state, recaller.episodes, store, fixed.inner)
        at_open = resource.getrusage(resource.RUSAGE_SELF).ru_majflt
        out[name] = measure(store, recaller, fixed, session, queries, qvecs, policy,
                            pause=args.pause_niced)
        memory = store._memory
        out[name].update({
            "open_ms": opened, "major_faults_at_open": at_open - before,
            "major_faults_per_query": round(
                (resource.getrusage(resource.RUSAGE_SELF).ru_majflt - at_open)
                / len(queries), 2),
            "locked_mb": round(memory.total_bytes / 2**20, 1) if memory else 0.0,
            "lock_refused": memory.refused if memory else None})
        log(f"  {name}: {_line(out[name])}  open {opened} ms, majflt/query"
            f" {out[name]['major_faults_per_query']}, locked {out[name]['locked_mb']} MB"
            f"  load {load_avg()}")

    out["idle_s_before_each_open"] = args.idle_s
    reopen("reopened_unlocked", False)
    reopen("reopened_locked", True)
    reopen("reopened_unlocked_again", False)
    return store, recaller


def _line(m: dict[str, Any]) -> str:
    return "  ".join(f"{k.replace('_ms', '')} p50 {v['p50']:.2f} p95 {v['p95']:.2f}"
                     for k, v in m.items() if isinstance(v, dict) and "p50" in v)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", nargs="*", default=["c", "b", "a"], choices=["c", "b", "a"])
    ap.add_argument("--a-points", type=int, default=100_000)
    ap.add_argument("--b-points", type=int, default=1_000_000)
    ap.add_argument("--b-per-session", type=int, default=100)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--no-build", dest="build", action="store_false")
    ap.add_argument("--build-c", action="store_true",
                    help="build row c's graph too (the product does not below"
                         " index_after_points)")
    ap.add_argument("--tmp", default=None, help="where the stores are made (default: /tmp)")
    ap.add_argument("--index", nargs="*", default=[], metavar="KEY=VALUE",
                    help="VectorIndexSettings overrides, e.g. hnsw_m=0 (named in the row)")
    ap.add_argument("--out", default=str(RESULTS / "recall_scale.json"))
    ap.add_argument("--query-precision", choices=["int8", "fp32"], default="int8",
                    help="recall's query model (the product's default: int8)")
    ap.add_argument("--label", default="",
                    help="appended to the row names (e.g. which code ran: a before/after)")
    ap.add_argument("--lock-arm", action="store_true",
                    help="after the indexed pass: the store reopened unlocked, locked in"
                         " memory (lock_in_memory), unlocked again")
    ap.add_argument("--idle-s", type=float, default=0.0,
                    help="with --lock-arm: seconds the store stays closed before each open")
    ap.add_argument("--pause-niced", action="store_true",
                    help="stop other work's niced processes (SIGSTOP) during each timed phase "
                         "and continue them after (a shared machine; recorded per row)")
    ap.add_argument("--merge", action="store_true",
                    help="keep the other rows already in --out (replace only these)")
    args = ap.parse_args()
    overrides = dict(kv.split("=", 1) for kv in args.index)
    args.index = {k: (None if v == "none" and k == "hnsw_ef" else
                      v if k == "quantization" else int(v)) for k, v in overrides.items()}
    suffix = "".join(f", {k}={v}" for k, v in args.index.items())
    suffix += f", {args.query_precision} query"
    if args.label:
        suffix += f", {args.label}"
    offline_model_env()
    from hivemem.config import EmbeddingSettings
    from hivemem.providers.embedders import build_embedder

    def log(msg: str) -> None:
        print(msg, flush=True)

    embedder = build_embedder(EmbeddingSettings(query_precision=args.query_precision),
                              for_queries=True)
    result: dict[str, Any] = {"benchmark": "recall-scale", "dim": DIM, "rows": {}}
    if args.merge and Path(args.out).exists():
        result = json.loads(Path(args.out).read_text(encoding="utf-8"))
    shapes = {
        "c": ("c: 10k in one session", 10_000, 10_000, args.build_c),
        "b": (f"b: {args.b_points} across {args.b_points // args.b_per_session} sessions",
              args.b_points, args.b_per_session, args.build),
        "a": (f"a: {args.a_points} in one session", args.a_points, args.a_points,
              args.build),
    }
    for key in args.rows:
        name, points, per, build = shapes[key]
        name += suffix
        result["rows"][name] = row(name, points, per, build, args, embedder, log)
        result["rows"][name]["queries"] = args.queries
        result.update({"machine": machine_facts(),
                       "generated_at": datetime.now(UTC).isoformat(timespec="seconds")})
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2), encoding="utf-8")
    log(f"saved {args.out}")


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    main()
