#!/usr/bin/env python
"""`hivemem eval` scenarios through gleanr 0.5.0, run by bench/eval.py with /work/venv-gleanr.

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
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from locomo_ref import FastEmbedModel, hivemem_estimate_tokens, load_job, log, write_out


class FastEmbedEmbedder:
    """gleanr `Embedder` protocol backed by fastembed."""

    def __init__(self, model: FastEmbedModel) -> None:
        self._model = model

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return self._model.embed(texts)

    @property
    def dimension(self) -> int:
        return self._model.dim


class HivememTokenCounter:
    def count(self, text: str) -> int:
        return hivemem_estimate_tokens(text)


async def run(job: dict[str, Any]) -> dict[str, Any]:
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


def main() -> None:
    job = load_job(sys.argv[1])
    write_out(sys.argv[2], asyncio.run(run(job)))


if __name__ == "__main__":
    main()
