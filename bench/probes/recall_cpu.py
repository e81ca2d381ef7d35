#!/usr/bin/env python
"""Recall's CPU time per call (process_time: the engine's and the helper's threads included)
and wall time, next to the bare dense search, on a store filled directly
(bench/probes/scale_fill.py), the query vector given (excl. the embedding). CPU time is
robust to other work on the machine, wall time is not. For an A/B, run it against two trees
in turn (PYTHONPATH picks the `hivemem`):

    PYTHONPATH=/work/main python bench/probes/recall_cpu.py --points 10000 --queries 200
    PYTHONPATH=$PWD python bench/probes/recall_cpu.py --points 10000 --queries 200
    python bench/ab.py --baseline /tmp/base -- probes/recall_cpu.py --points 100000 --index

Appends one JSON row per run to bench/results/latest/recall_cpu.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # bench/: harness
sys.path.insert(0, str(HERE))  # scale_fill, recall_scale

from harness import RedisServer, offline_model_env  # noqa: E402
from recall_scale import FixedQuery  # noqa: E402
from scale_fill import DIM, bulk_fill  # noqa: E402


def percentiles(values: list[float]) -> list[float]:
    v = sorted(values)
    return [round(v[len(v) // 2], 2), round(v[int(len(v) * 0.95)], 2)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--points", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--index", action="store_true",
                    help="build the HNSW graph before measuring (recall_scale.py's row a"
                         " indexed; else the filtered search compares exactly, as row c)")
    args = ap.parse_args()
    offline_model_env()
    import redis as redis_py

    from hivemem.config import EmbeddingSettings, VectorIndexSettings
    from hivemem.domain.recall.policy import PRESETS
    from hivemem.pipeline.topology import Keys
    from hivemem.providers.embedders import build_embedder
    from hivemem.recall.recaller import Recaller
    from hivemem.store.episodes import EpisodeStore
    from hivemem.store.state import TurnLog
    from hivemem.store.vectors.base import TURNS
    from hivemem.store.vectors.edge import EdgeVectorStore

    rng = np.random.default_rng(7)
    tmp = Path(tempfile.mkdtemp(prefix="hivemem-cpu-"))
    settings = (VectorIndexSettings(index_after_points=0, index_build_nice=0) if args.index
                else VectorIndexSettings(index_after_points=10**9))
    qbase, sessions, texts = bulk_fill(tmp / "q", args.points, 1, rng, settings, log=print)
    store = EdgeVectorStore(tmp / "q", DIM, settings)
    if args.index:
        store.build_index(TURNS)
    server = RedisServer(tmp, appendonly=False)
    server.start()
    try:
        redis = redis_py.Redis.from_url(server.url)
        keys = Keys("bench")
        fixed = FixedQuery(build_embedder(EmbeddingSettings(), for_queries=True))
        recaller = Recaller(TurnLog(redis, keys, 50), EpisodeStore(redis, keys, 10_000),
                            store, fixed)
        policy, session, n = PRESETS["balanced"], sessions[0], args.queries
        picks = rng.choice(len(qbase), size=n)
        vectors = qbase[picks] + 0.3 * rng.standard_normal((n, DIM)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        queries = [" ".join(texts[i].split()[:5]) for i in picks]
        for i in range(10):
            fixed.vector = vectors[i]
            recaller.recall(session, queries[i], 4000, policy)
        times: dict[str, list[float]] = {k: [] for k in ("recall_wall", "bare_wall",
                                                           "recall_cpu", "bare_cpu")}
        for i in range(n):
            t, c = time.perf_counter(), time.process_time()
            store.search_turns(session, vectors[i], policy.search_limit)
            times["bare_wall"].append((time.perf_counter() - t) * 1000)
            times["bare_cpu"].append((time.process_time() - c) * 1000)
            fixed.vector = vectors[i]
            t, c = time.perf_counter(), time.process_time()
            recaller.recall(session, queries[i], 4000, policy)
            times["recall_wall"].append((time.perf_counter() - t) * 1000)
            times["recall_cpu"].append((time.process_time() - c) * 1000)
        recaller.close()
    finally:
        store.close()
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    row: dict[str, Any] = {"tree": os.environ.get("PYTHONPATH"), "points": args.points,
                           "indexed": args.index,
                           "n": n, **{k: percentiles(v) for k, v in times.items()},
                           "load": os.getloadavg()}
    print(json.dumps(row))
    out = HERE.parent / "results" / "latest" / "recall_cpu.jsonl"
    with out.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
