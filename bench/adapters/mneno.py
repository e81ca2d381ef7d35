#!/usr/bin/env python
"""The mneno 0.4.0 adapter: every benchmark task mneno runs, driven through its public API.

    /work/venv-mneno/bin/python bench/adapters/mneno.py locomo JOB.json OUT.json
    /work/venv-mneno/bin/python bench/adapters/mneno.py sizes  JOB.json OUT.json

Runs inside /work/venv-mneno (mneno, fastembed, numpy; no hivemem).

- locomo (bench/quality.py, LoCoMo evidence recall):
      /work/venv-mneno/bin/python bench/locomo_mneno.py JOB.json OUT.json

  Public API only (`from mneno import MemoryClient`):
  - One `MemoryClient(embedding_provider=...)` per conversation, everything else default (in-memory
    store, conflict detection on, default scoring policy). Every turn goes in with
    `client.add(content, metadata={"dia_id": ..., "speaker": ...})` (default memory type), in
    conversation order; results map back to dia_ids through that metadata (`client.get(id)`).
  - Embedding provider: `FastEmbedProvider` below implements mneno's `EmbeddingProvider` protocol
    (`name`, `embed(texts)`) with fastembed and the same model as hivemem. mneno re-embeds the query
    and every memory at every query (`embed([query, memory.content])` once per memory), so the
    provider memoises vectors by text and is warmed with all turns in one batched call after
    ingest. Without the cache one query over ~600 turns costs ~600 model calls (seconds).
  - No LLM (`llm_provider` unset), no reranker. mneno cannot take a timestamp for a memory
    (`created_at` is now), so the LoCoMo dates are not given to it.
  - One call per question, `client.build_context(query, budget=max(budgets))`: mneno's budgeted
    context (the counterpart of hivemem's `recall`), its items in mneno's order (score, highest
    first). Its first k_max items give recall@k (`search()` ranks the same way: same scorer, same
    sort key but for ties; build_context also drops exact duplicates and scores under 0.05).
  - Budgets: mneno counts tokens by whitespace words (`mneno.context.budget.estimate_tokens`),
    about 25% fewer than hivemem's estimate, and offers no way to plug in another counter. So
    bench/locomo.py packs the returned order greedily (mneno's own packing rule: skip what does not
    fit, keep going) into each budget with hivemem's estimate; 2000 words hold more than 2000 of
    hivemem's tokens, so every budget is covered.
  - mneno's defaults include recording an access on every memory it returns, and its score has a
    `frequency` component (min(access_count / 10, 1), weight 0.10 of 1.0), so each question sees
    the accesses of the questions before it: memories returned often float up for every later
    query. Two passes are reported: "mneno" (all defaults) and "mneno-nofreq", a second
    `MemoryClient(storage=<the same store>, policy=MemoryPolicy(access_weight=0.0))` run after the
    first over the same memories (no re-ingest), which leaves that component out.
- sizes (bench/probes/report.py): recall latency vs memory size (adapters/reference.py's
  `Vectors`: the pool's vectors are precomputed).
"""

from __future__ import annotations

import json
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
# Run as a script, this folder is sys.path[0], and this file would shadow the mneno package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

from adapters.reference import (  # noqa: E402
    FastEmbedModel,
    Timer,
    Vectors,
    load_job,
    log,
    stats,
    write_out,
)

MODEL = "sentence-transformers/all-MiniLM-L6-v2"


class FastEmbedProvider:
    """mneno `EmbeddingProvider` protocol backed by fastembed (memoised by text)."""

    name = "fastembed-all-MiniLM-L6-v2"

    def __init__(self, model: FastEmbedModel) -> None:
        self._model = model

    def embed(self, texts: list[str]) -> list[list[float]]:
        return self._model.embed(texts)


def run_locomo(job: dict[str, Any]) -> dict[str, Any]:
    from importlib.metadata import version

    from mneno import MemoryClient, MemoryPolicy

    model = FastEmbedModel(job["model"], cache=True)
    provider = FastEmbedProvider(model)
    k_max = job["k_max"]
    context_budget = max(job["budgets"])
    runs: dict[str, dict[str, Any]] = {
        system: {"system": system, "conversations": {}, "latency_ms": {"rank": []}}
        for system in ("mneno", "mneno-nofreq")
    }
    out: dict[str, Any] = {
        "version": version("mneno"),
        "runs": list(runs.values()),
        "ingest_s": 0.0,
        "warm_s": 0.0,
    }
    for conv in job["conversations"]:
        name = conv["name"]
        client = MemoryClient(embedding_provider=provider)
        t0 = time.perf_counter()
        for t in conv["turns"]:
            client.add(t["content"], metadata={"dia_id": t["dia_id"], "speaker": t["speaker"]})
        ingest_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        provider.embed([t["content"] for t in conv["turns"]])
        warm_s = time.perf_counter() - t0
        out["ingest_s"] += ingest_s
        out["warm_s"] += warm_s
        memories = client.list()
        statuses: dict[str, int] = {}
        for m in memories:
            statuses[m.status.value] = statuses.get(m.status.value, 0) + 1
        log(
            f"  mneno {name}: {len(memories)} memories {statuses}, ingest {ingest_s:.1f} s,"
            f" embed {warm_s:.1f} s"
        )
        # Second pass, same store, no re-ingest: a client whose policy ignores access counts.
        # It runs after the default pass, so the accesses it records cannot reach that pass.
        clients = {
            "mneno": client,
            "mneno-nofreq": MemoryClient(
                storage=client.store,
                embedding_provider=provider,
                policy=MemoryPolicy(access_weight=0.0),
            ),
        }
        for system, cl in clients.items():

            def dia(memory_id: str, cl: Any = cl) -> str:
                m = cl.get(memory_id)
                return str(m.metadata.get("dia_id")) if m is not None else f"?{memory_id}"

            ranked: dict[str, list[str]] = {}
            context: dict[str, list[list[Any]]] = {}
            for n, q in enumerate(conv["questions"]):
                with Timer() as tm:
                    package = cl.build_context(q["question"], budget=context_budget)
                runs[system]["latency_ms"]["rank"].append(tm.ms)
                order = [[dia(it.memory_id), it.estimated_tokens] for it in package.included]
                context[q["qid"]] = order
                ranked[q["qid"]] = [d for d, _words in order[:k_max]]
                if (n + 1) % 50 == 0:
                    log(f"  {system} {name}: {n + 1}/{len(conv['questions'])} questions")
            runs[system]["conversations"][name] = {
                "ranked": ranked,
                "context_order": context,
                "stats": {"memories": len(memories), "statuses": statuses},
            }
    out["embedder_calls"] = model.calls
    return out


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


def run_sizes(job: dict[str, Any]) -> dict[str, Any]:
    model = FastEmbedModel(MODEL, cache=True)
    vectors = Vectors(job["pool"], job["vectors"], model)
    model.embed_raw(["warm up"])  # queries are embedded at recall time, as in production
    rows = []
    for n in job["sizes"]:
        row = mneno_size(n, job, vectors)
        print(json.dumps(row), file=sys.stderr, flush=True)
        rows.append(row)
    return {"system": "mneno", "version": version("mneno"), "rows": rows}


TASKS = {"locomo": run_locomo, "sizes": run_sizes}


def main() -> None:
    if len(sys.argv) != 4 or sys.argv[1] not in TASKS:
        sys.exit(f"usage: mneno.py {{{'|'.join(TASKS)}}} JOB.json OUT.json")
    task, job_path, out_path = sys.argv[1:]
    write_out(out_path, TASKS[task](load_job(job_path)))


if __name__ == "__main__":
    main()
