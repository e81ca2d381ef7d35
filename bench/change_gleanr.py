#!/usr/bin/env python
"""The change suite through gleanr 0.5.0, run by bench/change.py with /work/venv-gleanr.

    /work/venv-gleanr/bin/python bench/change_gleanr.py JOB.json OUT.json

The job holds the change suite's conversations exactly as hivemem plays them (text, role,
speaker) and the probe questions with the point each is asked at (`after_turn`: after that
many turns); this driver only plays them and returns what gleanr recalled, probes in the job's
order: bench/change.py judges every system with the same function.
Set-up as in bench/eval_gleanr.py (public API only):

- one `Gleanr(session_id, InMemoryBackend(), embedder, token_counter=..., config=...)` per
  conversation, turns ingested in order with `await g.ingest(role, content, actor_id=speaker)`
  (gleanr detects markers itself; hivemem is given none either);
- embedder: fastembed with sentence-transformers/all-MiniLM-L6-v2, the model hivemem uses;
- no LLM: no reflector (gleanr's `NullReflector`) and reflection disabled, so recall is its
  turn path (current episode, marked turns, vector search); everything else is gleanr's
  default configuration;
- token counting: hivemem's estimate, so the budget means the same number of tokens;
- probes: `await g.recall(question, token_budget=B)` right after the probe's `after_turn`
  (default: the last turn), items in the order gleanr returns them. gleanr has no pipeline to
  wait for, so live and reflected mode differ only by which probes the job holds. Probes are
  not ingested.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from eval_gleanr import FastEmbedEmbedder, HivememTokenCounter
from locomo_ref import FastEmbedModel, load_job, log, write_out


def due(conv: dict[str, Any], said: int) -> list[int]:
    """Indexes of the probes asked once `said` turns were said (in the job's order)."""
    last = len(conv["turns"])
    return [i for i, p in enumerate(conv["probes"]) if (p.get("after_turn") or last) == said]


async def run(job: dict[str, Any]) -> dict[str, Any]:
    import gleanr
    from gleanr import Gleanr, GleanrConfig, InMemoryBackend, ReflectionConfig

    embedder = FastEmbedEmbedder(FastEmbedModel(job["model"]))
    budget = job["token_budget"]
    out: dict[str, Any] = {"version": gleanr.__version__, "conversations": {}}
    total = len(job["conversations"])
    for n, conv in enumerate(job["conversations"], 1):
        config = GleanrConfig(reflection=ReflectionConfig(enabled=False))
        g = Gleanr(conv["session_id"], InMemoryBackend(), embedder,
                   token_counter=HivememTokenCounter(), config=config)
        await g.initialize()
        probes: list[dict[str, Any]] = [{} for _ in conv["probes"]]
        for said, turn in enumerate(conv["turns"], 1):
            await g.ingest(turn["role"], turn["content"], actor_id=turn.get("agent"))
            for index in due(conv, said):
                t0 = time.perf_counter()
                items = await g.recall(conv["probes"][index]["query"], token_budget=budget)
                probes[index] = {
                    "texts": [it.content for it in items],
                    "token_counts": [it.token_count for it in items],
                    "recall_ms": (time.perf_counter() - t0) * 1000,
                }
        stats = await g.get_session_stats()
        await g.close()
        out["conversations"][conv["session_id"]] = {
            "probes": probes,
            "stats": {"episodes": stats.total_episodes, "facts": stats.total_facts},
        }
        if n % 10 == 0 or n == total:
            log(f"  gleanr: {n}/{total} conversations")
    return out


def main() -> None:
    job = load_job(sys.argv[1])
    write_out(sys.argv[2], asyncio.run(run(job)))


if __name__ == "__main__":
    main()
