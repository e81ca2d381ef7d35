#!/usr/bin/env python
"""Recall's own cost, this code against a baseline checkout, interleaved in one run.

    git -C /work/main archive main | tar -x -C /tmp/base   # the baseline's source tree
    python bench/probes/recall_ab.py --baseline /tmp/base --points 10000
    python bench/probes/recall_ab.py --baseline /tmp/base --points 100000 --build   # row a's shape

One store (bench/probes/scale_fill.py, one session, no HNSW build) is filled once and copied; two
child processes open one copy each, one importing hivemem from --baseline, the other from
this repository, and recall the same queries (fixed query vectors: no embedding) in
alternating blocks, so that both see the same machine load. Each child reports CPU
(time.process_time, the engine's threads included) and wall time per recall, and every
recall's items (ids and scores): the two must recall the same. Saved to
bench/results/recall_ab.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # bench/: harness


def child(store: Path, queries: Path, embed: bool, fake_redis: bool) -> None:
    """Serve blocks of recalls: read "start count" lines, answer one JSON line each."""
    import fakeredis
    import redis as redis_py
    from harness import RedisServer

    from hivemem.config import VectorIndexSettings
    from hivemem.store.vectors.edge import EdgeVectorStore

    data = np.load(queries, allow_pickle=False)
    vectors, texts = data["vectors"], [str(t) for t in data["texts"]]
    session = str(data["session"])
    settings = VectorIndexSettings(index_after_points=0, index_build_nice=0)
    vstore = EdgeVectorStore(store, vectors.shape[1], settings)
    server = None
    if fake_redis:
        redis: Any = fakeredis.FakeRedis()
    else:  # the product's: a real server, over a socket (its own, per child)
        server = RedisServer(Path(tempfile.mkdtemp(prefix="hivemem-ab-redis-")),
                             appendonly=False)
        server.start()
        redis = redis_py.Redis.from_url(server.url)
    try:
        _serve(vstore, redis, vectors, texts, session, embed)
    finally:
        vstore.close()
        if server is not None:
            server.stop()
            shutil.rmtree(server.folder, ignore_errors=True)


def _serve(vstore: Any, redis: Any, vectors: Any, texts: list[str], session: str,
           embed: bool) -> None:
    from recall_profile import FixedQuery

    from hivemem.domain.recall.policy import PRESETS
    from hivemem.pipeline.topology import Keys
    from hivemem.recall.recaller import Recaller
    from hivemem.store.episodes import EpisodeStore
    from hivemem.store.state import TurnLog

    keys = Keys("bench")
    fixed = FixedQuery()
    embedder: Any = fixed
    if embed:  # the product's query embedder: the query text is embedded in each recall
        from hivemem.config import EmbeddingSettings
        from hivemem.providers.embedders import build_embedder

        embedder = build_embedder(EmbeddingSettings(), for_queries=True)
    recaller = Recaller(TurnLog(redis, keys, 50), EpisodeStore(redis, keys, 10_000),
                        vstore, embedder)
    policy = PRESETS["balanced"]
    try:
        for i in range(10):  # warm-up
            fixed.vector = vectors[i]
            recaller.recall(session, texts[i], 4000, policy)
        import hivemem

        print(json.dumps({"ready": hivemem.__file__}), flush=True)
        for line in sys.stdin:
            start, count = map(int, line.split())
            cpu: list[float] = []
            wall: list[float] = []
            items: list[list[tuple[str, float]]] = []
            for i in range(start, start + count):
                fixed.vector = vectors[i % len(vectors)]
                c0, w0 = time.process_time(), time.perf_counter()
                result = recaller.recall(session, texts[i % len(texts)], 4000, policy)
                cpu.append((time.process_time() - c0) * 1000)
                wall.append((time.perf_counter() - w0) * 1000)
                items.append([(x.source_id, x.score) for x in result.items])
            print(json.dumps({"cpu": cpu, "wall": wall, "items": items}), flush=True)
    finally:
        recaller.close()


def fill(tmp: Path, args: argparse.Namespace, n: int) -> None:
    from scale_fill import DIM, bulk_fill

    from hivemem.config import VectorIndexSettings

    settings = VectorIndexSettings(index_after_points=0, index_build_nice=0)
    qbase, sessions, texts = bulk_fill(tmp / "store", args.points, 1,
                                       np.random.default_rng(7), settings)
    if args.build:
        from hivemem.store.vectors.base import TURNS
        from hivemem.store.vectors.edge import EdgeVectorStore

        built = EdgeVectorStore(tmp / "store", DIM, settings)
        try:
            built.build_index(TURNS)
        finally:
            built.close()
    rng = np.random.default_rng(11)
    picks = rng.choice(len(qbase), size=n)
    qvecs = qbase[picks] + 0.3 * rng.standard_normal((n, DIM)).astype(np.float32)
    qvecs /= np.linalg.norm(qvecs, axis=1, keepdims=True)
    np.savez(tmp / "queries.npz", vectors=qvecs, session=sessions[0],
             texts=np.array([" ".join(texts[i].split()[:5]) for i in picks]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", required=True, help="source tree of the baseline code")
    ap.add_argument("--points", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--per-round", type=int, default=50)
    ap.add_argument("--out", default=str(HERE.parent / "results" / "latest" / "recall_ab.json"))
    ap.add_argument("--embed", action="store_true",
                    help="embed each query with the product's query embedder (incl. embedding)")
    ap.add_argument("--build", action="store_true",
                    help="build the HNSW graph once before the store is copied (row a's shape)")
    ap.add_argument("--fake-redis", action="store_true",
                    help="fakeredis in-process instead of a redis-server per child")
    ap.add_argument("--store", default=None,
                    help="a filled (and built) store to copy instead of filling one")
    ap.add_argument("--queries", default=None,
                    help="with --store: an .npz of vectors, texts and session")
    ap.add_argument("--child", nargs=2, metavar=("STORE", "QUERIES"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if bool(args.store) != bool(args.queries):
        ap.error("--store and --queries go together")
    if args.child:
        child(Path(args.child[0]), Path(args.child[1]), args.embed, args.fake_redis)
        return

    from harness import machine_facts, offline_model_env, summarize
    from scale_fill import load_avg

    offline_model_env()
    tmp = Path(tempfile.mkdtemp(prefix="hivemem-ab-"))
    procs: dict[str, subprocess.Popen[str]] = {}
    try:
        n = args.rounds * args.per_round
        if args.store:
            shutil.copytree(args.store, tmp / "store")
            shutil.copy(args.queries, tmp / "queries.npz")
        else:
            fill(tmp, args, n)
        roots = {"baseline": Path(args.baseline).resolve(), "this": HERE.parents[1]}
        for arm, root in roots.items():
            shutil.copytree(tmp / "store", tmp / arm)
            env = {**os.environ, "PYTHONPATH": str(root)}
            procs[arm] = subprocess.Popen(
                [sys.executable, str(HERE / "recall_ab.py"), "--baseline", str(root),
                 "--child", str(tmp / arm), str(tmp / "queries.npz"),
                 *(["--embed"] if args.embed else []),
                 *(["--fake-redis"] if args.fake_redis else [])],
                cwd=root, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            )
            assert procs[arm].stdout is not None
            ready = json.loads(procs[arm].stdout.readline())["ready"]
            if not Path(ready).resolve().is_relative_to(root):
                raise SystemExit(f"{arm}: imported {ready}, not from {root}")
        out: dict[str, Any] = {"benchmark": "recall-ab", "points": args.points,
                               "store": args.store, "redis": "fakeredis" if args.fake_redis
                               else "redis-server per child",
                               "hnsw_built": args.build,
                               "query_embedding": "included" if args.embed else "excluded",
                               "load_before": load_avg()}
        got: dict[str, dict[str, list[Any]]] = {a: {"cpu": [], "wall": [], "items": []}
                                                for a in procs}
        for r in range(args.rounds):
            order = list(procs) if r % 2 == 0 else list(procs)[::-1]  # neither always first
            for arm in order:
                proc = procs[arm]
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write(f"{r * args.per_round} {args.per_round}\n")
                proc.stdin.flush()
                block = json.loads(proc.stdout.readline())
                for k in got[arm]:
                    got[arm][k] += block[k]
        out["load_after"] = load_avg()
        for arm in procs:
            out[arm] = {"cpu_ms_per_recall": summarize(got[arm]["cpu"]),
                        "wall_ms_per_recall": summarize(got[arm]["wall"])}
        same = sum(a == b for a, b in zip(got["baseline"]["items"], got["this"]["items"],
                                          strict=True))
        out["recalls"] = n
        out["recalls_with_identical_items"] = same
        # Ids in the same order, scores equal to float32 rounding (a similarity computed
        # from a stored vector instead of by the engine differs in the last bits).
        pairs = list(zip(got["baseline"]["items"], got["this"]["items"], strict=True))
        out["recalls_with_same_ids"] = sum([i for i, _s in a] == [i for i, _s in b]
                                           for a, b in pairs)
        out["max_score_difference_same_ids"] = max(
            (abs(x[1] - y[1]) for a, b in pairs if [i for i, _s in a] == [i for i, _s in b]
             for x, y in zip(a, b, strict=True)), default=0.0)
        for kind in ("cpu", "wall"):
            for stat in ("p50", "mean", "p95"):
                base = out["baseline"][f"{kind}_ms_per_recall"][stat]
                mine = out["this"][f"{kind}_ms_per_recall"][stat]
                out[f"{kind}_{stat}_this_over_baseline"] = round(mine / base, 3)
        out.update({"machine": machine_facts(),
                    "generated_at": datetime.now(UTC).isoformat(timespec="seconds")})
        print(json.dumps(out, indent=1))
        Path(args.out).write_text(json.dumps(out, indent=2), encoding="utf-8")
        print("saved", args.out)
    finally:
        for proc in procs.values():
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(timeout=60)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
