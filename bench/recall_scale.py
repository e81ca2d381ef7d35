#!/usr/bin/env python
"""Recall at scale on the embedded engine: latency with the bare Qdrant search as baseline.

    nice python bench/recall_scale.py                    # rows c, b, a (defaults below)
    nice python bench/recall_scale.py --rows c --queries 200

Rows (synthetic 384-d vectors around 512 topic centres, synthetic word texts for BM25; the
model is not the point, except in the "incl. embedding" column):
- c: 10k turns in one session;
- b: N points across N/100 sessions (the multi-tenant shape), recall in one session;
- a: one session of N points, before and after the background HNSW build (build time,
  child-process peak memory, and recall latency while the build runs).

Per row: p50/p95 of the bare dense search (`VectorStore.search_turns`, filtered to the
session), of `Recaller.recall` with a precomputed query vector (excl. embedding), and of
`Recaller.recall` embedding the query with fastembed all-MiniLM-L6-v2 (incl.). Recall runs
the default `balanced` policy: dense + BM25 searches over turns and facts, neighbours,
scoring, budget. Redis is fakeredis (an empty recent window: the point is the vector store).
Saved to bench/results/recall_scale.json.
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
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import RESULTS, machine_facts, offline_model_env, summarize

DIM = 384
CENTRES = 512
VOCAB = 5000


class FixedQuery:
    """An embedder whose query vector is given: recall without the embedding cost."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.vector: Any = None
        self.dim = DIM

    def embed_documents(self, texts: Any) -> Any:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> Any:
        return self.vector


