#!/usr/bin/env python
"""What window vectors cost the embed stage: one EmbedHandler call per batch of 16 LoCoMo
turns (conversation 26, in order, as the embed worker sees them), `window_turns=2` against
`window_turns=0` (and any other `--windows`), with the real model (fastembed all-MiniLM-L6-v2, one ONNX thread) and
Qdrant Edge in a temporary folder. The two handlers take turns batch by batch so machine
noise falls on both; each run repeats the conversation `--rounds` times into fresh stores.

    python bench/window_cost.py [--rounds 2]

Prints turns/s for both and the ratio; saves bench/results/window_cost.json.
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
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import RESULTS, CpuMonitor, machine_facts, offline_model_env
from locomo import git_state, load_dataset


class _NoRedis:
    """The handler's Redis side (progress bits, the boundary stage's entries) is not what
    this measures: it is the same for both arms."""

    def publish_embedded(self, _entries: object) -> None:
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--windows", type=int, nargs="+", default=[2],
                    help="window_turns values measured against 0")
    args = ap.parse_args()
    offline_model_env()
    from hivemem.config import EmbeddingSettings
    from hivemem.domain.models import Role, Turn
    from hivemem.pipeline.topology import Keys
    from hivemem.providers.embedders import build_embedder
    from hivemem.store.vectors.edge import EdgeVectorStore
    from hivemem.workers.embed import EmbedHandler

    convs, _ = load_dataset(["26"])
    raw = convs[0]["turns"]
    t0 = datetime(2023, 5, 8, tzinfo=UTC)
    turns = [Turn(turn_id=t["dia_id"], session_id="s", role=Role(t["role"]),
                  content=t["content"], timestamp=t0 + timedelta(seconds=i), seq=i + 1,
                  token_count=1) for i, t in enumerate(raw)]
    embedder = build_embedder(EmbeddingSettings(threads=1))
    embedder.embed_documents(["warm up"])
    seconds: dict[int, list[float]] = {w: [] for w in sorted({0, *args.windows})}
    with CpuMonitor() as cpu:
        for _round in range(args.rounds):
            tmp = Path(tempfile.mkdtemp(prefix="hivemem-wcost-"))
            stores = {w: EdgeVectorStore(tmp / f"w{w}", embedder.dim) for w in seconds}
            handlers = {w: EmbedHandler(embedder, stores[w], _NoRedis(), None,  # type: ignore[arg-type]
                                        Keys(), window_turns=w) for w in seconds}
            spent = dict.fromkeys(seconds, 0.0)
            for n, start in enumerate(range(0, len(turns), args.batch)):
                batch = turns[start:start + args.batch]
                for w in (sorted(seconds) if n % 2 == 0 else sorted(seconds, reverse=True)):
                    began = time.perf_counter()
                    handlers[w](batch)
                    spent[w] += time.perf_counter() - began
            for w, store in stores.items():
                store.close()
                seconds[w].append(spent[w])
            shutil.rmtree(tmp, ignore_errors=True)
    rate = {w: round(len(turns) / statistics.fmean(v), 1) for w, v in seconds.items()}
    result = {
        "benchmark": "window-cost", "turns": len(turns), "batch": args.batch,
        "rounds": args.rounds, "seconds": seconds,
        "turns_per_s": {f"window_turns={w}": r for w, r in rate.items()},
        "ratio_vs_window_turns_0": {f"window_turns={w}": round(r / rate[0], 3)
                                    for w, r in rate.items() if w},
        "cpu": cpu.result, "notes": {"uptime": os.getloadavg()},
        "machine": machine_facts(), "git": git_state(),
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    print(f"embed stage, {len(turns)} turns x {args.rounds}: "
          + ", ".join(f"window_turns={w} {r} turns/s" for w, r in rate.items())
          + f"; ratios {result['ratio_vs_window_turns_0']}; load {os.getloadavg()}")
    out = RESULTS / "window_cost.json"
    out.write_text(json.dumps(result, indent=2), encoding="utf-8")
    print(f"saved {out}")


if __name__ == "__main__":
    main()
