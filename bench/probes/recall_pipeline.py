#!/usr/bin/env python
"""Recall against the bare search on stores filled through the real pipeline (internals).

    python bench/probes/recall_pipeline.py --rows c a          # 10k, 100k turns, one session
    python bench/probes/recall_pipeline.py --rows b --b-sessions 1000 --b-per-session 100
    python bench/probes/recall_pipeline.py --rows turns --settle-s 60  # the load row, held

The rows of bench/probes/recall_scale.py, but each store filled through `ingest_many`
(embed, window, boundary, currency, reflection with the heuristic; hashing embedder, 384
dims: bench/suites/recall_sizes.py), and timed once every session is reflected:
- c: --c-turns in one session (default 10k);
- a: --a-turns in one session (default 100k);
- b: --b-sessions x --b-per-session (the multi-tenant shape; 1M = 10,000 x 100).
Per query, interleaved: the bare engine search (`search_turns` of the session, the dense
search recall makes first), `MemoryClient.recall(limit=20)` with the query vector given
(excl. the embedding) and with the product's query model embedding it (all-MiniLM-L6-v2,
int8, 384 dims like the hashing vectors: the same search cost); plus the public row's
plain recall timing, the session's facts and episodes and the load. Reaches into the
client's read path (a probe).
- turns / facts: the load rows of bench/suites/recall_load.py (--load-turns, --load-facts):
  recall while reflection catches up (--catchup-s), then idle; when reflection has not
  caught up within --settle-s (100k turns: ~31k episodes, ~80 min at the 6 episodes/s
  measured under load), the idle recalls run with the reflection process held (SIGSTOP,
  the runtime's hold detached: nothing in the background), noted as `idle.mode`; the
  split above on the idle store. Saved to bench/results/latest/recall_pipeline.json (--merge
keeps the other rows there).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: harness, suites

from harness import LATEST, machine_facts, offline_model_env, summarize
from scale_fill import FixedQuery
from suites import recall_load, recall_sizes

from hivemem import MemoryClient


@contextlib.contextmanager
def held(client: MemoryClient) -> Iterator[None]:
    """The embedded reflection process stopped (and the runtime's own hold detached, which
    would continue it after each recall); continued and attached again after."""
    process = client._runtime.reflect_process if client._runtime is not None else None
    pid = process.pid if process is not None else None
    if process is None or pid is None:
        yield
        return
    process.share.attach(None)
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)
        process.share.attach(pid)


def split(client: MemoryClient, session: str, texts: Any, queries: int,
          model: Any) -> dict[str, Any]:
    """Interleaved per query: bare search, recall excl. and incl. the embedding."""
    from hivemem.domain.names import session_name
    from hivemem.domain.recall.policy import PRESETS

    recaller = client._service.reads.recaller()
    own = recaller.embedder
    fixed = FixedQuery(own)
    name = session_name("default", session)
    limit = PRESETS["balanced"].search_limit
    bare: list[float] = []
    excl: list[float] = []
    incl: list[float] = []
    try:
        for i in range(queries + 5):
            query = texts.query()
            vec = own.embed_query(query)
            t0 = time.perf_counter()
            recaller.vectors.search_turns(name, vec, limit)
            t1 = time.perf_counter()
            fixed.vector = vec
            recaller.embedder = fixed
            client.recall(session, query, limit=20)
            t2 = time.perf_counter()
            recaller.embedder = model
            client.recall(session, query, limit=20)
            t3 = time.perf_counter()
            if i >= 5:  # the first reads after filling are not timed
                bare.append((t1 - t0) * 1000)
                excl.append((t2 - t1) * 1000)
                incl.append((t3 - t2) * 1000)
    finally:
        recaller.embedder = own
    out = {"bare_search_ms": summarize(bare), "recall_excl_embedding_ms": summarize(excl),
           "recall_incl_embedding_ms": summarize(incl)}
    out["excl_over_bare_p95"] = round(out["recall_excl_embedding_ms"]["p95"]
                                      / out["bare_search_ms"]["p95"], 2)
    print(f"    bare search p95 {out['bare_search_ms']['p95']:.2f} ms, recall excl. embedding"
          f" p95 {out['recall_excl_embedding_ms']['p95']:.2f} ms, incl."
          f" {out['recall_incl_embedding_ms']['p95']:.2f} ms", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", nargs="+", default=["c", "a"],
                    choices=["c", "a", "b", "turns", "facts"])
    ap.add_argument("--load-turns", type=int, default=100_000)
    ap.add_argument("--load-facts", type=int, default=12_000)
    ap.add_argument("--catchup-s", type=float, default=120.0)
    ap.add_argument("--c-turns", type=int, default=10_000)
    ap.add_argument("--a-turns", type=int, default=100_000)
    ap.add_argument("--b-sessions", type=int, default=1000)
    ap.add_argument("--b-per-session", type=int, default=100)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--settle-s", type=float, default=3600.0,
                    help="wait at most this long for reflection before timing")
    ap.add_argument("--label", default="", help="appended to the row names")
    ap.add_argument("--out", default=str(LATEST / "recall_pipeline.json"))
    ap.add_argument("--merge", action="store_true")
    args = ap.parse_args()
    offline_model_env()
    from hivemem.config import EmbeddingSettings
    from hivemem.providers.embedders import build_embedder

    model = build_embedder(EmbeddingSettings(), for_queries=True)
    result: dict[str, Any] = {"benchmark": "recall-pipeline", "rows": {}}
    if args.merge and Path(args.out).exists():
        result = json.loads(Path(args.out).read_text(encoding="utf-8"))
    shapes = {"c": (1, args.c_turns), "a": (1, args.a_turns),
              "b": (args.b_sessions, args.b_per_session)}
    loads = {"turns": (args.load_turns, 0.25, False), "facts": (args.load_facts, 0.95, True)}
    for key in args.rows:
        if key in loads:
            turns, share, distinct = loads[key]
            name = f"load {key}: {turns:,} turns in one session"
            name += f", {args.label}" if args.label else ""
            result["rows"][name] = recall_load.run_row(
                key, turns=turns, fact_share=share, distinct=distinct, queries=20,
                catchup_s=args.catchup_s, settle_s=args.settle_s, quiet=held,
                probe=lambda client, session, texts: split(client, session, texts,
                                                           args.queries, model))
            _save(result, args)
            continue
        sessions, per = shapes[key]
        name = f"{key}: {sessions * per:,} turns in {sessions:,} session(s)"
        name += f", {args.label}" if args.label else ""
        result["rows"][name] = recall_sizes.run_row(
            key, sessions=sessions, per_session=per, queries=args.queries,
            settle_s=args.settle_s, quiet=held,
            probe=lambda client, session, texts: split(client, session, texts,
                                                       args.queries, model))
        _save(result, args)
    print(f"saved {args.out}")


def _save(result: dict[str, Any], args: argparse.Namespace) -> None:
    result.update({"setup": recall_sizes.describe(),
                   "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
                   "machine": machine_facts()})
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
