#!/usr/bin/env python
"""The gleanr 0.5.0 adapter: every benchmark task gleanr runs, driven through its public API.

    /work/venv-gleanr/bin/python bench/adapters/gleanr.py locomo JOB.json OUT.json
    /work/venv-gleanr/bin/python bench/adapters/gleanr.py eval   JOB.json OUT.json
    /work/venv-gleanr/bin/python bench/adapters/gleanr.py sizes  JOB.json OUT.json

Runs inside /work/venv-gleanr (gleanr, fastembed, numpy; no hivemem). No LLM: reflection
disabled, otherwise gleanr's defaults, the same embedder as hivemem (all-MiniLM-L6-v2 through
fastembed) and hivemem's token estimate as its token counter.

- locomo (bench/quality.py, LoCoMo evidence recall):
      /work/venv-gleanr/bin/python bench/locomo_gleanr.py JOB.json OUT.json

  Public API only (`from gleanr import ...`):
  - One `Gleanr(session_id, InMemoryBackend(), embedder, token_counter=..., config=...)` per
    conversation; every turn goes in with `await g.ingest(role, content, actor_id=speaker,
    metadata={"dia_id": ...})` in conversation order. Items come back with the turn's metadata,
    which is how they map to dia_ids (with an exact-content fallback).
  - Embedder: `FastEmbedEmbedder` below implements gleanr's `Embedder` protocol (async
    `embed(texts)`, `dimension`) with fastembed and the same model as hivemem
    (sentence-transformers/all-MiniLM-L6-v2).
  - No LLM: no reflector is passed (gleanr then uses its `NullReflector`) and
    `GleanrConfig(reflection=ReflectionConfig(enabled=False))`, so no facts (L2) exist and recall
    falls back to its turn path: current-episode turns, marked turns, then vector search.
  - Token counting: `token_counter=` an object whose `count()` is hivemem's estimate, so budgets
    mean the same number of tokens for every system. Everything else is gleanr's default config
    (episodes of 6 turns / 30 min gap / "thanks|done" patterns, 20% of the budget reserved for the
    current episode, 50 vector results, marker auto-detection).
  - gleanr cannot take a timestamp for a turn (it stamps `datetime.utcnow()`), so the LoCoMo dates
    are not given to it; its recall does not use time anyway.
  - Ranking for recall@k: `recall(query, token_budget=1_000_000)` in the order gleanr returns items
    (current episode first, then marked turns, then vector hits by score), first k_max kept.
    Budgets: `recall(query, token_budget=B)` for each B, natively.
- eval (bench/quality.py, the generated scenarios):
      /work/venv-gleanr/bin/python bench/eval_gleanr.py JOB.json OUT.json

  The job holds the conversations exactly as bench/eval.py generated them with
  `hivemem.evaluation.scenarios` (same seed, same text) and the probe questions; this driver
  only plays them and returns what gleanr recalled, and bench/eval.py judges every system with
  the same function. Set-up as in bench/locomo_gleanr.py (public API only):

  - one `Gleanr(session_id, InMemoryBackend(), embedder, token_counter=..., config=...)` per
    conversation, turns ingested in order with `await g.ingest(role, content)` (gleanr detects
    markers itself; hivemem is given none either);
  - embedder: fastembed with sentence-transformers/all-MiniLM-L6-v2, the model hivemem uses;
  - no LLM: no reflector (gleanr's `NullReflector`) and reflection disabled, so recall is its
    turn path (current episode, marked turns, vector search); everything else is gleanr's
    default configuration;
  - token counting: hivemem's estimate, so a budget means the same number of tokens;
  - probes: `await g.recall(question, token_budget=B)` after the last turn, in the order gleanr
    returns items. Probes are not ingested.
- sizes (bench/probes/report.py): recall latency vs memory size; see adapters/reference.py's
  `Vectors` (the pool's vectors are precomputed, so building 100k memories costs no model time).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
# Run as a script, this folder is sys.path[0], and this file would shadow the gleanr package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

from adapters.reference import (  # noqa: E402
    FastEmbedModel,
    Timer,
    Vectors,
    hivemem_estimate_tokens,
    load_job,
    log,
    stats,
    write_out,
)

BIG_BUDGET = 1_000_000
MODEL = "sentence-transformers/all-MiniLM-L6-v2"


class FastEmbedEmbedder:
    """gleanr `Embedder` protocol backed by fastembed (all-MiniLM-L6-v2, 384 dims)."""

    def __init__(self, model: FastEmbedModel) -> None:
        self._model = model

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return self._model.embed(texts)

    @property
    def dimension(self) -> int:
        return self._model.dim


class HivememTokenCounter:
    """gleanr `TokenCounter` protocol: hivemem's token estimate."""

    def count(self, text: str) -> int:
        return hivemem_estimate_tokens(text)


def _dia_ids(items: list[Any], by_content: dict[str, str]) -> list[str]:
    out: list[str] = []
    for item in items:
        dia = (item.metadata or {}).get("dia_id") or by_content.get(item.content.strip())
        out.append(dia if dia else f"?{item.source}:{item.id}")
    return out


