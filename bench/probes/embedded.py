"""Embedded mode on its real child Redis server next to the old fakeredis mode, same run.

For each mode: open the folder (timed), then N single `ingest()` calls of LoCoMo turns
while the embed threads work (each call's latency), drain, then recall p95 over LoCoMo
questions, and close (timed). In the child-server mode every ingest is interleaved with a
bare XADD of the same fields on the same unix socket: the baseline, under the same load.
(fakeredis gets its own bare-XADD baseline on its in-process server the same way.)

    nice python bench/probes/embedded.py [--turns 1000] [--recalls 100]

JSON in bench/results/embedded.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: harness
from typing import Any

from harness import (
    RESULTS,
    locomo_conversations,
    locomo_questions,
    locomo_turns,
    machine_facts,
    offline_model_env,
    summarize,
)

offline_model_env()

import fakeredis  # noqa: E402

from hivemem import MemoryClient  # noqa: E402
from hivemem.config import Settings  # noqa: E402
from hivemem.runtime.embedded import EmbeddedRuntime  # noqa: E402

SESSION = "bench"


def _fields(text: str, i: int) -> dict[str, str]:
    # About what a turn entry carries (ids, role, content, timestamp, seq).
    return {"turn_id": f"{i:032x}", "session_id": SESSION, "role": "user", "content": text,
            "timestamp": "2026-12-01T00:00:00+00:00", "seq": str(i), "namespace": "default"}


def run_mode(mode: str, turns: list[str], questions: list[str], recalls: int) -> dict[str, Any]:
    settings = Settings()
    folder = Path(tempfile.mkdtemp(prefix=f"hm-bench-{mode}-"))
    started = time.perf_counter()
    if mode == "child":
        runtime = EmbeddedRuntime(folder, settings, serve_guests=False)
    else:
        server = fakeredis.FakeServer()
        runtime = EmbeddedRuntime(folder, settings, serve_guests=False,
                                  redis_connector=lambda: fakeredis.FakeRedis(server=server))
    client = MemoryClient(runtime.wiring.settings, redis_client=runtime.redis(),
                          vector_store=runtime.vectors, embedder=runtime.query_embedder,
                          runtime=runtime)
    open_ms = (time.perf_counter() - started) * 1000
    bare = runtime.redis()
    ingest_ms: list[float] = []
    xadd_ms: list[float] = []
    for i, text in enumerate(turns):
        t0 = time.perf_counter()
        bare.xadd("bench:bare", _fields(text, i))
        t1 = time.perf_counter()
        client.ingest(SESSION, "user", text)
        t2 = time.perf_counter()
        xadd_ms.append((t1 - t0) * 1000)
        ingest_ms.append((t2 - t1) * 1000)
    t0 = time.perf_counter()
    client.wait_until_processed(SESSION, timeout=600)
    drain_s = time.perf_counter() - t0
    recall_ms: list[float] = []
    for q in (questions * (recalls // max(1, len(questions)) + 1))[:recalls]:
        t0 = time.perf_counter()
        client.recall(SESSION, q)
        recall_ms.append((time.perf_counter() - t0) * 1000)
    t0 = time.perf_counter()
    client.close()
    close_ms = (time.perf_counter() - t0) * 1000
    return {
        "mode": mode,
        "redis": "valkey-server child process (unix socket, AOF everysec)" if mode == "child"
        else "fakeredis in-process (no persistence)",
        "open_ms": round(open_ms, 1),
        "close_ms": round(close_ms, 1),
        "ingest_ms": summarize(ingest_ms),
        "bare_xadd_ms": summarize(xadd_ms),
        "embed_drain_s_after_ingest": round(drain_s, 2),
        "recall_ms": summarize(recall_ms),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--recalls", type=int, default=100)
    args = parser.parse_args()
    conv = locomo_conversations()[0]
    turns = (locomo_turns(conv) * 10)[: args.turns]
    questions = locomo_questions(conv)
    runs = []
    for mode in ("child", "fakeredis"):
        print(f"running {mode} ...", file=sys.stderr, flush=True)
        runs.append(run_mode(mode, turns, questions, args.recalls))
    child, fake = runs
    ratios = {
        "child_ingest_p99_over_bare_xadd_p99": round(
            child["ingest_ms"]["p99"] / child["bare_xadd_ms"]["p99"], 2),
        "child_ingest_p50_over_bare_xadd_p50": round(
            child["ingest_ms"]["p50"] / child["bare_xadd_ms"]["p50"], 2),
        "child_over_fakeredis_ingest_p50": round(
            child["ingest_ms"]["p50"] / fake["ingest_ms"]["p50"], 2),
        "child_over_fakeredis_ingest_p99": round(
            child["ingest_ms"]["p99"] / fake["ingest_ms"]["p99"], 2),
        "child_over_fakeredis_recall_p95": round(
            child["recall_ms"]["p95"] / fake["recall_ms"]["p95"], 2),
    }
    out = {"benchmark": "embedded", "turns": len(turns), "recalls": args.recalls,
           "embedder": "fastembed all-MiniLM-L6-v2 (offline cache)", "runs": runs,
           "ratios": ratios, "machine": machine_facts()}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "embedded.json").write_text(json.dumps(out, indent=2) + "\n")
    for run in runs:
        print(f"{run['mode']:>9}: ingest p50 {run['ingest_ms']['p50']:.3f} ms"
              f" p99 {run['ingest_ms']['p99']:.3f} ms | bare XADD p50"
              f" {run['bare_xadd_ms']['p50']:.3f} p99 {run['bare_xadd_ms']['p99']:.3f} ms |"
              f" recall p95 {run['recall_ms']['p95']:.1f} ms | open {run['open_ms']:.0f} ms"
              f" close {run['close_ms']:.0f} ms")
    print(json.dumps(ratios, indent=2))


if __name__ == "__main__":
    main()
