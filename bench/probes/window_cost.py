#!/usr/bin/env python
"""What window vectors cost the embed stage: one EmbedHandler call per batch of 16 LoCoMo
turns (conversation 26, in order, as the embed worker sees them), for each arm (model fp32 or
int8, window_turns, window_mode text or mean) with the real all-MiniLM-L6-v2 (one ONNX thread)
and Qdrant Edge in a temporary folder. The handlers take turns batch by batch so machine
noise falls on all; each run repeats the conversation `--rounds` times into fresh stores.

    python bench/probes/window_cost.py [--rounds 2] [--arms fp32:0 fp32:2:text fp32:2:mean int8:2:text]

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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: harness, suites

from harness import RESULTS, CpuMonitor, machine_facts, offline_model_env
from suites.locomo import git_state, load_dataset


class _NoRedis:
    """The handler's Redis side (progress bits, the boundary stage's entries) is not what
    this measures: it is the same for both arms."""

    def publish_embedded(self, _entries: object) -> None:
        pass


INT8 = Path(__file__).resolve().parents[3] / "shared" / "models" / "all-MiniLM-L6-v2-onnx-int8"


def _arm(spec: str) -> tuple[str, int, str]:
    """"fp32:2:text" -> (model, window_turns, window_mode)."""
    model, turns, mode = [*spec.split(":"), "text"][:3]
    if model not in ("fp32", "int8") or mode not in ("text", "mean"):
        raise SystemExit(f"bad arm {spec!r}: MODEL:WINDOW_TURNS[:text|mean]")
    return model, int(turns), mode


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--arms", nargs="+", default=["fp32:0", "fp32:2:text", "fp32:2:mean"],
                    help="MODEL:WINDOW_TURNS[:MODE], MODEL fp32 or int8 (the int8 MiniLM"
                         " in ../shared/models), MODE text or mean; the first is the baseline")
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
    arms = {spec: _arm(spec) for spec in args.arms}
    embedders = {}
    for model in {m for m, _, _ in arms.values()}:
        settings = EmbeddingSettings(threads=1, model_path=INT8 if model == "int8" else None)
        embedders[model] = build_embedder(settings)
        embedders[model].embed_documents(["warm up"])
    seconds: dict[str, list[float]] = {spec: [] for spec in arms}
    with CpuMonitor() as cpu:
        for _round in range(args.rounds):
            tmp = Path(tempfile.mkdtemp(prefix="hivemem-wcost-"))
            stores = {spec: EdgeVectorStore(tmp / f"a{i}", 384) for i, spec in enumerate(arms)}
            handlers = {
                spec: EmbedHandler(embedders[model], stores[spec], _NoRedis(), None,  # type: ignore[arg-type]
                                   Keys(), window_turns=w, window_mode=mode)
                for spec, (model, w, mode) in arms.items()
            }
            spent = dict.fromkeys(arms, 0.0)
            order = list(arms)
            for n, start in enumerate(range(0, len(turns), args.batch)):
                batch = turns[start:start + args.batch]
                for spec in (order if n % 2 == 0 else order[::-1]):
                    began = time.perf_counter()
                    handlers[spec](batch)
                    spent[spec] += time.perf_counter() - began
            for spec, store in stores.items():
                store.close()
                seconds[spec].append(spent[spec])
            shutil.rmtree(tmp, ignore_errors=True)
    rate = {spec: round(len(turns) / statistics.fmean(v), 1) for spec, v in seconds.items()}
    base = args.arms[0]
    result = {
        "benchmark": "window-cost", "turns": len(turns), "batch": args.batch,
        "rounds": args.rounds, "seconds": seconds, "arms": args.arms, "baseline": base,
        "turns_per_s": rate,
        "ratio_vs_baseline": {spec: round(r / rate[base], 3) for spec, r in rate.items()},
        "cpu": cpu.result, "notes": {"uptime": os.getloadavg()},
        "machine": machine_facts(), "git": git_state(),
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    print(f"embed stage, {len(turns)} turns x {args.rounds}: "
          + ", ".join(f"{spec} {r} turns/s" for spec, r in rate.items())
          + f"; ratios vs {base} {result['ratio_vs_baseline']}; load {os.getloadavg()}")
    out = RESULTS / "window_cost.json"
    out.write_text(json.dumps(result, indent=2), encoding="utf-8")
    print(f"saved {out}")


if __name__ == "__main__":
    main()
