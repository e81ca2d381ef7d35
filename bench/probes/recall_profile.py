#!/usr/bin/env python
"""Where one recall's time goes beyond the bare dense search (excl. the query embedding).

    python bench/probes/recall_profile.py --points 10000 30000

For each store size (one session, bench/probes/scale_fill.py; no HNSW build unless --build):
CPU time per recall (time.process_time: the engine's threads included, less sensitive to
other work on the machine than wall time) split by the store and domain calls recall makes,
and an A/B of the hits' vectors, interleaved recall by recall: every vector of each hit
(dense and BM25: what the store asked for before) against the dense vector only (now).
Saved to bench/results/recall_profile.json.
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: harness, suites

from harness import RESULTS, machine_facts, summarize
from scale_fill import DIM, bulk_fill, load_avg


class FixedQuery:
    name = "fixed-query"
    dim = DIM

    def __init__(self) -> None:
        self.vector: Any = None

    def embed_query(self, text: str) -> Any:
        return self.vector

    def embed_documents(self, texts: Any) -> Any:
        raise AssertionError("the recent window is empty here")


def profile(points: int, build: bool, n: int, tmp: Path) -> dict[str, Any]:
    import fakeredis

    from hivemem.config import VectorIndexSettings
    from hivemem.domain.recall.policy import PRESETS
    from hivemem.pipeline.topology import Keys
    from hivemem.recall import recaller as recall_module
    from hivemem.recall.recaller import Recaller
    from hivemem.store.episodes import EpisodeStore
    from hivemem.store.state import TurnLog
    from hivemem.store.vectors import edge
    from hivemem.store.vectors.base import DENSE, FUSED, TURNS
    from hivemem.store.vectors.edge import EdgeVectorStore

    settings = VectorIndexSettings(index_after_points=0, index_build_nice=0)
    qbase, sessions, texts = bulk_fill(tmp, points, 1, np.random.default_rng(7), settings)
    store = EdgeVectorStore(tmp, DIM, settings)
    if build:
        store.build_index(TURNS)
    spent: collections.defaultdict[str, float] = collections.defaultdict(float)

    def timed(owner: Any, name: str, label: str) -> None:
        inner = getattr(owner, name)

        def wrapper(*a: Any, **k: Any) -> Any:
            t0 = time.process_time()
            try:
                return inner(*a, **k)
            finally:
                spent[label] += time.process_time() - t0

        setattr(owner, name, wrapper)

    for name in ("search_turns", "search_turns_and_windows", "search_turns_lexical", "search_facts",
                 "search_facts_lexical", "turns_by_seq", "get_turns"):
        timed(store, name, f"store.{name}")
    for name in ("select", "score_table", "context_item"):
        timed(recall_module, name, f"recall.{name}")
    redis = fakeredis.FakeRedis()
    keys = Keys("bench")
    state, episodes = TurnLog(redis, keys, 50), EpisodeStore(redis, keys, 10_000)
    fixed = FixedQuery()
    recaller = Recaller(state, episodes, store, fixed)
    timed(state, "recent_turns", "redis.recent_turns")
    timed(episodes, "progress", "redis.episode_progress")
    view, label = recaller.currency, "recall.currency (facts since last call)"

    class TimedCurrency:
        """The currency view with both of its calls timed (one label, as before recall
        read the facts first to skip fact searches in sessions without any)."""

        def __call__(self, *a: Any, **k: Any) -> Any:
            t0 = time.process_time()
            try:
                return view(*a, **k)
            finally:
                spent[label] += time.process_time() - t0

        def __getattr__(self, name: str) -> Any:  # the view's other calls, untimed
            return getattr(view, name)

        def facts(self, *a: Any, **k: Any) -> Any:
            t0 = time.process_time()
            try:
                return view.facts(*a, **k)
            finally:
                spent[label] += time.process_time() - t0

    recaller.currency = TimedCurrency()  # type: ignore[assignment]
    policy = PRESETS["balanced"]
    rng = np.random.default_rng(11)
    picks = rng.choice(len(qbase), size=n)
    qvecs = qbase[picks] + 0.3 * rng.standard_normal((n, DIM)).astype(np.float32)
    qvecs /= np.linalg.norm(qvecs, axis=1, keepdims=True)
    queries = [" ".join(texts[i].split()[:5]) for i in picks]
    out: dict[str, Any] = {"points": points, "built": build, "load_before": load_avg()}
    try:
        for i in range(min(10, n)):  # warm-up
            fixed.vector = qvecs[i]
            recaller.recall(sessions[0], queries[i], 4000, policy)
        spent.clear()
        kept = edge._HIT_VECTORS
        cpu: dict[str, list[float]] = {"dense_window": [], "all_vectors": []}
        wall: dict[str, list[float]] = {"dense_window": [], "all_vectors": []}
        same = True
        for i in range(n):
            fixed.vector = qvecs[i]
            results = {}
            arms: list[tuple[str, Any]] = [("dense_window", [DENSE, FUSED]), ("all_vectors", True)]
            for arm, vectors in arms if i % 2 == 0 else arms[::-1]:  # neither always first
                edge._HIT_VECTORS = vectors  # read by every search at call time
                c0, w0 = time.process_time(), time.perf_counter()
                results[arm] = recaller.recall(sessions[0], queries[i], 4000, policy)
                cpu[arm].append((time.process_time() - c0) * 1000)
                wall[arm].append((time.perf_counter() - w0) * 1000)
            same = same and ([x.source_id for x in results["dense_window"].items]
                             == [x.source_id for x in results["all_vectors"].items])
        edge._HIT_VECTORS = kept
        total = sum(cpu["dense_window"]) + sum(cpu["all_vectors"])
        out["cpu_ms_per_recall"] = {k: summarize(v) for k, v in cpu.items()}
        out["wall_ms_per_recall"] = {k: summarize(v) for k, v in wall.items()}
        out["same_items_both_arms"] = same
        # The split is over both arms (2n recalls).
        out["cpu_ms_split_per_recall"] = {k: round(v * 1000 / (2 * n), 3)
                                          for k, v in sorted(spent.items(), key=lambda kv: -kv[1])}
        out["cpu_ms_split_per_recall"]["rest of recall"] = round(
            (total - sum(spent.values()) * 1000) / (2 * n), 3)
        out["load_after"] = load_avg()
    finally:
        recaller.close()
        store.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--points", type=int, nargs="*", default=[10_000, 30_000])
    ap.add_argument("--build", action="store_true")
    ap.add_argument("--recalls", type=int, default=200)
    ap.add_argument("--out", default=str(RESULTS / "recall_profile.json"))
    args = ap.parse_args()
    result: dict[str, Any] = {"benchmark": "recall-profile", "rows": []}
    for points in args.points:
        tmp = Path(tempfile.mkdtemp(prefix="hivemem-profile-"))
        try:
            row = profile(points, args.build, args.recalls, tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        result["rows"].append(row)
        print(json.dumps(row, indent=1), flush=True)
    result.update({"machine": machine_facts(),
                   "generated_at": datetime.now(UTC).isoformat(timespec="seconds")})
    Path(args.out).write_text(json.dumps(result, indent=2), encoding="utf-8")
    print("saved", args.out)


if __name__ == "__main__":
    main()
