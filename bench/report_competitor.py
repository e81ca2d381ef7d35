#!/usr/bin/env python
"""Recall latency of gleanr 0.5.0 or mneno 0.4.0 vs memory size, for bench/report.py.

    /work/venv-gleanr/bin/python bench/report_competitor.py gleanr JOB.json OUT.json
    /work/venv-mneno/bin/python  bench/report_competitor.py mneno  JOB.json OUT.json

JOB: {"sizes": [...], "pool": [texts], "vectors": [[...]], "queries": [...], "budget": int,
"time_budget_s": float}. Memory i is pool[i % len(pool)] + " (note i)"; its vector is the pool
text's (precomputed by report.py with the same model), so building 100k memories costs no model
time. Queries are embedded by the real model (all-MiniLM-L6-v2 through fastembed), as at recall
time in production. Each system is used through its public API with its defaults (see
locomo_gleanr.py / locomo_mneno.py); a size whose ingest would pass `time_budget_s` is
reported as not reached.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from locomo_ref import FastEmbedModel

MODEL = "sentence-transformers/all-MiniLM-L6-v2"


class Vectors:
    def __init__(self, pool: list[str], vectors: list[list[float]], model: FastEmbedModel):
        self.by_text = dict(zip(pool, vectors, strict=True))
        self.model = model

    def embed(self, texts: list[str]) -> list[list[float]]:
        out: list[list[float] | None] = []
        missing: list[int] = []
        for i, text in enumerate(texts):
            base = text.rsplit(" (note ", 1)[0]
            vec = self.by_text.get(base)
            out.append(vec)
            if vec is None:
                missing.append(i)
        if missing:
            fresh = self.model.embed_raw([texts[i] for i in missing])
            for i, vec in zip(missing, fresh, strict=True):
                out[i] = vec
                self.by_text[texts[i]] = vec
        return [v for v in out if v is not None]


def pct(values: list[float], p: float) -> float:
    v = sorted(values)
    k = (len(v) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def stats(ms: list[float]) -> dict[str, float]:
    return {"n": len(ms), "p50": round(pct(ms, 50), 3), "p95": round(pct(ms, 95), 3),
            "p99": round(pct(ms, 99), 3)}


async def gleanr_size(n: int, job: dict[str, Any], vectors: Vectors) -> dict[str, Any]:
    from gleanr import Gleanr, GleanrConfig, InMemoryBackend, ReflectionConfig

    class Emb:
        async def embed(self, texts: list[str]) -> list[list[float]]:
            return vectors.embed(texts)

        @property
        def dimension(self) -> int:
            return vectors.model.dim

    g = Gleanr("bench", InMemoryBackend(), Emb(),
               config=GleanrConfig(reflection=ReflectionConfig(enabled=False)))
    await g.initialize()
    pool = job["pool"]
    started = time.perf_counter()
    for i in range(n):
        await g.ingest("user" if i % 2 else "assistant", f"{pool[i % len(pool)]} (note {i})")
        if time.perf_counter() - started > job["time_budget_s"]:
            await g.close()
            return {"size": n, "reached": i + 1, "ingest_s": round(time.perf_counter() - started, 1)}
    ingest_s = time.perf_counter() - started
    lat = []
    for q in job["queries"]:
        t0 = time.perf_counter()
        await g.recall(q, token_budget=job["budget"])
        lat.append((time.perf_counter() - t0) * 1000)
        if time.perf_counter() - started > 3 * job["time_budget_s"]:
            break
    await g.close()
    return {"size": n, "ingest_s": round(ingest_s, 1), "recall_ms": stats(lat)}


def mneno_size(n: int, job: dict[str, Any], vectors: Vectors) -> dict[str, Any]:
    from mneno import MemoryClient

    class Provider:
        name = "fastembed-cached"

        def embed(self, texts: list[str]) -> list[list[float]]:
            return vectors.embed(texts)

    client = MemoryClient(embedding_provider=Provider())
    pool = job["pool"]
    started = time.perf_counter()
    for i in range(n):
        client.add(f"{pool[i % len(pool)]} (note {i})")
        if time.perf_counter() - started > job["time_budget_s"]:
            return {"size": n, "reached": i + 1, "ingest_s": round(time.perf_counter() - started, 1)}
    ingest_s = time.perf_counter() - started
    lat = []
    for q in job["queries"]:
        t0 = time.perf_counter()
        client.build_context(q, budget=job["budget"])
        lat.append((time.perf_counter() - t0) * 1000)
        if time.perf_counter() - started > 3 * job["time_budget_s"]:
            break
    return {"size": n, "ingest_s": round(ingest_s, 1), "recall_ms": stats(lat)}


def main() -> None:
    system, job_path, out_path = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    job = json.loads(job_path.read_text())
    model = FastEmbedModel(MODEL, cache=True)
    vectors = Vectors(job["pool"], job["vectors"], model)
    model.embed_raw(["warm up"])  # queries are embedded at recall time, as in production
    from importlib.metadata import version

    rows = []
    for n in job["sizes"]:
        row = asyncio.run(gleanr_size(n, job, vectors)) if system == "gleanr" \
            else mneno_size(n, job, vectors)
        print(json.dumps(row), file=sys.stderr, flush=True)
        rows.append(row)
    out_path.write_text(json.dumps({"system": system, "version": version(system),
                                    "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
