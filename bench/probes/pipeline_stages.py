#!/usr/bin/env python
"""End-to-end pipeline benchmark: real redis-server, embedded Qdrant (qdrant-edge), real model.

    /work/venv/bin/python bench/probes/pipeline_stages.py            # full run (~7-9 min on an idle 2-CPU VM)
    /work/venv/bin/python bench/probes/pipeline_stages.py --quick    # smoke run (~20 s idle)
    /work/venv/bin/python bench/probes/pipeline_stages.py --sections recall --profile /tmp/prof

It starts its own redis-server on a unix socket in a temp folder (appendonly yes, appendfsync
everysec, like production; the Redis on 6379 is never touched), opens EdgeVectorStore folders in
the same temp folder and loads sentence-transformers/all-MiniLM-L6-v2 offline from
../shared/models/fastembed_cache. Every phase uses its own key prefix on the one server. Only
the embed stage runs (no boundary worker): its extra XADD to the embedded stream is timed, the
boundary stage itself is not measured here.

Measured, in one run:
1. ingest: single `MemoryClient.ingest` latency, `ingest_many` throughput (batches of 100),
   next to bare XADD (single latency, pipelined rate) and PING on the same server, plus a
   breakdown (validation in Python, the Lua script alone, server-side usec per call).
2. embed: the StreamWorker + EmbedHandler (FastEmbedEmbedder + EdgeVectorStore) in burst mode on
   2000 LoCoMo turns (5 conversations interleaved), next to raw fastembed `TextEmbedding.embed`
   on the same texts and batch size: sorted by length, sorted within each worker-sized batch
   (what the worker can do), unsorted. Wall-clock and process CPU-seconds per turn.
3. freshness: ingest -> processed-bit latency at a steady 50 turns/s for 30 s with the
   documented deployment running: one embed worker per core, one ONNX thread each (polled
   every 1 ms, and stamped when mark_processed returns).
4. recall: `MemoryClient.recall` latency (balanced preset: hybrid dense + BM25, facts,
   neighbours) with 1k and 10k turns in one session, with a breakdown by step.
Experiments (full run; --no-experiments skips them) run the previous setups in the same run
for comparison: one embed worker on an all-core ONNX pool (freshness) and the query embedded
on an all-core ONNX pool (recall). The package itself is not modified.

This VM is shared: before each measurement the bench waits (bounded) for other processes to go
quiet, and records for every number how many CPUs other processes used meanwhile.

Results: printed, and saved as JSON to bench/results/pipeline.json (quick: pipeline-quick.json).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: harness, suites

from harness import (
    MODEL_CACHE,
    RESULTS,
    CpuMonitor,
    RedisServer,
    locomo_conversations,
    locomo_questions,
    locomo_turns,
    machine_facts,
    offline_model_env,
    summarize,
    wait_for_quiet,
)

offline_model_env()  # before anything can load fastembed

import numpy as np  # noqa: E402

import hivemem.workers.embed as embed_mod  # noqa: E402
from hivemem.config import EmbeddingSettings, Settings, WorkerSettings  # noqa: E402
from hivemem.domain.turn import TurnDraft  # noqa: E402
from hivemem.logs import configure_logging  # noqa: E402
from hivemem.pipeline.topology import Keys, Topology  # noqa: E402
from hivemem.pipeline.wire import wire_json  # noqa: E402
from hivemem.producer.client import MemoryClient  # noqa: E402
from hivemem.store.redis import connect  # noqa: E402
from hivemem.store.state import TurnLog  # noqa: E402
from hivemem.store.status import stage_activity, stage_backlog  # noqa: E402
from hivemem.store.streams import StreamStore  # noqa: E402
from hivemem.store.vectors.edge import EdgeVectorStore  # noqa: E402
from hivemem.workers.embed import EmbedHandler, embed_kind  # noqa: E402
from hivemem.workers.stream import StreamWorker  # noqa: E402
from hivemem.workers.window import WindowHandler, window_kind  # noqa: E402

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
NS = 1e-6  # ns -> ms

TARGETS = {
    "ingest_p99_ms": 1.0,
    "embed_ratio": 0.80,
    "fresh_p95_ms": 500.0,
    "recall_p95_ms": 25.0,
}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


SETTLE: dict[str, Any] = {"max_wait_s": 0.0, "budget_s": 0.0, "waits": []}


def settle(label: str) -> None:
    """Before a measurement: wait a while for other processes on this shared VM to go quiet
    (at most `max_wait_s` each time and `budget_s` in all, so the run stays bounded)."""
    left = SETTLE["budget_s"] - sum(w["waited_s"] for w in SETTLE["waits"])
    limit = min(SETTLE["max_wait_s"], left)
    if limit <= 0:
        return
    w = wait_for_quiet(limit, log=log)
    SETTLE["waits"].append({"before": label, **w})


def make_settings(url: str, prefix: str, **worker: Any) -> Settings:
    return Settings.model_validate(
        {
            "redis": {"url": url, "key_prefix": prefix},
            "embedding": {"provider": "fastembed", "model": MODEL, "cache_dir": str(MODEL_CACHE)},
            "worker": worker,
            "log_level": "warning",
        }
    )


class Timed:
    """Wraps a bound method on an instance, accumulating seconds and calls (bench-side only)."""

    def __init__(self, obj: Any, name: str) -> None:
        self.total = 0.0
        self.calls = 0
        self.inner = getattr(obj, name)
        setattr(obj, name, self)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return self.inner(*args, **kwargs)
        finally:
            self.total += time.perf_counter() - t0
            self.calls += 1


def make_handler(
    embedder: Any, store: Any, conn: Any, keys: Keys, settings: Settings
) -> tuple[EmbedHandler, TurnLog, StreamStore]:
    """The embed stage exactly as the worker runner wires it (its own StreamStore for the
    embedded-stream writes, so timing it leaves the worker's reads and acks alone)."""
    state = TurnLog(conn, keys, settings.ingest.recent_window)
    streams = StreamStore(conn, keys)
    handler = EmbedHandler(embedder, store, state, streams, keys,
                           window_turns=settings.embedding.window_turns,
                           window_mode=settings.embedding.window_mode)
    return handler, state, streams


def interleaved_turns(convs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(session_id, "Speaker: text") for every LoCoMo turn, conversations interleaved."""
    per = [(f"locomo-{c['name']}", locomo_turns(c)) for c in convs]
    out: list[tuple[str, str]] = []
    longest = max(len(t) for _, t in per)
    for i in range(longest):
        for sid, turns in per:
            if i < len(turns):
                out.append((sid, turns[i]))
    return out


# -- 1. ingest ------------------------------------------------------------------------------


def bench_ingest(server: RedisServer, texts: list[str], n_single: int, n_many: int) -> dict[str, Any]:
    settings = make_settings(server.url, "bi")
    client = MemoryClient(settings)
    roles = ("user", "assistant")
    sessions = [f"ingest-{i}" for i in range(10)]

    log(f"ingest: warm-up, then {n_single} single ingest() calls")
    for i in range(300):
        client.ingest("warmup", roles[i % 2], texts[i % len(texts)])
    gc.collect()
    lat: list[float] = []
    perf = time.perf_counter_ns
    t_start = perf()
    for i in range(n_single):
        t0 = perf()
        client.ingest(sessions[i % 10], roles[i % 2], texts[i % len(texts)])
        lat.append((perf() - t0) * NS)
    single_wall = (perf() - t_start) / 1e9
    single = summarize(lat)
    single["calls_per_s"] = round(n_single / single_wall, 1)
    log(f"  ingest(): p50 {single['p50']:.3f} ms  p95 {single['p95']:.3f}  p99 {single['p99']:.3f}"
        f"  ({single['calls_per_s']:.0f} calls/s, one thread)")

    # Breakdown of one ingest: Python-side validation vs the Lua script round trip.
    ing = settings.ingest
    drafts = [
        TurnDraft(sessions[i % 10], roles[i % 2], texts[i % len(texts)], settings=ing)
        for i in range(min(n_single, 2000))
    ]
    t0 = perf()
    for i in range(len(drafts)):
        TurnDraft(sessions[i % 10], roles[i % 2], texts[i % len(texts)], settings=ing)
    draft_us = (perf() - t0) / len(drafts) / 1e3
    t0 = perf()
    for d in drafts:
        wire_json(d)
    wire_us = (perf() - t0) / len(drafts) / 1e3
    state = client._state  # bench-only: time the script call with prebuilt arguments
    script_lat: list[float] = []
    for d in drafts:
        keys, args, _ = state._append_call(client.keys.partition(d.session_id), [d])
        t0 = perf()
        state._append(keys=keys, args=args)
        script_lat.append((perf() - t0) * NS)
    script = summarize(script_lat)
    log(f"  breakdown: TurnDraft {draft_us:.1f} us, wire_json {wire_us:.1f} us;"
        f" Lua append script alone p50 {script['p50']:.3f} ms p99 {script['p99']:.3f}")

    log(f"ingest: ingest_many() x {n_many // 100} batches of 100, interleaved batch by batch"
        " with the bare Lua append script pipelined x100 (prebuilt args)")
    batches = []
    for b in range(n_many // 100):
        batches.append([
            {"session_id": sessions[(b * 100 + j) % 10], "role": roles[j % 2],
             "content": texts[(b * 100 + j) % len(texts)]}
            for j in range(100)
        ])
    # The same Lua script pipelined by hand with prebuilt arguments: no validation, no JSON.
    # Two ways: one call per turn (the baseline as first defined), and the very calls
    # ingest_many makes (one per partition and batch: the Redis side of ingest_many alone).
    # Their own turns (new ids, so every call appends like ingest_many's: a repeated id would
    # take the script's cheap duplicate path), in sessions of their own.
    r = client._redis

    def bare_drafts(tag: str) -> list[TurnDraft]:
        return [TurnDraft(f"{tag}-{sessions[i % 10]}", roles[i % 2], texts[i % len(texts)],
                          settings=ing) for i in range(len(batches) * 100)]

    per_turn = [state._append_call(client.keys.partition(d.session_id), [d])[:2]
                for d in bare_drafts("bare")]
    grouped: list[list[tuple[Any, Any]]] = []
    same = bare_drafts("same")
    for b in range(len(batches)):
        by_p: dict[int, list[TurnDraft]] = {}
        for d in same[b * 100:(b + 1) * 100]:
            by_p.setdefault(client.keys.partition(d.session_id), []).append(d)
        grouped.append([state._append_call(part, ds)[:2] for part, ds in by_p.items()])
    # Raw EVALSHA, the script loaded once: the cheapest way to send these calls (a pipeline
    # handed the `Script` asks SCRIPT EXISTS first, one more round trip per batch).
    sha = r.script_load(state._append.script)
    batch_lat: list[float] = []
    many_ns = script_ns = same_ns = 0
    # Alternating the three batch by batch: a change of load on the shared machine hits all.
    for b, batch in enumerate(batches):
        t0 = perf()
        client.ingest_many(batch)
        dt = perf() - t0
        many_ns += dt
        batch_lat.append(dt * NS)
        t0 = perf()
        pipe = r.pipeline(transaction=False)
        for j in range(100):
            keys, args = per_turn[b * 100 + j]
            pipe.execute_command("EVALSHA", sha, len(keys), *keys, *args)
        pipe.execute()
        script_ns += perf() - t0
        t0 = perf()
        pipe = r.pipeline(transaction=False)
        for keys, args in grouped[b]:
            pipe.execute_command("EVALSHA", sha, len(keys), *keys, *args)
        pipe.execute()
        same_ns += perf() - t0
    many = {
        "turns": len(batches) * 100,
        "batch_size": 100,
        "turns_per_s": round(len(batches) * 100 / (many_ns / 1e9), 1),
        "batch_ms": summarize(batch_lat),
    }
    log(f"  ingest_many: {many['turns_per_s']:.0f} turns/s"
        f" (batch p50 {many['batch_ms']['p50']:.2f} ms)")
    script_pipelined_rate = round(len(batches) * 100 / (script_ns / 1e9), 1)
    same_calls_rate = round(len(batches) * 100 / (same_ns / 1e9), 1)
    log(f"  Lua append script pipelined x100, prebuilt args: {script_pipelined_rate:.0f} turns/s"
        f"  -> ingest_many at {many['turns_per_s'] / script_pipelined_rate:.0%} of it")
    log(f"  the same script calls as ingest_many, prebuilt: {same_calls_rate:.0f} turns/s"
        f"  -> ingest_many at {many['turns_per_s'] / same_calls_rate:.0%} of it")
    many["same_calls_prebuilt_turns_per_s"] = same_calls_rate
    many["over_same_calls_prebuilt"] = round(many["turns_per_s"] / same_calls_rate, 3)
    many["load_average"] = [round(x, 2) for x in os.getloadavg()]

    log("ingest: baseline bare XADD / PING on the same server")
    payloads = [{"seq": str(i + 1), "turn": wire_json(d)} for i, d in enumerate(drafts)]
    stream = "bench:xadd"
    ping_lat, xadd_lat = [], []
    for _ in range(300):
        r.ping()
    for _ in range(n_single):
        t0 = perf()
        r.ping()
        ping_lat.append((perf() - t0) * NS)
    for i in range(n_single):
        t0 = perf()
        r.xadd(stream, payloads[i % len(payloads)])
        xadd_lat.append((perf() - t0) * NS)
    n_pipe = len(batches)
    t_start = perf()
    for b in range(n_pipe):
        pipe = r.pipeline(transaction=False)
        for j in range(100):
            pipe.xadd(stream, payloads[(b * 100 + j) % len(payloads)])
        pipe.execute()
    xadd_rate = round(n_pipe * 100 / ((perf() - t_start) / 1e9), 1)
    xadd = summarize(xadd_lat)
    ping = summarize(ping_lat)
    # Server-side cost per command, from Redis itself.
    stats = r.info("commandstats")
    server_us = {
        name.removeprefix("cmdstat_"): float(v["usec_per_call"])
        for name, v in stats.items()
        if name in ("cmdstat_evalsha", "cmdstat_xadd", "cmdstat_ping")
    }
    log(f"  PING p50 {ping['p50']:.3f} ms p99 {ping['p99']:.3f};  XADD p50 {xadd['p50']:.3f} ms"
        f" p99 {xadd['p99']:.3f};  pipelined XADD {xadd_rate:.0f}/s")
    log(f"  server-side usec per call (INFO commandstats): {server_us}")
    client.close()
    return {
        "single": single,
        "single_n": n_single,
        "breakdown": {
            "turndraft_us": round(draft_us, 2),
            "wire_json_us": round(wire_us, 2),
            "append_script_ms": script,
            "append_script_pipelined_per_s": script_pipelined_rate,
        },
        "many": many,
        "baseline": {
            "ping_ms": ping,
            "xadd_ms": xadd,
            "xadd_pipelined_per_s": xadd_rate,
            "server_usec_per_call": server_us,
            "payload_bytes_mean": round(sum(len(p["turn"]) for p in payloads) / len(payloads), 1),
        },
        "ratios": {
            "ingest_p50_over_xadd_p50": round(single["p50"] / xadd["p50"], 2),
            "ingest_p99_over_xadd_p99": round(single["p99"] / xadd["p99"], 2),
            "ingest_many_over_xadd_pipelined": round(many["turns_per_s"] / xadd_rate, 3),
            "ingest_many_over_lua_pipelined": round(many["turns_per_s"] / script_pipelined_rate,
                                                    3),
        },
    }


# -- 2. embed worker throughput -------------------------------------------------------------


def cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def timed_raw(name: str, fn: Callable[[], Any], n: int) -> tuple[dict[str, Any], Any]:
    """Run `fn` once; wall and process-CPU per turn, plus how busy the rest of the machine was."""
    settle(name)
    gc.collect()
    with CpuMonitor() as mon:
        c0 = cpu_s()
        t0 = time.perf_counter()
        value = fn()
        wall = time.perf_counter() - t0
        cpu = cpu_s() - c0
    row = {"seconds": round(wall, 3), "turns_per_s": round(n / wall, 1),
           "cpu_ms_per_turn": round(cpu / n * 1000, 2), "machine": mon.result}
    log(f"  {name:<44} {row['turns_per_s']:7.1f} turns/s  cpu {row['cpu_ms_per_turn']:5.1f}"
        f" ms/turn  (other procs {mon.result.get('foreign_cores', '?')} cores)")
    return row, value


def run_embed_worker(
    server: RedisServer,
    prefix: str,
    turns: list[tuple[str, str]],
    embedder: Any,
    store_path: Path,
    *,
    worker_batch: int,
    block_ms: int,
    label: str,
) -> dict[str, Any]:
    """Enqueue `turns`, then run one StreamWorker in burst mode in this thread; time it."""
    settings = make_settings(server.url, prefix, batch_size=worker_batch, block_ms=block_ms)
    keys = Keys(prefix)
    client = MemoryClient(settings)
    roles = ("user", "assistant")
    for start in range(0, len(turns), 500):
        client.ingest_many(
            [{"session_id": s, "role": roles[i % 2], "content": t}
             for i, (s, t) in enumerate(turns[start:start + 500], start)]
        )
    client.close()

    conn = connect(settings.redis)
    store = EdgeVectorStore(store_path, embedder.dim)
    handler, state, _ = make_handler(embedder, store, conn, keys, settings)
    t_embed = Timed(embedder, "embed_documents")
    t_upsert = Timed(store, "upsert_turns")
    # One script per partition and batch: the processed bits and the boundary stage's entry.
    t_publish = Timed(state, "publish_embedded")
    t_markers = Timed(embed_mod, "with_detected_markers")
    last_done = [0.0]
    sizes: list[int] = []

    def handle(batch: list[Any]) -> None:
        handler(batch)
        sizes.append(len(batch))
        last_done[0] = time.perf_counter()

    kind = dataclasses.replace(embed_kind(handler), handle=handle)
    worker = StreamWorker(kind, StreamStore(conn, keys), settings.worker, consumer="bench-embed")
    settle(label)
    gc.collect()
    with CpuMonitor([server.process.pid] if server.process else []) as mon:
        c0 = cpu_s()
        t0 = time.perf_counter()
        report = worker.run(burst=True)
        wall = time.perf_counter() - t0
        cpu = cpu_s() - c0
    busy = last_done[0] - t0
    try:
        assert report.handled == len(turns), (report.handled, len(turns))
        assert store.count_turns() == len(turns)
    finally:
        # Undo the wrappers (the embedder is shared with later phases).
        del embedder.embed_documents
        embed_mod.with_detected_markers = t_markers.inner
        store.close()
        conn.close()
    other = busy - t_embed.total - t_upsert.total - t_publish.total - t_markers.total
    row = {
        "turns": len(turns),
        "worker_batch_size": worker_batch,
        "embedding_batch_size": embedder.batch_size,
        "block_ms": block_ms,
        "seconds_to_last_ack": round(busy, 3),
        "wall_incl_burst_exit_s": round(wall, 3),
        "turns_per_s": round(len(turns) / busy, 1),
        "cpu_ms_per_turn": round(cpu / len(turns) * 1000, 2),
        "batches": len(sizes),
        "breakdown_s": {
            "embed": round(t_embed.total, 3),
            "marker_detection": round(t_markers.total, 3),
            "qdrant_upsert": round(t_upsert.total, 3),
            "publish_embedded_and_processed_bits": round(t_publish.total, 3),
            "other_read_decode_ack": round(other, 3),
        },
        "machine": mon.result,
    }
    b = row["breakdown_s"]
    log(f"  {label:<44} {row['turns_per_s']:7.1f} turns/s  cpu {row['cpu_ms_per_turn']:5.1f}"
        f" ms/turn  (other procs {mon.result.get('foreign_cores', '?')} cores)")
    log(f"  {'':<44} [embed {b['embed']}s, markers {b['marker_detection']}s, qdrant upsert"
        f" {b['qdrant_upsert']}s, publish + processed bits"
        f" {b['publish_embedded_and_processed_bits']}s, read/decode/ack"
        f" {b['other_read_decode_ack']}s]")
    return row


def bench_embed(
    server: RedisServer,
    tmp: Path,
    turns: list[tuple[str, str]],
    embedder: Any,
    raw_model: Any,
    *,
    experiments: bool,
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    texts = [t for _, t in turns]
    n = len(texts)
    bs = embedder.batch_size  # EmbeddingSettings().batch_size
    wb = WorkerSettings().batch_size
    lens = sorted(len(t) for t in texts)
    log(f"embed: {n} LoCoMo turns in {len({s for s, _ in turns})} interleaved sessions, chars"
        f" p50 {lens[n // 2]} p90 {lens[int(n * 0.9)]} max {lens[-1]}; embedding batch {bs},"
        f" worker batch {wb} (defaults)")
    # Warm both ONNX sessions (first runs allocate arenas).
    warm = texts[:128]
    list(raw_model.embed(warm, batch_size=bs))
    embedder.embed_documents(warm)

    out: dict[str, Any] = {"turns": n, "chars_p50": lens[n // 2], "chars_max": lens[-1],
                           "embedding_batch_size": bs, "worker_batch_size": wb}
    raw: dict[str, Any] = {}
    order = sorted(range(n), key=lambda i: len(texts[i]))
    by_len = [texts[i] for i in order]

    raw["sorted_global"], rows = timed_raw(
        f"raw fastembed, sorted by length, batch {bs}",
        lambda: np.asarray(list(raw_model.embed(by_len, batch_size=bs)), dtype=np.float32), n)
    vectors: dict[str, np.ndarray] = {}
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    rows = (rows / np.where(norms == 0, 1, norms)).astype(np.float32)
    for row, i in enumerate(order):
        vectors[texts[i]] = rows[row]

    def per_worker_batch() -> None:
        for start in range(0, n, wb):
            list(raw_model.embed(sorted(texts[start:start + wb], key=len), batch_size=bs))

    raw["sorted_per_worker_batch"], _ = timed_raw(
        f"raw fastembed, sorted within each {wb} (stream)", per_worker_batch, n)
    raw["unsorted"], _ = timed_raw(
        f"raw fastembed, unsorted (stream order), batch {bs}",
        lambda: list(raw_model.embed(texts, batch_size=bs)), n)
    out["raw"] = raw

    pipe = run_embed_worker(server, "be", turns, embedder, tmp / "qdrant-embed",
                            worker_batch=wb, block_ms=100,
                            label=f"PIPELINE worker batch {wb}, embed batch {bs}")
    out["pipeline"] = pipe
    ref = raw["sorted_global"]
    out["ratio_vs_raw_sorted_global"] = round(pipe["turns_per_s"] / ref["turns_per_s"], 3)
    out["ratio_vs_raw_sorted_per_worker_batch"] = round(
        pipe["turns_per_s"] / raw["sorted_per_worker_batch"]["turns_per_s"], 3)
    out["ratio_vs_raw_unsorted"] = round(pipe["turns_per_s"] / raw["unsorted"]["turns_per_s"], 3)
    out["cpu_ratio_vs_raw_sorted_global"] = round(
        ref["cpu_ms_per_turn"] / pipe["cpu_ms_per_turn"], 3)
    log(f"  ratio pipeline/raw (turns/s): {out['ratio_vs_raw_sorted_global']:.2f} vs sorted,"
        f" {out['ratio_vs_raw_sorted_per_worker_batch']:.2f} vs sorted within worker batches,"
        f" {out['ratio_vs_raw_unsorted']:.2f} vs unsorted;"
        f" by CPU per turn {out['cpu_ratio_vs_raw_sorted_global']:.2f} vs sorted")

    if experiments:
        # Settings only (HIVEMEM_EMBEDDING__BATCH_SIZE / HIVEMEM_WORKER__BATCH_SIZE). With the
        # worker batch equal to the embedding batch (64/64, the defaults before 2a5502c),
        # sorting a batch cannot change its padding.
        exps: dict[str, Any] = {}
        for name, wbx, ebx in (("worker64_embed64", 64, 64), ("worker64_embed16", 64, 16),
                               ("worker256_embed16", 256, 16)):
            if (wbx, ebx) == (wb, bs):
                continue
            key = f"sorted_global_batch{ebx}"
            if ebx == bs:
                key = "sorted_global"
            elif key not in raw:
                raw[key], _ = timed_raw(
                    f"raw fastembed, sorted by length, batch {ebx}",
                    lambda ebx=ebx: list(raw_model.embed(by_len, batch_size=ebx)), n)
            embedder.batch_size = ebx
            try:
                exp = run_embed_worker(
                    server, f"be-{name}", turns, embedder, tmp / f"qdrant-{name}",
                    worker_batch=wbx, block_ms=100,
                    label=f"EXPERIMENT worker batch {wbx}, embed batch {ebx}")
            finally:
                embedder.batch_size = bs
            same = raw[key]
            exp["raw_reference"] = key
            exp["ratio_vs_raw_sorted_same_batch"] = round(
                exp["turns_per_s"] / same["turns_per_s"], 3)
            exp["cpu_ratio_vs_raw_sorted_same_batch"] = round(
                same["cpu_ms_per_turn"] / exp["cpu_ms_per_turn"], 3)
            exp["speed_vs_defaults"] = round(exp["turns_per_s"] / pipe["turns_per_s"], 3)
            exps[name] = exp
            log(f"  {'':<44} ratio {exp['ratio_vs_raw_sorted_same_batch']:.2f} vs raw sorted"
                f" batch {ebx} (by CPU {exp['cpu_ratio_vs_raw_sorted_same_batch']:.2f});"
                f" {exp['speed_vs_defaults']:.2f}x the current defaults")
        out["experiments"] = exps
    return out, vectors


# -- 3. freshness ---------------------------------------------------------------------------


def bench_freshness(
    server: RedisServer,
    tmp: Path,
    turns: list[tuple[str, str]],
    embedder: Any,
    *,
    prefix: str,
    label: str,
    rate: float,
    seconds: float,
    block_ms: int,
    worker_batch: int,
    poll_s: float,
    drain_timeout_s: float,
    embedders: list[Any] | None = None,
    window_mode: str | None = None,
    window_embedder: Any | None = None,
) -> dict[str, Any]:
    """Steady-rate ingest with an embed worker thread; latency until the processed bit is set.
    With `window_mode` "refined", a window-stage worker thread (`window_embedder`) beside
    the embed workers, as an embed worker process runs it.

    The producer (this thread) calls `ingest` on an absolute schedule; a poller thread reads
    every tracked session's processed bitmap (one pipelined GET per tick) every `poll_s`. The
    handler also stamps the moment `mark_processed` returned (the bit is set by then). Turns
    still unprocessed `drain_timeout_s` after the last ingest are censored: they count with the
    latency they had reached (a lower bound), so the percentiles never flatter the pipeline.
    """
    settings = make_settings(server.url, prefix, batch_size=worker_batch, block_ms=block_ms)
    if window_mode is not None:
        settings = settings.model_copy(update={"embedding": settings.embedding.model_copy(
            update={"window_mode": window_mode})})
    keys = Keys(prefix)
    n = int(rate * seconds)
    plan = [turns[i % len(turns)] for i in range(n)]
    n_workers = len(embedders or [embedder])
    log(f"freshness [{label}]: {n} turns at {rate:.0f}/s for {seconds:.0f} s into"
        f" {len({s for s, _ in plan})} sessions; {n_workers} worker thread(s): batch"
        f" {worker_batch}, embed batch {embedder.batch_size}, block_ms {block_ms}; poller every"
        f" {poll_s * 1000:.1f} ms")

    store = EdgeVectorStore(tmp / f"qdrant-{prefix}", embedder.dim)
    marked: dict[tuple[str, int], float] = {}
    sizes: list[int] = []
    busy = [0.0]
    conns: list[Any] = []
    workers: list[StreamWorker[Any]] = []
    wthreads: list[threading.Thread] = []
    # One worker per embedder (same consumer group, as several worker processes would be).
    for w, emb in enumerate(embedders or [embedder]):
        wconn = connect(settings.redis)
        conns.append(wconn)
        handler, _, _ = make_handler(emb, store, wconn, keys, settings)

        def handle(batch: list[Any], handler: EmbedHandler = handler) -> None:
            h0 = time.perf_counter()
            handler(batch)
            now = time.perf_counter()
            busy[0] += now - h0
            sizes.append(len(batch))
            for t in batch:
                marked[(t.session_id, t.seq)] = now

        kind = dataclasses.replace(embed_kind(handler), handle=handle)
        worker = StreamWorker(kind, StreamStore(wconn, keys), settings.worker,
                              consumer=f"bench-fresh-{w}")
        workers.append(worker)
        wthreads.append(threading.Thread(target=worker.run, name=f"bench-embed-{w}", daemon=True))

    refined = [0]
    if settings.embedding.window_mode == "refined" and window_embedder is not None:
        wconn = connect(settings.redis)
        conns.append(wconn)
        embed_stage = Topology(keys).embed
        window_handler = WindowHandler(window_embedder, store, keys,
                                       lambda c=wconn: stage_activity(c, embed_stage),
                                       window_turns=settings.embedding.window_turns)

        def refine(batch: list[Any], inner: WindowHandler = window_handler) -> None:
            inner(batch)
            refined[0] += len(batch)

        kind = dataclasses.replace(window_kind(window_handler), handle=refine)
        worker = StreamWorker(kind, StreamStore(wconn, keys), settings.worker,
                              consumer="bench-window")
        window_handler.stopping = lambda w=worker: w.stopping
        workers.append(worker)
        wthreads.append(threading.Thread(target=worker.run, name="bench-window", daemon=True))

    # Poller: its own connection; one pipelined GET of each session's processed bitmap per tick.
    pconn = connect(settings.redis)
    outstanding: dict[str, dict[int, float]] = {}
    seen: dict[tuple[str, int], float] = {}
    lock = threading.Lock()
    stop_poll = threading.Event()
    polls = [0]

    poll_cpu = [0.0]

    def poll() -> None:
        c0 = time.thread_time()
        try:
            poll_loop()
        finally:
            poll_cpu[0] = time.thread_time() - c0

    def poll_loop() -> None:
        while not stop_poll.is_set():
            with lock:
                sids = [s for s, d in outstanding.items() if d]
            if sids:
                pipe = pconn.pipeline(transaction=False)
                for s in sids:
                    pipe.get(keys.session_processed(s))
                bitmaps = pipe.execute()
                now = time.perf_counter()
                polls[0] += 1
                with lock:
                    for s, bm in zip(sids, bitmaps, strict=True):
                        if not bm:
                            continue
                        pend = outstanding[s]
                        for seq in [q for q in pend if q // 8 < len(bm)
                                    and bm[q // 8] & (0x80 >> (q % 8))]:
                            del pend[seq]
                            seen[(s, seq)] = now
            time.sleep(poll_s)

    pthread = threading.Thread(target=poll, name="bench-poller", daemon=True)
    client = MemoryClient(settings)
    settle(f"freshness {label}")
    sent: dict[tuple[str, int], float] = {}
    ingest_ms: list[float] = []
    roles = ("user", "assistant")
    behind = 0.0
    with CpuMonitor([server.process.pid] if server.process else []) as mon:
        for t in wthreads:
            t.start()
        pthread.start()
        client.ingest("fresh-warmup", "user", "warm-up turn")  # untracked session
        time.sleep(0.5)
        t0 = time.perf_counter()
        for i, (sid, text) in enumerate(plan):
            due = t0 + i / rate
            now = time.perf_counter()
            if due > now:
                time.sleep(due - now)
            else:
                behind = max(behind, now - due)
            ts = time.perf_counter()
            turn = client.ingest(sid, roles[i % 2], text)
            ingest_ms.append((time.perf_counter() - ts) * 1000)
            sent[(sid, turn.seq)] = ts
            # Registered after the reply: a bit set before that is seen on the next poll (a
            # bit stays set), so an early mark is over-, never under-estimated.
            with lock:
                outstanding.setdefault(sid, {})[turn.seq] = ts
        produce_s = time.perf_counter() - t0
        t_last = time.perf_counter()
        deadline = t_last + drain_timeout_s
        while time.perf_counter() < deadline:
            with lock:
                left = sum(len(d) for d in outstanding.values())
            if left == 0:
                break
            time.sleep(0.01)
        t_cut = time.perf_counter()
        stop_poll.set()
        pthread.join(timeout=5)
    window_backlog = (stage_backlog(pconn, Topology(keys).window)
                      if settings.embedding.window_mode == "refined" else None)
    for worker in workers:
        worker.stop()
    for t in wthreads:
        t.join(timeout=30)
    client.close()
    pconn.close()
    store.close()
    for c in conns:
        c.close()

    censored = [k for k in sent if k not in seen]
    polled = [(seen.get(k, t_cut) - sent[k]) * 1000 for k in sent]
    at_mark = [(marked[k] - sent[k]) * 1000 for k in sent if k in marked]
    # Lateness over time: a backlog that keeps growing shows as a rising series.
    per_window: list[float] = []
    keys_in_order = list(sent)
    win = max(1, int(rate * 5))
    for i in range(0, len(keys_in_order), win):
        chunk = sorted(polled[i:i + win])
        per_window.append(round(chunk[len(chunk) // 2], 1))
    out = {
        "label": label,
        "window_mode": settings.embedding.window_mode,
        "window_entries_refined": refined[0],
        "window_backlog_at_end": window_backlog,
        "rate_per_s": rate,
        "seconds": seconds,
        "turns": n,
        "produce_seconds": round(produce_s, 2),
        "producer_max_behind_ms": round(behind * 1000, 2),
        "workers": n_workers,
        "worker_batch_size": worker_batch,
        "embedding_batch_size": embedder.batch_size,
        "onnx_threads": getattr(embedder, "bench_threads", "default"),
        "block_ms": block_ms,
        "poll_interval_ms": poll_s * 1000,
        "polls": polls[0],
        "poller_cpu_cores": round(poll_cpu[0] / max(1e-9, t_cut - t0), 3),
        "drain_timeout_s": drain_timeout_s,
        "censored": len(censored),
        "drain_s": round(t_cut - t_last, 2),
        "ingest_ms": summarize(ingest_ms),
        "recallable_ms_polled": summarize(polled),
        "recallable_ms_at_mark_return": summarize(at_mark),
        "median_ms_per_5s_window": per_window,
        "worker_busy_fraction": round(busy[0] / n_workers / max(1e-9, t_cut - t0), 3),
        "worker_turns_per_busy_s": round(sum(sizes) / busy[0], 1) if busy[0] else None,
        "worker_batches": len(sizes),
        "worker_batch_mean": round(sum(sizes) / len(sizes), 2) if sizes else 0,
        "worker_batch_max": max(sizes) if sizes else 0,
        "machine": mon.result,
    }
    p = out["recallable_ms_polled"]
    m = out["recallable_ms_at_mark_return"]
    log(f"  ingest->recallable (polled bitmap): p50 {p['p50']:.1f} ms  p95 {p['p95']:.1f}"
        f"  p99 {p['p99']:.1f}  max {p['max']:.1f}   (censored: {len(censored)},"
        f" drain {out['drain_s']} s)")
    log(f"  ingest->mark_processed returned:     p50 {m['p50']:.1f} ms  p95 {m['p95']:.1f}"
        f"  p99 {m['p99']:.1f};  {out['worker_batches']} batches, mean size"
        f" {out['worker_batch_mean']}, max {out['worker_batch_max']}")
    log(f"  median latency per 5 s window (ms): {per_window}")
    log(f"  workers busy {out['worker_busy_fraction'] * 100:.0f}% of the time; while busy each"
        f" embedded {out['worker_turns_per_busy_s']} turns/s (offered: {rate:.0f}/s)")
    log(f"  machine: other procs {mon.result.get('foreign_cores', '?')} cores, this bench"
        f" {mon.result.get('own_cores', '?')} cores (of which the 1 ms poller"
        f" {out['poller_cpu_cores']})")
    return out


# -- 4. recall ------------------------------------------------------------------------------


class CachedEmbedder:
    """Documents: precomputed vectors looked up by text (fills a session without the model)."""

    def __init__(self, vectors: dict[str, np.ndarray], dim: int) -> None:
        self.vectors = vectors
        self.dim = dim
        self.name = "cached"

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.vectors[t] for t in texts]).astype(np.float32)

    def embed_query(self, text: str) -> np.ndarray:  # pragma: no cover - not used for fill
        raise NotImplementedError


def recall_corpus(
    base: list[str], vectors: dict[str, np.ndarray], n: int, rng: random.Random
) -> tuple[list[str], dict[str, np.ndarray]]:
    """n distinct turns: the LoCoMo turns, then copies with a suffix and a perturbed vector."""
    texts: list[str] = []
    out: dict[str, np.ndarray] = {}
    copy = 0
    while len(texts) < n:
        for t in base:
            if len(texts) >= n:
                break
            if copy == 0:
                text, vec = t, vectors[t]
            else:
                text = f"{t} (#{copy})"
                mix = vectors[t] + 0.5 * vectors[base[rng.randrange(len(base))]]
                vec = (mix / np.linalg.norm(mix)).astype(np.float32)
            texts.append(text)
            out[text] = vec
        copy += 1
    return texts, out


def bench_recall(
    server: RedisServer,
    tmp: Path,
    base_texts: list[str],
    vectors: dict[str, np.ndarray],
    questions: list[str],
    embedder: Any,
    sizes: list[int],
    calls: int,
    profile_dir: Path | None = None,
    experiment: bool = False,
) -> dict[str, Any]:
    prefix = "br"
    settings = make_settings(server.url, prefix, batch_size=256, block_ms=100)
    keys = Keys(prefix)
    rng = random.Random(7)
    store = EdgeVectorStore(tmp / "qdrant-recall", embedder.dim)
    conn = connect(settings.redis)
    # Recall embeds queries on the product's query model (HIVEMEM_EMBEDDING__QUERY_THREADS,
    # default one ONNX thread), exactly as MemoryClient builds it.
    from hivemem.providers.embedders import build_embedder

    query_embedder = build_embedder(
        EmbeddingSettings(model=MODEL, cache_dir=MODEL_CACHE), for_queries=True)
    client = MemoryClient(settings, redis_client=conn, vector_store=store,
                          embedder=query_embedder)
    roles = ("user", "assistant")
    out: dict[str, Any] = {"method": (
        "Sessions filled through the real path except the model: MemoryClient.ingest_many"
        " (batches of 500), then StreamWorker+EmbedHandler in burst mode (worker batch 256)"
        " with an embedder that returns precomputed vectors: real fastembed vectors of the"
        " LoCoMo turns from the embed phase; beyond the distinct LoCoMo turns, copies get"
        " ' (#k)' appended and vector normalize(v_i + 0.5 v_random). recall() itself uses the"
        " real FastEmbedEmbedder for the query (one ONNX thread, the default), embedded while"
        " the lexical searches and Redis reads run; queries are LoCoMo questions (cat 1-4),"
        " shuffled; the balanced preset (hybrid dense + BM25, facts, neighbours). All sessions"
        " live in the same Qdrant Edge shard (no HNSW/optimize). 'without the query"
        " embedding' subtracts the embedding's own time, which overlaps other work: a lower"
        " bound."),
        "sessions": {}}
    fill_embedder = None
    for n in sizes:
        sid = f"recall-{n}"
        texts, vecs = recall_corpus(base_texts, vectors, n, rng)
        fill_embedder = CachedEmbedder(vecs, embedder.dim)
        t0 = time.perf_counter()
        for start in range(0, n, 500):
            client.ingest_many(
                [{"session_id": sid, "role": roles[i % 2], "content": t}
                 for i, t in enumerate(texts[start:start + 500], start)]
            )
        t_ing = time.perf_counter() - t0
        wconn = connect(settings.redis)
        handler, _, _ = make_handler(fill_embedder, store, wconn, keys, settings)
        worker = StreamWorker(embed_kind(handler), StreamStore(wconn, keys),
                              settings.worker, consumer="bench-fill")
        t1 = time.perf_counter()
        report = worker.run(burst=True)
        t_fill = time.perf_counter() - t1
        wconn.close()
        assert report.handled == n, (report.handled, n)
        stats = client.get_session_stats(sid)
        assert stats.turns_processed == n, stats
        log(f"recall: session {sid} filled with {n} turns (ingest_many {t_ing:.1f} s,"
            f" worker with cached vectors {t_fill:.1f} s)")
        out["sessions"][str(n)] = {"fill_ingest_s": round(t_ing, 2),
                                   "fill_worker_s": round(t_fill, 2)}

    recaller = client._service.reads.recaller()
    timers = {
        "embed_query": Timed(recaller.embedder, "embed_query"),
        "search_turns": Timed(recaller.vectors, "search_turns"),
        "search_turns_lexical": Timed(recaller.vectors, "search_turns_lexical"),
        "search_facts": Timed(recaller.vectors, "search_facts"),
        "search_facts_lexical": Timed(recaller.vectors, "search_facts_lexical"),
        "get_turns": Timed(recaller.vectors, "get_turns"),
        "turns_by_seq": Timed(recaller.vectors, "turns_by_seq"),
        "recent_turns": Timed(recaller.state, "recent_turns"),
        "episode_progress": Timed(recaller.episodes, "progress"),
    }
    qs = questions[:]
    rng.shuffle(qs)
    for n in sizes:
        sid = f"recall-{n}"
        for i in range(20):  # warm-up
            client.recall(sid, qs[i % len(qs)])
        settle(f"recall {n}")
        with CpuMonitor([server.process.pid] if server.process else []) as mon:
            row, _ = time_recalls(client, sid, qs, calls, timers)
        row["machine"] = mon.result
        out["sessions"][str(n)].update(row)
        s, x = row["latency_ms"], row["latency_ms_excl_query_embedding"]
        log(f"  recall @ {n:>5} turns: p50 {s['p50']:.2f} ms  p95 {s['p95']:.2f}  p99"
            f" {s['p99']:.2f}  ({calls} calls, {row['mean_items']} items; other procs"
            f" {mon.result.get('foreign_cores', '?')} cores)")
        log(f"  {'':<20} without the query embedding: p50 {x['p50']:.2f} ms  p95 {x['p95']:.2f};"
            " mean ms: " + ", ".join(f"{k} {v:.2f}" for k, v in row["mean_breakdown_ms"].items()))
        if profile_dir is not None:
            profile(profile_dir / f"recall-{n}.prof",
                    lambda sid=sid: [client.recall(sid, qs[i % len(qs)]) for i in range(100)])

    if experiment:
        # The old query path, for comparison: the query embedded on a model with ONNX's
        # default thread pool (all cores), as before HIVEMEM_EMBEDDING__QUERY_THREADS=1.
        timers_all = dict(timers)
        timers_all["embed_query"] = Timed(embedder, "embed_query")
        own = recaller.embedder
        recaller.embedder = embedder
        exp: dict[str, Any] = {"sessions": {}}
        try:
            for n in sizes:
                sid = f"recall-{n}"
                for i in range(20):
                    client.recall(sid, qs[i % len(qs)])
                settle(f"recall query threads=all {n}")
                with CpuMonitor([server.process.pid] if server.process else []) as mon:
                    row, _ = time_recalls(client, sid, qs, calls, timers_all)
                row["machine"] = mon.result
                exp["sessions"][str(n)] = row
                s_ = row["latency_ms"]
                log(f"  EXPERIMENT query model with all-core ONNX threads @ {n:>5}: p50"
                    f" {s_['p50']:.2f} ms  p95 {s_['p95']:.2f} (other procs"
                    f" {mon.result.get('foreign_cores', '?')} cores)")
        finally:
            recaller.embedder = own
            del embedder.embed_query
        out["experiment_query_threads_all"] = exp
    del recaller.embedder.embed_query  # the embedder is shared: drop the bench wrapper
    client.close()  # closes the store and the connection
    return out


def time_recalls(
    client: MemoryClient, sid: str, qs: list[str], calls: int, timers: dict[str, Timed]
) -> tuple[dict[str, Any], list[Any]]:
    for t in timers.values():
        t.total, t.calls = 0.0, 0
    gc.collect()
    lat: list[float] = []
    lat_no_embed: list[float] = []
    items = 0
    last: list[Any] = []
    tq = timers["embed_query"]
    for i in range(calls):
        q = qs[(i + 20) % len(qs)]
        before = tq.total
        t0 = time.perf_counter_ns()
        last = client.recall(sid, q)
        ms = (time.perf_counter_ns() - t0) * NS
        lat.append(ms)
        lat_no_embed.append(ms - (tq.total - before) * 1000)
        items += len(last)
    total = sum(lat) / 1000
    parts = {k: t.total for k, t in timers.items()}
    parts["rest_scoring_dedup_pack"] = total - sum(parts.values())
    return {
        "calls": calls,
        "latency_ms": summarize(lat),
        "latency_ms_excl_query_embedding": summarize(lat_no_embed),
        "mean_items": round(items / calls, 1),
        "mean_breakdown_ms": {k: round(v / calls * 1000, 3) for k, v in parts.items()},
    }, last


def profile(path: Path, fn: Callable[[], Any], top: int = 25) -> None:
    """cProfile `fn`, save the stats, print the top functions by own time."""
    import cProfile
    import io
    import pstats

    path.parent.mkdir(parents=True, exist_ok=True)
    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    prof.dump_stats(str(path))
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(top)
    log(f"  profile saved to {path}; top {top} by own time:")
    print(buf.getvalue(), flush=True)


# -- main -----------------------------------------------------------------------------------


def verdict(ok: bool | None) -> str:
    return "-" if ok is None else ("PASS" if ok else "FAIL")


def _other(d: dict[str, Any] | None) -> float | None:
    """CPUs other processes used during a measurement (from its CpuMonitor)."""
    return None if not d else d.get("machine", {}).get("foreign_cores")


def summary_rows(res: dict[str, Any]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []

    def add(metric: str, value: float | None, unit: str, target: str = "",
            ok: bool | None = None, other: float | None = None) -> None:
        rows.append({"metric": metric, "value": value, "unit": unit, "target": target,
                     "result": verdict(ok), "other_procs_cores": other})

    t_ing, t_emb = TARGETS["ingest_p99_ms"], TARGETS["embed_ratio"]
    t_fresh, t_rec = TARGETS["fresh_p95_ms"], TARGETS["recall_p95_ms"]
    if "ingest" in res:
        i = res["ingest"]
        b = i["baseline"]
        o = _other(i)
        add("ingest() p50", i["single"]["p50"], "ms", other=o)
        add("ingest() p99", i["single"]["p99"], "ms", f"< {t_ing}", i["single"]["p99"] < t_ing, o)
        add("  bare XADD p50", b["xadd_ms"]["p50"], "ms", other=o)
        add("  bare XADD p99", b["xadd_ms"]["p99"], "ms", other=o)
        add("ingest_many (batches of 100)", i["many"]["turns_per_s"], "turns/s", other=o)
        add("  pipelined bare XADD (x100)", b["xadd_pipelined_per_s"], "msg/s", other=o)
        add("  ingest_many / pipelined XADD", i["ratios"]["ingest_many_over_xadd_pipelined"], "x")
    if "embed" in res:
        e = res["embed"]
        r = e["raw"]
        bs = e["embedding_batch_size"]
        add(f"raw fastembed sorted (batch {bs})", r["sorted_global"]["turns_per_s"], "turns/s",
            other=_other(r["sorted_global"]))
        add(f"raw sorted within each {e['worker_batch_size']}",
            r["sorted_per_worker_batch"]["turns_per_s"], "turns/s",
            other=_other(r["sorted_per_worker_batch"]))
        add("raw fastembed unsorted", r["unsorted"]["turns_per_s"], "turns/s",
            other=_other(r["unsorted"]))
        add(f"embed pipeline, defaults ({e['worker_batch_size']}/{bs})",
            e["pipeline"]["turns_per_s"], "turns/s",
            other=_other(e["pipeline"]))
        add("pipeline / raw sorted (defaults)", e["ratio_vs_raw_sorted_global"], "x",
            f">= {t_emb}", e["ratio_vs_raw_sorted_global"] >= t_emb)
        add("  same ratio by CPU-seconds per turn", e["cpu_ratio_vs_raw_sorted_global"], "x",
            f">= {t_emb}", e["cpu_ratio_vs_raw_sorted_global"] >= t_emb)
        add(f"  pipeline / raw sorted-within-{e['worker_batch_size']}",
            e["ratio_vs_raw_sorted_per_worker_batch"], "x")
        for name, x in e.get("experiments", {}).items():
            add(f"  exp {name}", x["turns_per_s"], "turns/s", other=_other(x))
            add(f"  exp {name} / raw sorted", x["ratio_vs_raw_sorted_same_batch"], "x",
                f">= {t_emb}", x["ratio_vs_raw_sorted_same_batch"] >= t_emb)
    for key, label in (("freshness", "freshness, workers=cores x 1 thr"),
                       ("freshness_experiment_1worker", "  exp freshness, 1 worker all-core")):
        if key in res:
            f = res[key]
            p = f["recallable_ms_polled"]
            add(f"{label} p50", p["p50"], "ms", other=_other(f))
            add(f"{label} p95", p["p95"], "ms", f"< {t_fresh:.0f}",
                p["p95"] < t_fresh and f["censored"] <= 0.05 * f["turns"], _other(f))
    if "recall" in res:
        for n, s in res["recall"]["sessions"].items():
            add(f"recall @{n} p50", s["latency_ms"]["p50"], "ms", other=_other(s))
            add(f"recall @{n} p95", s["latency_ms"]["p95"], "ms", f"< {t_rec:.0f}",
                s["latency_ms"]["p95"] < t_rec, _other(s))
            add(f"  recall @{n} p95 w/o query embed", s["latency_ms_excl_query_embedding"]["p95"],
                "ms", other=_other(s))
        for key, label in (("experiment_query_threads_all", "query on all-core ONNX"),):
            for n, s in res["recall"].get(key, {}).get("sessions", {}).items():
                add(f"  exp {label} @{n} p95", s["latency_ms"]["p95"], "ms", f"< {t_rec:.0f}",
                    s["latency_ms"]["p95"] < t_rec, _other(s))
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    print()
    print(f"{'metric':<42} {'value':>10} {'unit':<8} {'target':<8} {'result':<6} {'other procs':>11}")
    print("-" * 90)
    for r in rows:
        v = r["value"]
        vs = "" if v is None else (f"{v:.3f}" if isinstance(v, float) and v < 10 else f"{v:.1f}")
        o = r["other_procs_cores"]
        os_ = "" if o is None else f"{o:.2f} cpu"
        print(f"{r['metric']:<42} {vs:>10} {r['unit']:<8} {r['target']:<8} {r['result']:<6}"
              f" {os_:>11}")
    print("(other procs: CPUs used by other processes on this machine during the measurement;"
          " above ~0.3 the number is contended)")
    print()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="short smoke run (seconds)")
    ap.add_argument("--sections", default="ingest,embed,freshness,recall",
                    help="comma list of: ingest, embed, freshness, recall")
    ap.add_argument("--out", type=Path, default=None, help="JSON output path")
    ap.add_argument("--fresh-rate", type=float, default=50.0)
    ap.add_argument("--fresh-seconds", type=float, default=None)
    ap.add_argument("--fresh-block-ms", type=int, default=100)
    ap.add_argument("--fresh-window-modes", default="refined,mean",
                    help="window modes for the freshness runs, the first reported as"
                         " `freshness` (refined: with a window-stage thread)")
    ap.add_argument("--profile", type=Path, default=None, metavar="DIR",
                    help="also cProfile 100 recall() calls per session size into DIR")
    ap.add_argument("--max-wait", type=float, default=None, metavar="S",
                    help="before each measurement wait up to S seconds for other processes on"
                         " the machine to go quiet (default 45; 0 in --quick)")
    ap.add_argument("--wait-budget", type=float, default=240.0, metavar="S",
                    help="total seconds all those waits may take (default 240)")
    ap.add_argument("--no-experiments", action="store_true",
                    help="skip the settings experiment in the embed section")
    args = ap.parse_args()
    sections = {s.strip() for s in args.sections.split(",") if s.strip()}
    q = args.quick
    out_path = args.out or (RESULTS / ("pipeline-quick.json" if q else "pipeline.json"))
    configure_logging("warning", json=False)
    SETTLE["max_wait_s"] = args.max_wait if args.max_wait is not None else (0.0 if q else 45.0)
    SETTLE["budget_s"] = args.wait_budget

    started = time.time()
    res: dict[str, Any] = {
        "meta": {
            "started_utc": datetime.now(UTC).isoformat(timespec="seconds"),
            "quick": q,
            "sections": sorted(sections),
            "machine": machine_facts(),
            "model": MODEL,
            "model_cache": str(MODEL_CACHE),
            "targets": TARGETS,
        }
    }
    m = res["meta"]["machine"]
    log(f"machine: {m['nproc']} cpus ({m['cpu']}), python {m['python']}, redis-server"
        f" {m['redis_server']}, fastembed {m['fastembed']}, qdrant-edge-py {m['qdrant_edge_py']},"
        f" onnxruntime {m['onnxruntime']}")

    convs = locomo_conversations()
    all_turns = interleaved_turns(convs)
    questions = [qq for c in convs for qq in locomo_questions(c)]
    texts = [t for _, t in all_turns]

    tmp = Path(tempfile.mkdtemp(prefix="hivemem-bench-"))
    server = RedisServer(tmp)
    server.start()
    admin = server.client()
    log(f"redis-server on {server.url} (appendonly yes, appendfsync everysec)")
    try:
        if "ingest" in sections:
            settle("ingest")
            with CpuMonitor([server.process.pid] if server.process else []) as mon:
                res["ingest"] = bench_ingest(
                    server, texts, 500 if q else 5000, 2000 if q else 20000)
            res["ingest"]["machine"] = mon.result
            admin.flushall()

        embedder = raw_model = None
        vectors: dict[str, np.ndarray] = {}
        if sections & {"embed", "freshness", "recall"}:
            from hivemem.providers.embedders import FastEmbedEmbedder

            t0 = time.perf_counter()
            embedder = FastEmbedEmbedder(
                EmbeddingSettings(model=MODEL, cache_dir=MODEL_CACHE))
            load_s = time.perf_counter() - t0
            log(f"model: FastEmbedEmbedder loaded offline in {load_s:.1f} s (dim {embedder.dim})")
            res["meta"]["model_load_s"] = round(load_s, 2)

        embed_turns = all_turns[:100] if q else all_turns[:2000]
        if sections & {"embed", "recall"}:
            from fastembed import TextEmbedding

            raw_model = TextEmbedding(MODEL, cache_dir=str(MODEL_CACHE))
            if "embed" in sections:
                res["embed"], vectors = bench_embed(
                    server, tmp, embed_turns, embedder, raw_model,
                    experiments=not (q or args.no_experiments))
                admin.flushall()
            else:
                uniq = list(dict.fromkeys(t for _, t in embed_turns))
                vecs = np.asarray(list(raw_model.embed(uniq, batch_size=64)), dtype=np.float32)
                vectors = dict(zip(uniq, vecs, strict=True))

        if "freshness" in sections:
            secs = args.fresh_seconds or (2.0 if q else 30.0)
            wb_default = WorkerSettings().batch_size
            eb_default = embedder.batch_size
            common_args = dict(rate=args.fresh_rate, seconds=secs, block_ms=args.fresh_block_ms,
                               poll_s=0.001, drain_timeout_s=5.0 if q else 20.0)
            # The documented deployment: one embed worker per core, one ONNX thread each
            # (embedded mode's default; `hivemem worker embed` x cores with
            # HIVEMEM_EMBEDDING__THREADS=1): small batches run side by side instead of
            # fighting over one thread pool.
            cores = len(os.sched_getaffinity(0))
            ones = []
            for _ in range(cores):
                e1 = FastEmbedEmbedder(EmbeddingSettings(
                    model=MODEL, cache_dir=MODEL_CACHE, batch_size=eb_default, threads=1))
                e1.bench_threads = 1
                ones.append(e1)
            window_one = FastEmbedEmbedder(EmbeddingSettings(
                model=MODEL, cache_dir=MODEL_CACHE, batch_size=eb_default, threads=1))
            # The default (refined windows: a window-stage thread beside the embed workers)
            # and the mean-only mode as its baseline, one after the other.
            for mode in args.fresh_window_modes.split(","):
                key = "freshness" if mode == args.fresh_window_modes.split(",")[0] else (
                    f"freshness_window_{mode}")
                res[key] = bench_freshness(
                    server, tmp, all_turns, ones[0], prefix=f"bf{mode[0]}",
                    label=f"deployment default: {cores} workers x 1 ONNX thread, batches"
                          f" {wb_default}/{eb_default}, window_mode {mode}",
                    worker_batch=wb_default, embedders=ones, window_mode=mode,
                    window_embedder=window_one, **common_args)
                admin.flushall()
            del ones
            if not (q or args.no_experiments):
                # The old single-worker setup: one worker, ONNX on all cores.
                res["freshness_experiment_1worker"] = bench_freshness(
                    server, tmp, all_turns, embedder, prefix="bf1",
                    label=f"EXPERIMENT 1 worker, ONNX all-core threads, batches {wb_default}/"
                          f"{eb_default}",
                    worker_batch=wb_default, **common_args)
                admin.flushall()

        if "recall" in sections:
            base = list(dict.fromkeys(t for _, t in embed_turns))
            res["recall"] = bench_recall(
                server, tmp, base, vectors, questions, embedder,
                sizes=[100, 1000] if q else [1000, 10000], calls=20 if q else 250,
                profile_dir=args.profile, experiment=not args.no_experiments)
    finally:
        admin.close()
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    res["meta"]["duration_s"] = round(time.time() - started, 1)
    res["meta"]["quiet_waits"] = SETTLE["waits"]
    res["summary"] = summary_rows(res)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(res, indent=2, default=str) + "\n", encoding="utf-8")
    print_table(res["summary"])
    log(f"done in {res['meta']['duration_s']:.0f} s; results in {out_path}")
    failed = [r["metric"] for r in res["summary"] if r["result"] == "FAIL"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