async def run_locomo(job: dict[str, Any]) -> dict[str, Any]:
    import gleanr
    from gleanr import Gleanr, GleanrConfig, InMemoryBackend, ReflectionConfig

    model = FastEmbedModel(job["model"])
    embedder = FastEmbedEmbedder(model)
    k_max = job["k_max"]
    budgets = job["budgets"]
    run_: dict[str, Any] = {
        "system": "gleanr",
        "conversations": {},
        "latency_ms": {"rank": [], "budget": []},
    }
    out: dict[str, Any] = {
        "version": gleanr.__version__,
        "runs": [run_],
        "ingest_s": 0.0,
        "returned_tokens_check": [],
    }
    for conv in job["conversations"]:
        name = conv["name"]
        config = GleanrConfig(reflection=ReflectionConfig(enabled=False))
        g = Gleanr(
            f"locomo-{name}",
            InMemoryBackend(),
            embedder,
            token_counter=HivememTokenCounter(),
            config=config,
        )
        await g.initialize()
        by_content = {t["content"].strip(): t["dia_id"] for t in conv["turns"]}
        t0 = time.perf_counter()
        for t in conv["turns"]:
            await g.ingest(
                t["role"], t["content"], actor_id=t["speaker"], metadata={"dia_id": t["dia_id"]}
            )
        ingest_s = time.perf_counter() - t0
        out["ingest_s"] += ingest_s
        stats = await g.get_session_stats()
        log(
            f"  gleanr {name}: {stats.total_turns} turns, {stats.total_episodes} episodes,"
            f" {stats.total_facts} facts, ingest {ingest_s:.1f} s"
        )
        ranked: dict[str, list[str]] = {}
        packed: dict[str, dict[str, list[str]]] = {str(b): {} for b in budgets}
        for n, q in enumerate(conv["questions"]):
            with Timer() as tm:
                items = await g.recall(q["question"], token_budget=BIG_BUDGET)
            run_["latency_ms"]["rank"].append(tm.ms)
            ranked[q["qid"]] = _dia_ids(items[:k_max], by_content)
            for b in budgets:
                with Timer() as tm:
                    items = await g.recall(q["question"], token_budget=b)
                run_["latency_ms"]["budget"].append(tm.ms)
                packed[str(b)][q["qid"]] = _dia_ids(items, by_content)
                if n < 3:
                    out["returned_tokens_check"].extend(
                        [it.content, it.token_count] for it in items[:5]
                    )
            if (n + 1) % 50 == 0:
                log(f"  gleanr {name}: {n + 1}/{len(conv['questions'])} questions")
        await g.close()
        run_["conversations"][name] = {
            "ranked": ranked,
            "budget": packed,
            "stats": {
                "turns": stats.total_turns,
                "episodes": stats.total_episodes,
                "facts": stats.total_facts,
            },
        }
    out["embedder_calls"] = model.calls
    return out


async def run_eval(job: dict[str, Any]) -> dict[str, Any]:
    import gleanr
    from gleanr import Gleanr, GleanrConfig, InMemoryBackend, ReflectionConfig

    model = FastEmbedModel(job["model"])
    embedder = FastEmbedEmbedder(model)
    budget = job["token_budget"]
    out: dict[str, Any] = {"version": gleanr.__version__, "conversations": {}}
    for n, conv in enumerate(job["conversations"], 1):
        config = GleanrConfig(reflection=ReflectionConfig(enabled=False))
        g = Gleanr(conv["session_id"], InMemoryBackend(), embedder,
                   token_counter=HivememTokenCounter(), config=config)
        await g.initialize()
        ingest_ms: list[float] = []
        for turn in conv["turns"]:
            t0 = time.perf_counter()
            await g.ingest(turn["role"], turn["content"])
            ingest_ms.append((time.perf_counter() - t0) * 1000)
        probes = []
        for probe in conv["probes"]:
            t0 = time.perf_counter()
            items = await g.recall(probe["query"], token_budget=budget)
            recall_ms = (time.perf_counter() - t0) * 1000
            probes.append({
                "texts": [it.content for it in items],
                "token_counts": [it.token_count for it in items],
                "recall_ms": recall_ms,
            })
        stats = await g.get_session_stats()
        await g.close()
        out["conversations"][conv["session_id"]] = {
            "ingest_ms": ingest_ms,
            "probes": probes,
            "stats": {"turns": stats.total_turns, "episodes": stats.total_episodes,
                      "facts": stats.total_facts},
        }
        if n % 10 == 0:
            log(f"  gleanr: {n}/{len(job['conversations'])} conversations")
    return out


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


async def run_sizes(job: dict[str, Any]) -> dict[str, Any]:
    model = FastEmbedModel(MODEL, cache=True)
    vectors = Vectors(job["pool"], job["vectors"], model)
    model.embed_raw(["warm up"])  # queries are embedded at recall time, as in production
    rows = []
    for n in job["sizes"]:
        row = await gleanr_size(n, job, vectors)
        print(json.dumps(row), file=sys.stderr, flush=True)
        rows.append(row)
    return {"system": "gleanr", "version": version("gleanr"), "rows": rows}


TASKS = {"locomo": run_locomo, "eval": run_eval, "sizes": run_sizes}


def main() -> None:
    if len(sys.argv) != 4 or sys.argv[1] not in TASKS:
        sys.exit(f"usage: gleanr.py {{{'|'.join(TASKS)}}} JOB.json OUT.json")
    task, job_path, out_path = sys.argv[1:]
    write_out(out_path, asyncio.run(TASKS[task](load_job(job_path))))


if __name__ == "__main__":
    main()
