#!/usr/bin/env python
"""The change suite through mneno 0.4.0, run by bench/change.py with /work/venv-mneno.

    /work/venv-mneno/bin/python bench/change_mneno.py JOB.json OUT.json

Public API only (`from mneno import MemoryClient`), set up as in bench/locomo_mneno.py:

- one `MemoryClient(embedding_provider=...)` per conversation, everything else default
  (in-memory store, conflict detection on, default scoring policy and preset); every turn
  goes in with `client.add(content, metadata={"role": ..., "speaker": ...})` in order;
- embedding provider: fastembed with the same model as hivemem, memoised by text (mneno
  re-embeds every memory at every query) and warmed with all turns in one batched call;
- no LLM (`llm_provider` unset), no reranker;
- probes: `client.build_context(question, budget=...)` right after the probe's `after_turn`
  (default: the last turn; the turns so far warmed in one call first), mneno's own budgeted
  context, in mneno's order; probes answered in the job's order. mneno has no pipeline to
  wait for, so live and reflected mode differ only by which probes the job holds. mneno counts tokens by whitespace words (about 25% fewer than hivemem's
  estimate) and cannot take another counter, so it is asked for a budget in words that
  certainly covers B tokens and its order is packed greedily into B with hivemem's estimate
  (mneno's own packing rule: skip what does not fit, keep going). Everything mneno would have
  put in B of its words that fits B of hivemem's tokens is kept, in mneno's order.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from locomo_mneno import FastEmbedProvider
from locomo_ref import FastEmbedModel, hivemem_estimate_tokens, load_job, log, write_out

WORDS_PER_TOKEN_BUDGET = 2  # ask mneno for 2 B words: more than B of hivemem's tokens hold


def due(conv: dict[str, Any], said: int) -> list[int]:
    """Indexes of the probes asked once `said` turns were said (as bench/change_gleanr.py)."""
    last = len(conv["turns"])
    return [i for i, p in enumerate(conv["probes"]) if (p.get("after_turn") or last) == said]


def pack(texts: list[str], budget: int) -> tuple[list[str], list[int]]:
    kept: list[str] = []
    counts: list[int] = []
    used = 0
    for text in texts:
        cost = hivemem_estimate_tokens(text)
        if used + cost <= budget:
            kept.append(text)
            counts.append(cost)
            used += cost
    return kept, counts


def run(job: dict[str, Any]) -> dict[str, Any]:
    from importlib.metadata import version

    from mneno import MemoryClient

    provider = FastEmbedProvider(FastEmbedModel(job["model"], cache=True))
    budget = job["token_budget"]
    out: dict[str, Any] = {"version": version("mneno"), "conversations": {}}
    total = len(job["conversations"])
    for n, conv in enumerate(job["conversations"], 1):
        client = MemoryClient(embedding_provider=provider)
        probes: list[dict[str, Any]] = [{} for _ in conv["probes"]]
        for said, turn in enumerate(conv["turns"], 1):
            client.add(turn["content"], metadata={"role": turn["role"],
                                                  "speaker": turn.get("agent") or turn["role"]})
            asked = due(conv, said)
            if asked:
                provider.embed([t["content"] for t in conv["turns"][:said]])
            for index in asked:
                t0 = time.perf_counter()
                package = client.build_context(conv["probes"][index]["query"],
                                               budget=budget * WORDS_PER_TOKEN_BUDGET)
                recall_ms = (time.perf_counter() - t0) * 1000
                texts, counts = pack([it.content for it in package.included], budget)
                probes[index] = {"texts": texts, "token_counts": counts,
                                 "recall_ms": recall_ms, "unpacked": len(package.included)}
        statuses: dict[str, int] = {}
        for m in client.list():
            statuses[m.status.value] = statuses.get(m.status.value, 0) + 1
        out["conversations"][conv["session_id"]] = {
            "probes": probes, "stats": {"episodes": None, "facts": None, "statuses": statuses},
        }
        if n % 10 == 0 or n == total:
            log(f"  mneno: {n}/{total} conversations")
    return out


def main() -> None:
    job = load_job(sys.argv[1])
    write_out(sys.argv[2], run(job))


if __name__ == "__main__":
    main()
