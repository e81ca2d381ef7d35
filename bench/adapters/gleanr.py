#!/usr/bin/env python
"""LoCoMo driver for gleanr 0.5.0, run by bench/locomo.py with /work/venv-gleanr/bin/python.

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
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from locomo_ref import FastEmbedModel, Timer, hivemem_estimate_tokens, load_job, log, write_out

BIG_BUDGET = 1_000_000


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


async def run(job: dict[str, Any]) -> dict[str, Any]:
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


def main() -> None:
    job = load_job(sys.argv[1])
    out = asyncio.run(run(job))
    write_out(sys.argv[2], out)


if __name__ == "__main__":
    main()