def corpus(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, list[str]]:
    centres = rng.standard_normal((CENTRES, DIM)).astype(np.float32)
    topic = rng.integers(0, CENTRES, n)
    vectors = centres[topic] + 0.9 * rng.standard_normal((n, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    words = rng.integers(0, VOCAB, (n, 12))
    texts = [" ".join(f"w{(t * 7 + w) % VOCAB}" for w in row) for t, row in zip(topic, words,
                                                                                 strict=True)]
    return vectors, topic, texts


def fill(store: Any, sessions: list[str], n: int, rng: np.random.Generator,
         log: Any) -> tuple[np.ndarray, list[str], float]:
    from hivemem.domain.models import Role, Turn
    from hivemem.providers.lexical import LexicalEncoder

    lexical = LexicalEncoder()
    vectors, _topic, texts = corpus(n, rng)
    t0 = time.perf_counter()
    start = datetime(2026, 1, 1, tzinfo=UTC)
    batch = 1000
    for i in range(0, n, batch):
        turns = []
        for j in range(i, min(n, i + batch)):
            session = sessions[j % len(sessions)]
            seq = j // len(sessions) + 1
            turns.append(Turn.model_construct(
                turn_id=f"t{seq}", session_id=session, agent_id=None, role=Role.USER,
                content=texts[j], markers=(), metadata={}, timestamp=start + timedelta(
                    seconds=j), seq=seq, token_count=14, namespace="default",
                visibility="shared", duplicate=False))
        store.upsert_turns(turns, vectors[i:i + len(turns)],
                           [lexical.document(t.content) for t in turns])
        if (i // batch) % 20 == 0:
            log(f"    {i + len(turns)}/{n} points, {time.perf_counter() - t0:.0f} s")
    return vectors, texts, time.perf_counter() - t0


def measure(store: Any, recaller: Any, fixed: FixedQuery, session: str, queries: list[str],
            qvecs: np.ndarray, policy: Any) -> dict[str, Any]:
    bare, excl, incl = [], [], []
    for text, vec in zip(queries, qvecs, strict=True):
        t0 = time.perf_counter()
        store.search_turns(session, vec, policy.search_limit)
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
    return {"bare_search_ms": summarize(bare), "recall_excl_embedding_ms": summarize(excl),
            "recall_incl_embedding_ms": summarize(incl)}


def row(name: str, points: int, per_session: int, args: argparse.Namespace, embedder: Any,
        log: Any) -> dict[str, Any]:
    import fakeredis

    from hivemem.config import VectorIndexSettings
    from hivemem.domain.recall.policy import PRESETS
    from hivemem.pipeline.topology import Keys
    from hivemem.producer.recall import Recaller
    from hivemem.store.episodes import EpisodeStore
    from hivemem.store.state import SessionState
    from hivemem.store.vectors.base import TURNS
    from hivemem.store.vectors.edge import EdgeVectorStore

    rng = np.random.default_rng(7)
    sessions = [f"s{i}" for i in range(max(1, points // per_session))]
    tmp = Path(tempfile.mkdtemp(prefix="hivemem-scale-"))
    # Index builds by hand here (timed), not by growth.
    store = EdgeVectorStore(tmp / "q", DIM, VectorIndexSettings(index_after_points=0))
    out: dict[str, Any] = {"points": points, "sessions": len(sessions),
                           "points_per_session": points // len(sessions)}
    try:
        log(f"{name}: {points} points in {len(sessions)} session(s)")
        vectors, texts, fill_s = fill(store, sessions, points, rng, log)
        out["fill_s"] = round(fill_s, 1)
        redis = fakeredis.FakeRedis()
        keys = Keys("bench")
        recaller = Recaller(SessionState(redis, keys, 50), EpisodeStore(redis, keys, 10_000),
                            store, embedder)
        fixed = FixedQuery(embedder)
        policy = PRESETS["balanced"]
        session = sessions[0]
        mine = [i for i in range(points) if i % len(sessions) == 0]
        picks = rng.choice(mine, size=args.queries)
        qvecs = vectors[picks] + 0.3 * rng.standard_normal((args.queries, DIM)).astype(
            np.float32)
        qvecs /= np.linalg.norm(qvecs, axis=1, keepdims=True)
        queries = [" ".join(texts[i].split()[:5]) for i in picks]
        recaller.recall(session, "warm up", 4000, policy)
        out["unindexed"] = measure(store, recaller, fixed, session, queries, qvecs, policy)
        log(f"  unindexed: {_line(out['unindexed'])}")
        if args.build and name.startswith("a"):
            during: list[float] = []
            t0 = time.perf_counter()
            store.build_index(TURNS, wait=False)
            while store.indexer.running:
                fixed.vector = qvecs[len(during) % len(qvecs)]
                recaller.embedder = fixed
                s = time.perf_counter()
                recaller.recall(session, queries[len(during) % len(queries)], 4000, policy)
                during.append((time.perf_counter() - s) * 1000)
                time.sleep(0.05)
            store.indexer.wait()
            out["index_build_s"] = round(time.perf_counter() - t0, 1)
            out["index_builds"] = store.indexer.builds
            out["recall_excl_embedding_during_build_ms"] = summarize(during) if during else None
            out["child_peak_rss_mb"] = round(
                resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1)
            info = store._shards[TURNS].info()
            out["indexed_vectors"] = info.indexed_vectors_count
            out["indexed"] = measure(store, recaller, fixed, session, queries, qvecs, policy)
            log(f"  built in {out['index_build_s']} s ({info.indexed_vectors_count} indexed;"
                f" recall during build p95"
                f" {out['recall_excl_embedding_during_build_ms'] and out['recall_excl_embedding_during_build_ms']['p95']} ms)")
            log(f"  indexed:   {_line(out['indexed'])}")
        out["process_peak_rss_mb"] = round(
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        out["folder_mb"] = round(sum(f.stat().st_blocks * 512 for f in tmp.rglob("*")
                                     if f.is_file()) / 2**20, 1)
        recaller.close()
    finally:
        store.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _line(m: dict[str, Any]) -> str:
    return "  ".join(f"{k.replace('_ms', '')} p50 {v['p50']:.2f} p95 {v['p95']:.2f}"
                     for k, v in m.items())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", nargs="*", default=["c", "b", "a"], choices=["c", "b", "a"])
    ap.add_argument("--points", type=int, default=100_000, help="rows a and b")
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--no-build", dest="build", action="store_false")
    ap.add_argument("--out", default=str(RESULTS / "recall_scale.json"))
    args = ap.parse_args()
    offline_model_env()
    from hivemem.config import EmbeddingSettings
    from hivemem.providers.embedders import build_embedder

    def log(msg: str) -> None:
        print(msg, flush=True)

    embedder = build_embedder(EmbeddingSettings(), for_queries=True)
    result: dict[str, Any] = {"benchmark": "recall-scale", "dim": DIM, "queries": args.queries,
                              "rows": {}}
    shapes = {"c": ("c: 10k in one session", 10_000, 10_000),
              "b": (f"b: {args.points} across {args.points // 100} sessions", args.points, 100),
              "a": (f"a: {args.points} in one session", args.points, args.points)}
    for key in args.rows:
        name, points, per = shapes[key]
        result["rows"][name] = row(name, points, per, args, embedder, log)
    result.update({"machine": machine_facts(),
                   "generated_at": datetime.now(UTC).isoformat(timespec="seconds")})
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2), encoding="utf-8")
    log(f"saved {args.out}")


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    main()
