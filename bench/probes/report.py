#!/usr/bin/env python
"""The performance report: bench/results/REPORT.md with tables and PNG plots, every figure next
to its baseline from the same run.

    /work/venv/bin/python bench/probes/report.py [--pipeline bench/results/pipeline.json]
                                          [--sizes 1000,10000,100000] [--no-competitors]

Sections:
1. ingest latency and throughput, next to bare XADD/PING on the same server;
2. end-to-end freshness under load (ingest -> recallable), next to the ingest call itself;
3. embedding throughput of the pipeline, next to raw fastembed on the same texts;
   (1-3 come from the bench/probes/pipeline_stages.py run named by --pipeline, which measured them and
   their baselines together; run `bench/probes/pipeline_stages.py` first for a fresh one)
4. scaling from 1 to 2 embed workers (measured here), next to raw fastembed on one thread;
5. recall p50/p95/p99 vs memory size (1k, 10k, 100k turns in one session) on the embedded
   Qdrant engine and on qdrant-client `:memory:`, next to the bare vector search inside it;
6. gleanr 0.5.0 and mneno 0.4.0 recall latency at the same sizes (their venvs, driven by
   bench/adapters/<system>.py sizes), next to hivemem's from this run;
7. robustness: the fault suite's outcomes and the fuzz counts (bench/results/fuzz.json).

Memories for 5-6 are LoCoMo turns (a pool of 2000, embedded once with the real model), cycled
with a per-memory suffix; their vectors are the pool's, so 100k memories take no model time.
Queries are LoCoMo questions, embedded at recall time by the real model. Other processes'
CPU use is recorded per section (this machine is shared).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: harness, suites

from harness import (
    RESULTS,
    CpuMonitor,
    locomo_conversations,
    locomo_questions,
    locomo_turns,
    machine_facts,
    offline_model_env,
    summarize,
)

REPO = Path(__file__).resolve().parents[2]
MODEL = "sentence-transformers/all-MiniLM-L6-v2"
VENVS = {"gleanr": Path("/work/venv-gleanr/bin/python"),
         "mneno": Path("/work/venv-mneno/bin/python")}


def log(msg: str) -> None:
    print(f"[{datetime.now(UTC):%H:%M:%S}] {msg}", flush=True)


# -- data -----------------------------------------------------------------------------------


def corpus(pool_size: int = 2000) -> tuple[list[str], list[str]]:
    convs = locomo_conversations()
    texts: list[str] = []
    questions: list[str] = []
    for conv in convs:
        texts.extend(locomo_turns(conv))
        questions.extend(locomo_questions(conv))
    return list(dict.fromkeys(texts))[:pool_size], questions


def embedder(threads: int | None = 1, batch: int = 16) -> Any:
    from hivemem.config import EmbeddingSettings
    from hivemem.providers.embedders import FastEmbedEmbedder

    return FastEmbedEmbedder(EmbeddingSettings(model=MODEL, threads=threads, batch_size=batch))


# -- 4. scaling -----------------------------------------------------------------------------


def bench_scaling(server: Any, texts: list[str], tmp: Path) -> dict[str, Any]:
    """k embed workers (threads, one ONNX thread each, as the deployment runs them) on the
    same turns; baseline: raw fastembed on one thread over the same texts."""
    from hivemem import MemoryClient
    from hivemem.config import Settings
    from hivemem.pipeline.topology import Keys
    from hivemem.store.redis import connect
    from hivemem.store.state import TurnLog
    from hivemem.store.streams import StreamStore
    from hivemem.store.vectors.edge import EdgeVectorStore
    from hivemem.workers.embed import EmbedHandler, embed_kind
    from hivemem.workers.stream import StreamWorker

    out: dict[str, Any] = {"turns": len(texts)}
    raw = embedder()
    raw.embed_documents(texts[:32])
    with CpuMonitor() as mon:
        t0 = time.perf_counter()
        raw.embed_documents(texts)
        raw_s = time.perf_counter() - t0
    out["raw_fastembed_1_thread"] = {"turns_per_s": round(len(texts) / raw_s, 1),
                                     "machine": mon.result}
    log(f"  raw fastembed, 1 thread: {len(texts) / raw_s:.1f} turns/s")
    for k in (1, 2):
        prefix = f"sc{k}"
        settings = Settings.model_validate({
            "redis": {"url": server.url, "key_prefix": prefix},
            "worker": {"batch_size": 256, "block_ms": 50}, "log_level": "warning"})
        keys = Keys(prefix)
        with MemoryClient(settings) as client:
            for start in range(0, len(texts), 500):
                client.ingest_many([{"session_id": f"s{i % 10}", "role": "user", "content": t}
                                    for i, t in enumerate(texts[start:start + 500], start)])
        store = EdgeVectorStore(tmp / f"scale-{k}", 384)
        conns = [connect(settings.redis) for _ in range(k)]
        embedders = [embedder() for _ in range(k)]
        for e in embedders:
            e.embed_documents(["warm up"])
        workers = [
            StreamWorker(embed_kind(EmbedHandler(
                embedders[i], store, TurnLog(conns[i], keys, 50),
                StreamStore(conns[i], keys), keys)), StreamStore(conns[i], keys),
                settings.worker, consumer=f"w{i}")
            for i in range(k)
        ]
        gc.collect()
        with CpuMonitor([server.process.pid] if server.process else []) as mon:
            t0 = time.perf_counter()
            threads = [threading.Thread(target=w.run, kwargs={"burst": True}) for w in workers]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wall = time.perf_counter() - t0
        assert store.count_turns() == len(texts)
        store.close()
        for c in conns:
            c.close()
        out[f"workers_{k}"] = {"turns_per_s": round(len(texts) / wall, 1), "machine": mon.result}
        log(f"  {k} embed worker(s): {len(texts) / wall:.1f} turns/s"
            f" (other procs {mon.result.get('foreign_cores', '?')} cores)")
    out["speedup_2_over_1"] = round(out["workers_2"]["turns_per_s"]
                                    / out["workers_1"]["turns_per_s"], 2)
    return out


# -- 5. recall vs size ----------------------------------------------------------------------


def build_memory(
    server: Any, backend: str, n: int, pool: list[str], vectors: Any, tmp: Path
) -> tuple[Any, Any]:
    """A session of `n` turns: in Redis (ingest) and in Qdrant (upserted with the pool's
    vectors and BM25 weights), marked processed, as the embed worker would leave them."""
    import numpy as np

    from hivemem import MemoryClient
    from hivemem.config import Settings
    from hivemem.providers.lexical import LexicalEncoder
    from hivemem.store.redis import connect
    from hivemem.store.state import TurnLog

    prefix = f"r{backend[:3]}{n}"
    settings = Settings.model_validate({
        "redis": {"url": server.url, "key_prefix": prefix}, "log_level": "warning",
        "embedding": {"model": MODEL}})
    if backend == "edge":
        from hivemem.store.vectors.edge import EdgeVectorStore

        store: Any = EdgeVectorStore(tmp / f"recall-{n}", 384)
    else:
        from hivemem.store.vectors.server import ServerVectorStore

        store = ServerVectorStore(settings.qdrant, 384, location=":memory:")
    conn = connect(settings.redis)
    client = MemoryClient(settings, redis_client=conn, vector_store=store,
                          embedder=embedder())
    state = TurnLog(conn, client.keys, settings.ingest.recent_window)
    lexical = LexicalEncoder()
    for start in range(0, n, 1000):
        rows = [{"session_id": "big", "role": "user" if i % 2 else "assistant",
                 "content": f"{pool[i % len(pool)]} (note {i})"}
                for i in range(start, min(n, start + 1000))]
        turns = client.ingest_many(rows)
        matrix = np.stack([vectors[i % len(pool)] for i in range(start, start + len(turns))])
        store.upsert_turns(turns, matrix, lexical.documents([t.content for t in turns]))
        state.mark_processed(turns)
    return client, store


def bench_recall_sizes(
    server: Any, pool: list[str], vectors: Any, questions: list[str], sizes: list[int],
    tmp: Path, memory_max: int,
) -> dict[str, Any]:
    out: dict[str, Any] = {"pool": len(pool), "queries": {"edge": 100, "memory": 20},
                           "rows": []}
    for backend in ("edge", "memory"):
        qs = questions[: out["queries"][backend]]  # :memory: filters in Python: slow
        for n in sizes:
            if backend == "memory" and n > memory_max:
                out["rows"].append({"backend": backend, "size": n, "skipped":
                                    f"qdrant-client local mode: > {memory_max} (see KNOWN-TRAPS)"})
                continue
            log(f"  recall: {backend} {n} memories: building")
            t0 = time.perf_counter()
            client, store = build_memory(server, backend, n, pool, vectors, tmp)
            build_s = time.perf_counter() - t0
            client.recall("big", qs[0], 1000)  # warm: model, store, caches
            query_model = client._service.reads.recaller().embedder
            qvecs = [query_model.embed_query(q) for q in qs]
            lat: list[float] = []
            with CpuMonitor([server.process.pid] if server.process else []) as mon:
                for q in qs:
                    t1 = time.perf_counter()
                    client.recall("big", q, 1000)
                    lat.append((time.perf_counter() - t1) * 1000)
            raw: list[float] = []
            for vec in qvecs:
                t1 = time.perf_counter()
                store.search_turns("big", vec, 20)
                raw.append((time.perf_counter() - t1) * 1000)
            row = {"backend": backend, "size": n, "build_s": round(build_s, 1),
                   "recall_ms": summarize(lat),
                   "bare_dense_search_ms": summarize(raw) if raw else None,
                   "machine": mon.result}
            out["rows"].append(row)
            log(f"  recall {backend:6} {n:>7}: p50 {row['recall_ms']['p50']:.1f}"
                f" p95 {row['recall_ms']['p95']:.1f} p99 {row['recall_ms']['p99']:.1f} ms"
                f" (bare search p50 {raw and summarize(raw)['p50']}; other procs"
                f" {mon.result.get('foreign_cores', '?')} cores)")
            client.close()
            store.close()
    return out


# -- 6. competitors -------------------------------------------------------------------------


def bench_competitors(
    pool: list[str], vectors: Any, questions: list[str], sizes: list[int], tmp: Path,
    time_budget_s: float,
) -> dict[str, Any]:
    job = {"sizes": sizes, "pool": pool, "vectors": vectors.tolist(), "queries": questions[:50],
           "budget": 1000, "time_budget_s": time_budget_s}
    job_path = tmp / "competitor-job.json"
    job_path.write_text(json.dumps(job))
    out: dict[str, Any] = {}
    for system, python in VENVS.items():
        if not python.exists():
            out[system] = {"error": f"{python} not found"}
            continue
        log(f"  {system}: sizes {sizes}")
        result = tmp / f"{system}.json"
        child0 = os.times()
        with CpuMonitor() as mon:
            done = subprocess.run(
                [str(python), str(REPO / "bench" / "adapters" / f"{system}.py"), "sizes",
                 str(job_path), str(result)],
                env=dict(os.environ), capture_output=True, text=True,
                timeout=time_budget_s * len(sizes) * 4 + 120, check=False)
        if done.returncode != 0:
            out[system] = {"error": done.stderr[-2000:]}
            log(f"  {system} failed: {done.stderr[-500:]}")
            continue
        out[system] = json.loads(result.read_text())
        child1 = os.times()
        child = (child1.children_user + child1.children_system
                 - child0.children_user - child0.children_system) / mon.result["wall_s"]
        # The competitor runs in a child process: its CPU is not someone else's.
        out[system]["machine"] = {**mon.result, "own_cores": round(child, 2),
                                  "foreign_cores": round(max(0.0, mon.result.get(
                                      "machine_busy_cores", 0.0) - child), 2)}
        for row in out[system]["rows"]:
            log(f"  {system} {row}")
    return out


# -- report ---------------------------------------------------------------------------------


def plots(res: dict[str, Any], folder: Path) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files: dict[str, str] = {}
    pipe = res.get("pipeline") or {}
    if "ingest" in pipe:
        ing = pipe["ingest"]
        fig, ax = plt.subplots(figsize=(6, 3.2))
        labels = ["PING", "XADD", "Lua append alone", "ingest()"]
        series = [ing["baseline"]["ping_ms"], ing["baseline"]["xadd_ms"],
                  ing["breakdown"]["append_script_ms"], ing["single"]]
        x = range(len(labels))
        for k, (p, off) in enumerate((("p50", -0.2), ("p99", 0.2))):
            ax.bar([i + off for i in x], [s[p] for s in series], width=0.4, label=p,
                   color=["#4c72b0", "#dd8452"][k])
        ax.set_xticks(list(x), labels)
        ax.set_ylabel("ms per call")
        ax.set_title("Ingest latency vs bare Redis calls (same server, same run)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(folder / "report_ingest.png", dpi=110)
        plt.close(fig)
        files["ingest"] = "report_ingest.png"
    if "embed" in pipe:
        emb = pipe["embed"]
        fig, ax = plt.subplots(figsize=(6, 3.2))
        labels = ["raw unsorted", "raw sorted/batch", "raw sorted all", "pipeline"]
        vals = [emb["raw"]["unsorted"]["turns_per_s"],
                emb["raw"]["sorted_per_worker_batch"]["turns_per_s"],
                emb["raw"]["sorted_global"]["turns_per_s"], emb["pipeline"]["turns_per_s"]]
        ax.bar(labels, vals, color=["#999", "#999", "#999", "#4c72b0"])
        ax.set_ylabel("turns/s")
        ax.set_title("Embedding: pipeline vs raw fastembed (same texts, same run)")
        fig.tight_layout()
        fig.savefig(folder / "report_embed.png", dpi=110)
        plt.close(fig)
        files["embed"] = "report_embed.png"
    if "freshness" in pipe:
        fr = pipe["freshness"]
        fig, ax = plt.subplots(figsize=(6, 3.2))
        ps = ["p50", "p90", "p95", "p99"]
        ax.plot(ps, [fr["recallable_ms_polled"][p] for p in ps], "o-", label="ingest -> recallable")
        ax.plot(ps, [fr["ingest_ms"][p] for p in ps], "s--", label="ingest() call")
        ax.set_ylabel("ms")
        ax.set_title(f"Freshness at {fr['rate_per_s']:.0f} turns/s for {fr['seconds']:.0f} s")
        ax.legend()
        fig.tight_layout()
        fig.savefig(folder / "report_freshness.png", dpi=110)
        plt.close(fig)
        files["freshness"] = "report_freshness.png"
    if res.get("scaling"):
        sc = res["scaling"]
        fig, ax = plt.subplots(figsize=(5, 3.2))
        ax.bar(["raw fastembed\n1 thread", "1 worker", "2 workers"],
               [sc["raw_fastembed_1_thread"]["turns_per_s"], sc["workers_1"]["turns_per_s"],
                sc["workers_2"]["turns_per_s"]], color=["#999", "#4c72b0", "#4c72b0"])
        ax.set_ylabel("turns/s")
        ax.set_title("Embed workers: 1 -> 2 (one ONNX thread each)")
        fig.tight_layout()
        fig.savefig(folder / "report_scaling.png", dpi=110)
        plt.close(fig)
        files["scaling"] = "report_scaling.png"
    if res.get("recall_sizes"):
        fig, ax = plt.subplots(figsize=(9, 3.8))
        rows = [r for r in res["recall_sizes"]["rows"] if "recall_ms" in r]
        for backend, style in (("edge", "o-"), ("memory", "s-")):
            mine = [r for r in rows if r["backend"] == backend]
            if mine:
                ax.plot([r["size"] for r in mine], [r["recall_ms"]["p95"] for r in mine], style,
                        label=f"hivemem recall p95 ({'embedded Qdrant' if backend == 'edge' else 'qdrant-client :memory:'})")
                bare = [r for r in mine if r.get("bare_dense_search_ms")]
                if bare:
                    ax.plot([r["size"] for r in bare],
                            [r["bare_dense_search_ms"]["p95"] for r in bare], style + "-",
                            alpha=0.5, label=f"bare dense search p95 ({backend})")
        for system, comp in (res.get("competitors") or {}).items():
            crow = [r for r in comp.get("rows", []) if "recall_ms" in r]
            if crow:
                ax.plot([r["size"] for r in crow], [r["recall_ms"]["p95"] for r in crow], "^:",
                        label=f"{system} {comp.get('version', '')} p95")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("memories in the session")
        ax.set_ylabel("ms")
        ax.set_title("Recall latency vs memory size (same run)")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        fig.tight_layout()
        fig.savefig(folder / "report_recall_sizes.png", dpi=110)
        plt.close(fig)
        files["recall_sizes"] = "report_recall_sizes.png"
    return files


def _pcts(d: dict[str, Any] | None) -> str:
    if not d:
        return "-"
    return f"{d['p50']:.2f} / {d['p95']:.2f} / {d['p99']:.2f}"


def write_markdown(res: dict[str, Any], files: dict[str, str], path: Path) -> None:
    lines = ["# hivemem performance report", "",
             f"Generated {res['generated_utc']} by `bench/probes/report.py` on {res['machine']['nproc']}"
             f" CPUs ({res['machine'].get('cpu', '?')}), Redis {res['machine'].get('redis_server')}."
             " This machine is shared: each section records how many CPUs other processes"
             " used meanwhile (`other procs`).", ""]
    pipe = res.get("pipeline") or {}
    if pipe:
        lines += [f"Sections 1-3 come from `{res['pipeline_file']}` (bench/probes/pipeline_stages.py, started"
                  f" {pipe['meta']['started_utc']}), which measured each number and its"
                  " baseline in the same run.", ""]
    if "ingest" in pipe:
        ing = pipe["ingest"]
        lines += ["## 1. Ingest", "", "| call | p50 / p95 / p99 ms |", "|---|---|",
                  f"| PING (baseline) | {_pcts(ing['baseline']['ping_ms'])} |",
                  f"| XADD (baseline) | {_pcts(ing['baseline']['xadd_ms'])} |",
                  f"| Lua append script alone | {_pcts(ing['breakdown']['append_script_ms'])} |",
                  f"| `MemoryClient.ingest` | {_pcts(ing['single'])} |", "",
                  f"Throughput: `ingest()` {ing['single']['calls_per_s']:.0f} calls/s on one"
                  f" thread; `ingest_many` (batches of 100) {ing['many']['turns_per_s']:.0f}"
                  f" turns/s vs pipelined bare XADD {ing['baseline']['xadd_pipelined_per_s']:.0f}/s."
                  f" Other procs: {ing['machine'].get('foreign_cores')} cores.", ""]
        if "ingest" in files:
            lines += [f"![ingest]({files['ingest']})", ""]
    if "freshness" in pipe:
        fr = pipe["freshness"]
        lines += ["## 2. Freshness under load", "",
                  f"{fr['label']}; {fr['rate_per_s']:.0f} turns/s for {fr['seconds']:.0f} s.", "",
                  "| | p50 / p95 / p99 ms |", "|---|---|",
                  f"| `ingest()` call (baseline) | {_pcts(fr['ingest_ms'])} |",
                  f"| ingest -> recallable (polled) | {_pcts(fr['recallable_ms_polled'])} |", ""]
        if "freshness" in files:
            lines += [f"![freshness]({files['freshness']})", ""]
    if "embed" in pipe:
        emb = pipe["embed"]
        lines += ["## 3. Embedding throughput", "", "| | turns/s |", "|---|---|"]
        for name, row in emb["raw"].items():
            lines.append(f"| raw fastembed, {name} (baseline) | {row['turns_per_s']} |")
        lines += [f"| pipeline (worker + Qdrant + Redis) | {emb['pipeline']['turns_per_s']} |",
                  "", f"Pipeline / raw sorted: {emb['ratio_vs_raw_sorted_global']}x.", ""]
        if "embed" in files:
            lines += [f"![embed]({files['embed']})", ""]
    if res.get("scaling"):
        sc = res["scaling"]
        lines += ["## 4. Scaling 1 -> 2 embed workers", "",
                  f"{sc['turns']} LoCoMo turns; each worker its own one-thread ONNX model, one"
                  " embedded Qdrant shared (threads of one process, as embedded mode runs them).",
                  "", "| | turns/s | other procs (cores) |", "|---|---|---|",
                  f"| raw fastembed, 1 thread (baseline) |"
                  f" {sc['raw_fastembed_1_thread']['turns_per_s']} |"
                  f" {sc['raw_fastembed_1_thread']['machine'].get('foreign_cores')} |",
                  f"| 1 worker | {sc['workers_1']['turns_per_s']} |"
                  f" {sc['workers_1']['machine'].get('foreign_cores')} |",
                  f"| 2 workers | {sc['workers_2']['turns_per_s']} |"
                  f" {sc['workers_2']['machine'].get('foreign_cores')} |", "",
                  f"Speed-up: {sc['speedup_2_over_1']}x on {res['machine']['nproc']} CPUs."
                  " Other processes' load differed between the rows (last column): on this"
                  " shared machine the ratio is only as good as that column is even.", ""]
        if "scaling" in files:
            lines += [f"![scaling]({files['scaling']})", ""]
    if res.get("recall_sizes"):
        rs = res["recall_sizes"]
        lines += ["## 5-6. Recall latency vs memory size", "",
                  "One session of N memories; LoCoMo questions ("
                  + ", ".join(f"{v} on {k}" for k, v in rs["queries"].items())
                  + "), budget 1000"
                  " tokens, balanced preset (hybrid dense + BM25, facts, neighbours); the query"
                  " is embedded at recall time. Baseline: the bare dense search inside it.", "",
                  "| system | backend | memories | recall p50 / p95 / p99 ms |"
                  " bare search p50 / p95 / p99 ms | other procs |",
                  "|---|---|---|---|---|---|"]
        for r in rs["rows"]:
            if "skipped" in r:
                lines.append(f"| hivemem | {r['backend']} | {r['size']} | skipped: {r['skipped']} | | |")
                continue
            lines.append(f"| hivemem | {r['backend']} | {r['size']} | {_pcts(r['recall_ms'])} |"
                         f" {_pcts(r['bare_dense_search_ms'])} |"
                         f" {r['machine'].get('foreign_cores')} |")
        for system, comp in (res.get("competitors") or {}).items():
            if "error" in comp:
                lines.append(f"| {system} | | | failed: {comp['error'][:120]!r} | | |")
                continue
            m = comp["machine"]
            busy = (f"{m.get('foreign_cores')}" if "own_cores" in m and m["own_cores"] > 0.05
                    else f"machine busy {m.get('machine_busy_cores')} (itself included)")
            for r in comp["rows"]:
                if "recall_ms" in r:
                    lines.append(f"| {system} {comp['version']} | in-memory | {r['size']} |"
                                 f" {_pcts(r['recall_ms'])} | | {busy} |")
                else:
                    lines.append(f"| {system} {comp['version']} | in-memory | {r['size']} |"
                                 f" not reached: {r.get('reached')} memories ingested in"
                                 f" {r.get('ingest_s')} s | | |")
        lines.append("")
        if "recall_sizes" in files:
            lines += [f"![recall vs size]({files['recall_sizes']})", ""]
    rob = res.get("robustness") or {}
    if rob:
        lines += ["## 7. Robustness", "", rob.get("faults_md", ""), ""]
        fz = rob.get("fuzz")
        if fz:
            lines += [f"Fuzzing (`bench/faults.py --only fuzz`, {fz['examples_per_property']} examples per"
                      f" property, {len(fz['properties'])} properties): {fz['calls']} calls,"
                      f" {fz['failed']} failed properties, {fz['http_5xx']} HTTP 5xx"
                      f" ({fz['wall_s']} s).", "", "| outcome | count |", "|---|---|"]
            lines += [f"| {k} | {v} |" for k, v in fz["outcomes"].items()]
            lines.append("")
    path.write_text("\n".join(lines) + "\n")


FAULTS_MD = """Fault-injection suite (`tests/integration/test_fault_*.py`, `tests/unit/test_llm_faults.py`,
`tests/unit/test_backpressure.py`; CI sizes, `HIVEMEM_SOAK=1` for the issue's sizes):

| fault | what the test checks | lost |
|---|---|---|
| SIGKILL of random embed / boundary / reflect workers during a load, restarted | every turn in Qdrant once, episodes closed once in order, one fact per episode | nothing |
| Redis SHUTDOWN + restart mid-load | producers get `StoreUnavailable`, retry with their turn ids (no duplicates); workers back off and resume | nothing |
| Redis kill -9, appendfsync always + `ingest(durable=True)` | every acknowledged turn is there after restart | nothing |
| Redis kill -9, appendfsync everysec | measured 0 of 2000 acknowledged turns lost (Redis write()s the AOF before replying); an OS crash or power loss can lose ~1 s (up to 2 s) | see left |
| Qdrant down (3 s in CI, 30 s soak) | exponential back-off (no spinning: ~10 calls in 3 s), nothing acked or marked processed while down, catch-up afterwards | nothing |
| LLM 429 / 5xx / timeouts / slow | retried with back-off until the facts arrive, no failed jobs; recall answers from turns meanwhile | nothing |
| LLM garbage output | the job fails keeping its input and raw output; replay after the fix brings the facts | nothing |
| poison entries (undecodable, handler-crashing) | dead-lettered after N deliveries with the error, the rest flows, `hivemem dlq replay` recovers | nothing |
| backlog over `ingest.max_backlog` | `ingest` raises `Backpressure` (HTTP 429) or blocks; backlog stays within the bound | nothing |
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pipeline", type=Path, default=RESULTS / "pipeline.json")
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--memory-max", type=int, default=10_000,
                    help="largest size for qdrant-client :memory: (slow filters beyond)")
    ap.add_argument("--scaling-turns", type=int, default=1000)
    ap.add_argument("--no-competitors", action="store_true")
    ap.add_argument("--competitor-budget-s", type=float, default=240.0,
                    help="ingest time allowed per competitor and size")
    ap.add_argument("--skip", default="", help="comma list: scaling,recall")
    ap.add_argument("--out", type=Path, default=RESULTS / "REPORT.md")
    ap.add_argument("--render-only", action="store_true",
                    help="rewrite REPORT.md and the plots from report.json, measuring nothing")
    args = ap.parse_args()
    if args.render_only:
        res = json.loads((args.out.parent / "report.json").read_text())
        if args.pipeline.exists():
            res["pipeline"] = json.loads(args.pipeline.read_text())
        fuzz = RESULTS / "fuzz.json"
        res["robustness"] = {"faults_md": FAULTS_MD,
                             "fuzz": json.loads(fuzz.read_text()) if fuzz.exists() else None}
        write_markdown(res, plots(res, args.out.parent), args.out)
        return 0
    offline_model_env()
    skip = set(filter(None, args.skip.split(",")))
    sizes = [int(s) for s in args.sizes.split(",")]
    from hivemem.testing import RedisServer

    res: dict[str, Any] = {"generated_utc": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
                           "machine": machine_facts()}
    if args.pipeline.exists():
        res["pipeline"] = json.loads(args.pipeline.read_text())
        res["pipeline_file"] = str(args.pipeline.relative_to(REPO))
    pool, questions = corpus()
    started = time.perf_counter()
    import numpy as np

    log(f"embedding the pool of {len(pool)} LoCoMo turns once (real model)")
    vectors = np.asarray(embedder(threads=None, batch=64).embed_documents(pool))
    with tempfile.TemporaryDirectory(prefix="hivemem-report-") as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "redis").mkdir()
        server = RedisServer(tmp / "redis")
        server.start()
        try:
            if "scaling" not in skip:
                log("scaling 1 -> 2 embed workers")
                res["scaling"] = bench_scaling(server, pool[: args.scaling_turns], tmp)
            if "recall" not in skip:
                log("recall vs memory size")
                res["recall_sizes"] = bench_recall_sizes(server, pool, vectors, questions,
                                                         sizes, tmp, args.memory_max)
            if not args.no_competitors:
                log("gleanr / mneno recall vs memory size")
                res["competitors"] = bench_competitors(pool, vectors, questions, sizes, tmp,
                                                       args.competitor_budget_s)
        finally:
            server.stop()
    fuzz = RESULTS / "fuzz.json"
    res["robustness"] = {"faults_md": FAULTS_MD,
                         "fuzz": json.loads(fuzz.read_text()) if fuzz.exists() else None}
    res["duration_s"] = round(time.perf_counter() - started, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    files = plots(res, args.out.parent)
    write_markdown(res, files, args.out)
    slim = {k: v for k, v in res.items() if k not in ("pipeline", "robustness")}
    (args.out.parent / "report.json").write_text(json.dumps(slim, indent=2, default=str) + "\n")
    log(f"wrote {args.out} ({res['duration_s']} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
