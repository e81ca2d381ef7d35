#!/usr/bin/env python
"""Memory lifecycle: compaction cost at 10k facts, recall quality before/after compaction on
LoCoMo dev, export/import throughput at 100k records.

    /work/venv/bin/python bench/probes/lifecycle.py            # everything (LoCoMo needs the model)
    /work/venv/bin/python bench/probes/lifecycle.py --quick    # one LoCoMo conversation, 20k records
    /work/venv/bin/python bench/probes/lifecycle.py --skip-locomo

1. Compaction, one session with 10,000 facts (384-d vectors; 10% are near-duplicates of
   another fact, ages spread over 120 days, kinds mixed, 1-3 source turns each): the pure plan
   (`plan_compaction`) and a full `compact()` on an embedded store (Qdrant Edge on a temp
   folder, Redis: a redis-server of its own when installed, else fakeredis): time, and peak
   Python memory with tracemalloc in a second, separate run (tracemalloc slows Python down).
2. Recall quality (LoCoMo dev, the 5 conversations, questions of categories 1-4, the same data
   and scoring as bench/suites/locomo.py: `load_dataset`, `item_dia_ids`, `recall_at_ks`): the
   embedded pipeline with the real model and the heuristic reflector, evidence recall@k of
   `recall(limit=20)` before compaction, after compacting every session with the default
   policy, and after an aggressive policy (cap = a quarter of each session's active facts).
   The store is backed up before compacting and restored between the two policies (so the
   restore path runs on real data too). Compaction must not lower R@10.
3. Export/import: 100,000 records (10 sessions x 8,000 turns + 2,000 facts, hashing vectors
   of 384 dims, so the time is the format and the stores, not a model): export with vectors,
   then import (append) into an empty store; records/s and the file size.
Results: printed, and saved to bench/results/lifecycle.json (--quick: lifecycle-quick.json).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: harness, suites

from harness import RESULTS, machine_facts, offline_model_env

DIM = 384


# -- 1. compaction at 10k facts ----------------------------------------------------------------


def synthetic_facts(n: int, seed: int = 0) -> tuple[list[Any], np.ndarray, datetime]:
    from hivemem.domain.fact import Fact, FactKind

    rng = np.random.default_rng(seed)
    clock = datetime(2026, 6, 1, tzinfo=UTC)
    base = rng.normal(size=(n, DIM)).astype(np.float32)
    dup_of = rng.integers(0, n, size=n)
    is_dup = rng.random(n) < 0.10
    vectors = base.copy()
    noise = rng.normal(scale=0.08, size=(n, DIM)).astype(np.float32)
    vectors[is_dup] = base[dup_of[is_dup]] + noise[is_dup] * np.linalg.norm(base[0]) / 8
    kinds = list(FactKind)
    in_pair = set(np.flatnonzero(is_dup).tolist()) | set(dup_of[is_dup].tolist())
    facts = []
    for i in range(n):
        at = clock - timedelta(days=float(rng.uniform(0, 120)))
        topic = int(dup_of[i]) if is_dup[i] else i
        facts.append(Fact(
            fact_id=f"{i:032x}", session_id="bench", content=f"fact number {i} about topic"
            f" {topic}", kind=FactKind.FACT if i in in_pair else kinds[int(rng.integers(0, 6))],
            subject=f"topic {i % 500}", confidence=float(rng.uniform(0.4, 1.0)),
            source_turn_ids=[f"t{i}-{k}" for k in range(int(rng.integers(1, 4)))],
            created_at=at, valid_from=at))
    return facts, vectors, clock


def peak_mb(fn: Callable[[], Any]) -> float:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 1e6
    finally:
        tracemalloc.stop()


def open_redis(tmp: Path) -> tuple[Any, str, Any]:
    from hivemem.testing import RedisServer, connect_fake, fake_server

    if RedisServer.available():
        server = RedisServer(tmp / "redis", appendonly=False)
        (tmp / "redis").mkdir()
        server.start()
        return server.client(), "redis-server", server
    return connect_fake(fake_server()), "fakeredis", None


def bench_compaction(n: int, log: Callable[[str], None]) -> dict[str, Any]:
    from hivemem.config import CompactionPolicy, Settings
    from hivemem.domain.compaction import plan_compaction
    from hivemem.pipeline.topology import Keys
    from hivemem.store.vectors.edge import EdgeVectorStore
    from hivemem.workers.compact import Compactor

    facts, vectors, clock = synthetic_facts(n)
    policy = CompactionPolicy(max_active_facts=5000)
    out: dict[str, Any] = {"facts": n, "policy": policy.model_dump(mode="json")}
    t0 = time.perf_counter()
    plan = plan_compaction(facts, vectors, session_id="bench", clock=clock, policy=policy)
    out["plan_s"] = round(time.perf_counter() - t0, 3)
    out["plan_peak_mb"] = round(peak_mb(lambda: plan_compaction(
        facts, vectors, session_id="bench", clock=clock, policy=policy)), 1)
    out["diff"] = plan.diff.summary()
    log(f"  plan of {n} facts: {out['plan_s']:.2f} s, peak {out['plan_peak_mb']:.0f} MB,"
        f" {out['diff']}")

    def fresh_store(tmp: Path) -> tuple[Compactor, Any, Any]:
        redis_client, kind, server = open_redis(tmp)
        out["redis"] = kind
        keys = Keys("bench")
        store = EdgeVectorStore(tmp / "qdrant", DIM)
        store.upsert_facts(facts, vectors)
        redis_client.hset(keys.session_meta("bench"), "last_ts", clock.isoformat())
        settings = Settings.model_validate({"redis": {"key_prefix": "bench"}})
        return Compactor(redis_client, keys, store, settings), store, server

    for label in ("timed", "traced"):
        tmp = Path(tempfile.mkdtemp(prefix="hivemem-compact-"))
        compactor, store, server = fresh_store(tmp)
        try:
            if label == "timed":
                t0 = time.perf_counter()
                compactor.load("bench")  # baseline: only reading the session's facts
                out["load_s"] = round(time.perf_counter() - t0, 3)
                t0 = time.perf_counter()
                diff = compactor.compact("bench", policy)
                out["compact_s"] = round(time.perf_counter() - t0, 3)
                out["compact_changes"] = diff.changes
                t0 = time.perf_counter()
                again = compactor.preview("bench", policy)
                out["preview_after_s"] = round(time.perf_counter() - t0, 3)
                out["changes_after"] = again.changes
            else:
                out["compact_peak_mb"] = round(peak_mb(
                    lambda c=compactor: c.compact("bench", policy)), 1)
        finally:
            store.close()
            if server is not None:
                server.stop()
            shutil.rmtree(tmp, ignore_errors=True)
    log(f"  baseline, reading the 10k facts with their vectors: {out['load_s']:.2f} s")
    log(f"  compact() on the embedded store ({out['redis']}): {out['compact_s']:.2f} s,"
        f" peak {out['compact_peak_mb']:.0f} MB, {out['compact_changes']} changes;"
        f" a second run finds {out['changes_after']}")
    return out


# -- 2. LoCoMo before / after ---------------------------------------------------------------


def bench_locomo(only: list[str] | None, log: Callable[[str], None]) -> dict[str, Any]:
    from suites.locomo import _AGENT_ID, KS, item_dia_ids, load_dataset, recall_at_ks

    from hivemem import MemoryClient
    from hivemem.config import Settings

    offline_model_env()
    convs, _notes = load_dataset(only)
    tmp = Path(tempfile.mkdtemp(prefix="hivemem-lifecycle-"))
    result: dict[str, Any] = {"conversations": [c["name"] for c in convs], "runs": {}}
    try:
        client = MemoryClient.local(tmp / "memory", Settings())
        try:
            t0 = time.perf_counter()
            for conv in convs:
                session = f"locomo-{conv['name']}"
                client.ingest_many([{
                    "session_id": session, "role": t["role"], "content": t["content"],
                    "agent_id": t["speaker"] if _AGENT_ID.match(t["speaker"]) else None,
                    "timestamp": datetime.fromisoformat(t["timestamp"]),
                    "turn_id": t["dia_id"]} for t in conv["turns"]])
                client.wait_until_processed(session, timeout=1200, stage="boundary")
                client.wait_until_reflected(session, timeout=900)
            result["ingest_s"] = round(time.perf_counter() - t0, 1)
            log(f"  ingested {sum(len(c['turns']) for c in convs)} turns in"
                f" {result['ingest_s']:.0f} s")

            per_question: dict[str, dict[str, Any]] = {}

            def score(label: str) -> dict[str, Any]:
                rows: list[list[float]] = []
                for conv in convs:
                    session = f"locomo-{conv['name']}"
                    for q in conv["questions"]:
                        items = client.recall(session, q["question"], 1_000_000, limit=max(KS))
                        rows.append(recall_at_ks(q["evidence"],
                                                 [item_dia_ids(i) for i in items]))
                        per_question.setdefault(q["qid"], {"question": q["question"],
                                                           "evidence": q["evidence"]})[label] = {
                            "r10": rows[-1][KS.index(10)],
                            "top10": [f"{i.source_type}:{','.join(item_dia_ids(i))}"
                                      f" {i.content[:70]}" for i in items[:10]]}
                facts = {f"locomo-{c['name']}": len(client.facts(f"locomo-{c['name']}"))
                         for c in convs}
                means = {f"R@{k}": round(statistics.fmean(r[i] for r in rows), 4)
                         for i, k in enumerate(KS)}
                log(f"  {label:<22} " + "  ".join(f"{k} {v:.3f}" for k, v in means.items())
                    + f"  (active facts {sum(facts.values())})")
                return {**means, "questions": len(rows), "active_facts": facts}

            result["runs"]["before"] = score("before compaction")
            backup = tmp / "backup.jsonl.gz"
            t0 = time.perf_counter()
            summary = client.admin.backup(backup)
            result["backup"] = {"s": round(time.perf_counter() - t0, 2),
                                "bytes": summary.bytes, "counts": summary.counts}
            for name in ("default", "aggressive"):
                if name == "aggressive":
                    t0 = time.perf_counter()
                    client.admin.restore(backup)
                    result["restore_s"] = round(time.perf_counter() - t0, 2)
                diffs = {}
                for conv in convs:
                    session = f"locomo-{conv['name']}"
                    policy = None
                    if name == "aggressive":
                        active = len(client.facts(session))
                        policy = Settings().compaction.policy().model_copy(
                            update={"max_active_facts": max(1, active // 4)})
                    diffs[session] = client.admin.compact(session, policy=policy).summary()
                result["runs"][name] = {**score(f"after {name} compaction"), "diffs": diffs}
            # Every question whose R@10 moved, with the top 10 before and after.
            result["changed_questions"] = {
                qid: row for qid, row in per_question.items()
                if len({round(v["r10"], 6) for k, v in row.items()
                        if isinstance(v, dict)}) > 1}
        finally:
            client.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return result


# -- 3. export / import throughput ------------------------------------------------------------


def bench_transfer(records: int, log: Callable[[str], None]) -> dict[str, Any]:
    from hivemem.config import Settings
    from hivemem.domain.fact import Fact
    from hivemem.domain.models import Role, Turn
    from hivemem.providers.embedders import HashingEmbedder
    from hivemem.runtime.wiring import Wiring
    from hivemem.store.vectors.base import FACTS, TURNS
    from hivemem.store.vectors.edge import EdgeVectorStore
    from hivemem.transfer.exporter import export_to
    from hivemem.transfer.importer import import_from
    from hivemem.transfer.stores import Stores

    sessions = 10
    per_session = records // sessions
    n_turns, n_facts = per_session * 4 // 5, per_session // 5
    embedder = HashingEmbedder(DIM)
    tmp = Path(tempfile.mkdtemp(prefix="hivemem-transfer-"))
    out: dict[str, Any] = {"records": sessions * (n_turns + n_facts), "sessions": sessions}
    try:
        redis_client, kind, server = open_redis(tmp)
        out["redis"] = kind
        def stores(prefix: str) -> Stores:
            settings = Settings.model_validate({"redis": {"key_prefix": prefix}})
            return Wiring(settings, redis=redis_client, embedder=embedder,
                          vectors=EdgeVectorStore(tmp / prefix, DIM)).stores()

        source, target = stores("src"), stores("dst")
        state = source.state
        upsert_s = 0.0
        t0 = time.perf_counter()
        base = datetime(2026, 1, 1, tzinfo=UTC)
        for s in range(sessions):
            sid = f"bench-{s}"
            turns = [Turn(turn_id=f"t{i}", session_id=sid, role=Role.USER,
                          content=f"turn {i} of session {s}: some words about item {i % 97}",
                          timestamp=base + timedelta(seconds=i), seq=i + 1, token_count=12)
                     for i in range(n_turns)]
            for start in range(0, n_turns, 2000):
                chunk = turns[start:start + 2000]
                chunk_vectors = embedder.embed_documents([t.content for t in chunk])
                t1 = time.perf_counter()
                source.vectors.upsert_turns(chunk, chunk_vectors)
                upsert_s += time.perf_counter() - t1
            state.restore_session(sid, turns)
            facts = [Fact(fact_id=f"{s:04d}{i:028x}", session_id=sid,
                          content=f"fact {i} of session {s}", source_turn_ids=[f"t{i}"],
                          created_at=base, valid_from=base) for i in range(n_facts)]
            fact_vectors = embedder.embed_documents([f.content for f in facts])
            t1 = time.perf_counter()
            source.vectors.upsert_facts(facts, fact_vectors)
            upsert_s += time.perf_counter() - t1
        out["build_s"] = round(time.perf_counter() - t0, 1)
        # Baselines: the raw store operations an export and an import cannot avoid.
        t0 = time.perf_counter()
        scrolled = sum(1 for name in (TURNS, FACTS)
                       for _ in source.vectors.scroll(name, None, with_vectors=True))
        out["baseline_scroll_records_per_s"] = round(scrolled / (time.perf_counter() - t0))
        out["baseline_upsert_records_per_s"] = round(out["records"] / upsert_s)
        path = tmp / "export.jsonl"
        t0 = time.perf_counter()
        summary = export_to(source, path, vectors=True)
        export_s = time.perf_counter() - t0
        total = sum(summary.counts.values())
        t0 = time.perf_counter()
        imported = import_from(target, path, "append")
        import_s = time.perf_counter() - t0
        out.update({
            "exported_records": total, "export_s": round(export_s, 2),
            "export_records_per_s": round(total / export_s),
            "file_mb": round(summary.bytes / 1e6, 1),
            "import_s": round(import_s, 2),
            "import_records_per_s": round(total / import_s),
            "imported": imported.written,
        })
        log(f"  baselines: raw scroll with vectors {out['baseline_scroll_records_per_s']}/s,"
            f" raw upsert (no Redis, no format) {out['baseline_upsert_records_per_s']}/s")
        log(f"  {total} records ({kind}): export {export_s:.1f} s"
            f" ({out['export_records_per_s']}/s, {out['file_mb']} MB with vectors),"
            f" import {import_s:.1f} s ({out['import_records_per_s']}/s)")
        source.vectors.close()
        target.vectors.close()
        if server is not None:
            server.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--skip-locomo", action="store_true")
    parser.add_argument("--reuse-locomo", action="store_true",
                        help="Keep the LoCoMo section of the saved results (rerun the rest).")
    parser.add_argument("--only", choices=["compaction", "transfer", "locomo"], default=None,
                        help="Run one part; the saved results keep the others.")
    args = parser.parse_args()
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))
    log = print
    result: dict[str, Any] = {"machine": machine_facts(),
                              "started": datetime.now(UTC).isoformat(timespec="seconds")}
    name = "lifecycle-quick.json" if args.quick else "lifecycle.json"
    saved = json.loads((RESULTS / name).read_text()) if (RESULTS / name).exists() else {}
    if args.only in (None, "compaction"):
        log("compaction, one session:")
        result["compaction"] = bench_compaction(10_000, log)
    else:
        result["compaction"] = saved["compaction"]
    if args.only in (None, "transfer"):
        log("export / import:")
        result["transfer"] = bench_transfer(20_000 if args.quick else 100_000, log)
    else:
        result["transfer"] = saved["transfer"]
    if args.reuse_locomo or (args.only not in (None, "locomo")):
        result["locomo"] = saved.get("locomo", {})
    elif not args.skip_locomo:
        log("LoCoMo evidence recall before / after compaction:")
        result["locomo"] = bench_locomo(["conv-26"] if args.quick else None, log)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / name).write_text(json.dumps(result, indent=2) + "\n")
    print_table(result)
    log(f"saved bench/results/{name}")


def print_table(result: dict[str, Any]) -> None:
    c, t = result["compaction"], result["transfer"]
    rows = [
        ("baseline: read 10k facts + vectors", f"{c['load_s']:.2f} s"),
        ("plan_compaction, 10k facts", f"{c['plan_s']:.2f} s, peak {c['plan_peak_mb']:.0f} MB"),
        (f"compact(), 10k facts ({c['redis']})",
         f"{c['compact_s']:.2f} s, peak {c['compact_peak_mb']:.0f} MB"),
        ("  diff", ", ".join(f"{k} {v}" for k, v in c["diff"].items())),
        (f"export {t['exported_records']} records", f"{t['export_records_per_s']:,} records/s"
         f" ({t['file_mb']} MB)"),
        (f"import {t['exported_records']} records", f"{t['import_records_per_s']:,} records/s"),
        ("baseline: raw scroll / raw upsert", f"{t['baseline_scroll_records_per_s']:,} /"
         f" {t['baseline_upsert_records_per_s']:,} records/s"),
    ]
    for name, run in result.get("locomo", {}).get("runs", {}).items():
        rows.append((f"LoCoMo {name}", f"R@1 {run['R@1']:.3f}  R@5 {run['R@5']:.3f}  R@10"
                     f" {run['R@10']:.3f}  R@20 {run['R@20']:.3f}  facts"
                     f" {sum(run['active_facts'].values())}"))
    width = max(len(r[0]) for r in rows)
    print()
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


if __name__ == "__main__":
    main()
