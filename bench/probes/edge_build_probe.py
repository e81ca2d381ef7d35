#!/usr/bin/env python
"""How long the embedded engine's HNSW build takes, and what it costs, per index setting.

    python bench/probes/edge_build_probe.py --points 100000 --variants default no-payload-hnsw

Fills an `EdgeVectorStore` (the product's payloads, payload indexes and BM25 vectors) with
prebuilt synthetic vectors, closes it, then runs the product's build child
(`python -m hivemem.store.vectors.edge_build`) on a copy per variant: wall time, the
child's peak RSS, indexed vectors, and the bare filtered dense search before and after.
Prints and saves bench/results/edge_build_probe.json.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: harness, suites

from harness import RESULTS, machine_facts, summarize
from scale_fill import DIM, bulk_fill, load_avg, summarize_versus, versus_exact

VARIANTS: dict[str, dict[str, Any]] = {
    # the store before this probe: every keyword field's index in the graph build
    # (enable_hnsw on), float32, the build's threads one per core
    "before": {"legacy_payload_hnsw": True, "quantization": "none", "index_build_threads": 0},
    "fp32": {"quantization": "none"},
    "fp32-threads0": {"quantization": "none", "index_build_threads": 0},
    "fp32-m0-tenant-only": {"quantization": "none", "hnsw_m": 0},
    "fp32-ef64-m12": {"quantization": "none", "hnsw_ef_construct": 64, "hnsw_m": 12},
    "int8": {"quantization": "int8"},
    "int8-ef64-m12": {"quantization": "int8", "hnsw_ef_construct": 64, "hnsw_m": 12},
}


def run_child(folder: Path) -> dict[str, Any]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "hivemem.store.vectors.edge_build", "--nice", "0", str(folder)],
        capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    out: dict[str, Any] = {"wall_s": round(wall, 1), "code": proc.returncode,
                           "cpu_s": round(after.ru_utime + after.ru_stime
                                          - before.ru_utime - before.ru_stime, 1)}
    if proc.returncode == 0:
        out.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    else:
        out["error"] = proc.stderr[-800:]
    # ru_maxrss of RUSAGE_CHILDREN is the largest child so far: run variants in order of
    # expected size or read it as an upper bound (noted in the JSON).
    out["children_peak_rss_mb"] = round(after.ru_maxrss / 1024, 1)
    return out


def bare(path: Path, settings: Any, qvecs: np.ndarray, session: str,
         sweep: tuple[int, ...] = ()) -> dict[str, Any]:
    from hivemem.store.vectors.edge import EdgeVectorStore

    store = EdgeVectorStore(path, DIM, settings)
    try:
        info = store.index_info("turns")
        for v in qvecs[:10]:  # the first queries after opening read the files in
            store.search_turns(session, v, 30)
        ms = []
        overlap = []
        for v in qvecs:
            t0 = time.perf_counter()
            hits = store.search_turns(session, v, 30)
            ms.append((time.perf_counter() - t0) * 1000)
            overlap.append(versus_exact(hits, exact_hits(store, session, v, 30)))
        out: dict[str, Any] = {"bare_search_ms": summarize(ms), "segments": info["segments"],
                               "indexed_vectors": info["indexed_vectors"],
                               "vs_exact": summarize_versus(overlap, 30)}
        if sweep:
            out["hnsw_ef_sweep"] = {}
            for ef in sweep:
                store.index = settings.model_copy(update={"hnsw_ef": ef})
                ms, overlap = [], []
                for v in qvecs:
                    t0 = time.perf_counter()
                    hits = store.search_turns(session, v, 30)
                    ms.append((time.perf_counter() - t0) * 1000)
                    overlap.append(versus_exact(hits, exact_hits(store, session, v, 30)))
                out["hnsw_ef_sweep"][str(ef)] = {"bare_search_ms": summarize(ms),
                                                 "vs_exact": summarize_versus(overlap, 30)}
        return out
    finally:
        store.close()


def exact_hits(store: Any, session: str, vector: np.ndarray,
               limit: int) -> list[tuple[str, float]]:
    """The true top `limit` of the session (exact scan): (turn id, score), best first."""
    import qdrant_edge as qe

    request = qe.QueryRequest(
        limit=limit, query=qe.Query.Nearest(vector.tolist(), using="dense"),
        filter=store._filter({"session_id": session}), with_payload=True,
        with_vector=False, params=qe.SearchParams(exact=True))
    return [(str(p.payload["turn_id"]), float(p.score))
            for p in store._shards["turns"].query(request)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--points", type=int, default=100_000)
    ap.add_argument("--sessions", type=int, default=1)
    ap.add_argument("--variants", nargs="*", default=["fp32", "int8"], choices=list(VARIANTS))
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--ef", type=int, nargs="*", default=[64, 128, 256],
                    help="hnsw_ef values to sweep after each build")
    ap.add_argument("--out", default=str(RESULTS / "edge_build_probe.json"))
    args = ap.parse_args()
    from hivemem.config import VectorIndexSettings

    rng = np.random.default_rng(7)
    tmp = Path(tempfile.mkdtemp(prefix="hivemem-probe-"))
    result: dict[str, Any] = {"benchmark": "edge-build-probe", "points": args.points,
                              "sessions": args.sessions, "variants": {},
                              "load_before": load_avg()}
    try:
        bases: dict[bool, Path] = {}
        vectors: np.ndarray | None = None
        sessions: list[str] = []
        for legacy in sorted({bool(VARIANTS[v].get("legacy_payload_hnsw"))
                              for v in args.variants}):
            base = tmp / f"base-{'legacy' if legacy else 'new'}"
            base.mkdir()
            t0 = time.perf_counter()
            # The legacy shard is built as it was filled: fill it with its variant's
            # settings (the others are opened with theirs before their build).
            # The new base is filled without quantization: the engine keeps a shard's
            # quantization when it is opened with none ("not specified"), so an int8 base
            # would make every variant int8; int8 variants switch it on when opened.
            fill_settings = VectorIndexSettings(index_after_points=0, **(
                {k: v for k, v in VARIANTS[next(v for v in args.variants if bool(
                    VARIANTS[v].get("legacy_payload_hnsw")))].items()
                 if k != "legacy_payload_hnsw"} if legacy else {"quantization": "none"}))
            vectors, sessions, _texts = bulk_fill(
                base, args.points, args.sessions, np.random.default_rng(7),
                fill_settings, legacy_indexes=legacy)
            result[f"fill_s{'_legacy' if legacy else ''}"] = round(time.perf_counter() - t0, 1)
            print(f"filled {args.points} in {time.perf_counter() - t0:.1f} s", flush=True)
            bases[legacy] = base
        assert vectors is not None
        picks = rng.choice(len(vectors), size=args.queries)
        qvecs = vectors[picks] + 0.3 * rng.standard_normal((args.queries, DIM)).astype(
            np.float32)
        qvecs /= np.linalg.norm(qvecs, axis=1, keepdims=True)
        for name in args.variants:
            legacy = bool(VARIANTS[name].get("legacy_payload_hnsw"))
            settings = VectorIndexSettings(index_after_points=0, **{
                k: v for k, v in VARIANTS[name].items() if k != "legacy_payload_hnsw"})
            work = tmp / name
            shutil.copytree(bases[legacy], work)
            if legacy:
                # Opening with the store would remake the indexes: the legacy base is
                # built by the child as it is.
                row: dict[str, Any] = {"settings": VARIANTS[name], "load": load_avg()}
                row["build"] = run_child(work / "turns")
            else:
                # Opening once with the variant's settings persists them in the shard
                # before the child builds.
                row = {"settings": VARIANTS[name], "load": load_avg()}
                row["before_build"] = bare(work, settings, qvecs, sessions[0])
                row["build"] = run_child(work / "turns")
                row["after_build"] = bare(work, settings, qvecs, sessions[0], tuple(args.ef))
            row["load_after"] = load_avg()
            result["variants"][name] = row
            print(name, json.dumps(row["build"]), flush=True)
            for k in ("before_build", "after_build"):
                if k in row:
                    print("   ", k, row[k]["indexed_vectors"], "indexed; bare p50/p95",
                          row[k]["bare_search_ms"]["p50"], row[k]["bare_search_ms"]["p95"],
                          row[k]["vs_exact"], flush=True)
            shutil.rmtree(work, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result.update({"machine": machine_facts(),
                   "generated_at": datetime.now(UTC).isoformat(timespec="seconds")})
    Path(args.out).write_text(json.dumps(result, indent=2), encoding="utf-8")
    print("saved", args.out)


if __name__ == "__main__":
    main()
