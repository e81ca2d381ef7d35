#!/usr/bin/env python
"""Reflection's episodes/s as one session grows: does an episode cost more in a long session?

    python bench/probes/reflection_scale.py --turns 2000 20000 [--max-s 900]
    python bench/ab.py --baseline /tmp/base -- probes/reflection_scale.py --turns 2000 20000

Per size, a fresh embedded store (hashing embedder, 384 dims, the embedded defaults: the
heuristic reflector in a reflection process of its own) gets N turns into one session through
`ingest_many` in batches of 1,000 (the synthetic turns of bench/suites/recall_load.py, a
quarter of them statements, many of them changes of a few slots: the history grows), then
waits until every episode is reflected (at most --max-s after the fill). Reported per size:
- `overall_eps`: episodes / seconds from the first ingest to the last reflection;
- `tail_eps`: episodes/s over the last quarter of the episodes (the session near its full
  size: the per-episode cost a long session pays), from the reflected pointer sampled every
  0.5 s (public API: the newest trace's index);
- `tail_ms_p50/p95`: the reflection traces' own elapsed_ms over the last 200 episodes
  (reflector, consolidation, fact embedding, writes; not the lock or the job queue);
- the session's facts (current, superseded) and the load.
Public API only, so bench/ab.py runs it against a baseline tree. Saved to
bench/results/latest/reflection_scale.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: harness, suites

from harness import LATEST, machine_facts
from suites.recall_load import Turns, fill_batches, settings

from hivemem import MemoryClient

SESSION = "grow"


def _reflected(client: MemoryClient) -> int:
    newest = client.traces(1, session_id=SESSION)
    return int(newest[0]["index"]) if newest else 0


def _episodes(client: MemoryClient) -> int:
    return client.get_session_stats(SESSION).episodes


def run_size(turns: int, max_s: float) -> dict[str, Any]:
    texts = Turns(seed=40, fact_share=0.25)
    folder = tempfile.mkdtemp(prefix="hivemem-reflscale-")
    samples: list[tuple[float, int]] = []
    try:
        with MemoryClient.local(folder, settings()) as client:
            t0 = time.perf_counter()
            for _ in fill_batches(client, SESSION, turns, texts):
                samples.append((time.perf_counter() - t0, _reflected(client)))
            client.close_session(SESSION)
            client.wait_until_processed(SESSION, timeout=3600, stage="boundary")
            filled_s = time.perf_counter() - t0
            episodes = _episodes(client)
            deadline = time.perf_counter() + max_s
            while True:
                done = _reflected(client)
                samples.append((time.perf_counter() - t0, done))
                if done >= episodes or time.perf_counter() > deadline:
                    break
                time.sleep(0.5)
            total_s = samples[-1][0]
            traces = client.traces(200, session_id=SESSION)
            facts = client.facts(SESSION, include_history=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    reflected = samples[-1][1]
    tail_from = reflected - max(1, reflected // 4)
    # From the last sample before the last quarter began (the pointer moves in steps).
    first = max(((t, n) for t, n in samples if n < tail_from), default=(0.0, 0))
    tail_eps = (reflected - first[1]) / max(1e-9, samples[-1][0] - first[0])
    elapsed = sorted(float(t["elapsed_ms"]) for t in traces if "elapsed_ms" in t)
    out = {
        "turns": turns, "episodes": episodes, "reflected": reflected,
        "settled": reflected >= episodes,
        "fill_s": round(filled_s, 1), "total_s": round(total_s, 1),
        "overall_eps": round(reflected / total_s, 1), "tail_eps": round(tail_eps, 1),
        "tail_ms_p50": round(statistics.median(elapsed), 1) if elapsed else None,
        "tail_ms_p95": round(elapsed[int(0.95 * (len(elapsed) - 1))], 1) if elapsed else None,
        "facts_current": sum(f.status.value in ("active", "conflicted") for f in facts),
        "facts_superseded": sum(f.status.value == "superseded" for f in facts),
        "load1_end": round(os.getloadavg()[0], 2),
    }
    print(f"  {turns:,} turns: {reflected:,}/{episodes:,} episodes reflected in"
          f" {total_s:.0f} s (fill {filled_s:.0f} s): overall {out['overall_eps']} eps,"
          f" last quarter {out['tail_eps']} eps, trace p50 {out['tail_ms_p50']} ms;"
          f" facts {out['facts_current']} current, {out['facts_superseded']} superseded;"
          f" load {out['load1_end']}", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", type=int, nargs="+", default=[2000, 20000])
    ap.add_argument("--max-s", type=float, default=900.0,
                    help="wait at most this long after the fill for reflection")
    args = ap.parse_args()
    rows = [run_size(n, args.max_s) for n in args.turns]
    result = {"benchmark": "reflection-scale", "rows": rows,
              "setup": {"embedder": "hashing, 384 dims", "reflector": "heuristic",
                        "fill": "ingest_many batches of 1,000, one session, 25% statements"},
              "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
              "machine": machine_facts()}
    LATEST.mkdir(parents=True, exist_ok=True)
    out = LATEST / "reflection_scale.json"
    out.write_text(json.dumps(result, indent=2), encoding="utf-8")
    print(f"saved {out}")


if __name__ == "__main__":
    main()
