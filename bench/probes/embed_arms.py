#!/usr/bin/env python
"""The document embedder alone, under variant settings, interleaved: what each lever buys.

    python bench/probes/embed_arms.py               # 1000 LoCoMo turns, 3 rounds
    python bench/probes/embed_arms.py --quick       # 100 turns, 1 round

Arms (one model session each, one ONNX thread unless named): fp32 / int8 weights; batches of
16 texts sorted by length through fastembed's `embed` (the embed stage before issue 40) or
batches of at most N padded tokens (`embedding.batch_tokens`, providers/batching.py); two
ONNX threads. Rounds alternate the arms so that all see the same machine load; the best
round is reported (other processes only ever slow an arm down), with its CPU time per turn
(process CPU, which a loaded machine inflates less than wall time) and every round beside.
Quality: mean / min cosine of each arm's vectors to fp32's. Saves
bench/results/latest/embed_arms.json (quick: results/quick/).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from harness import (  # noqa: E402
    locomo_conversations,
    locomo_turns,
    machine_facts,
    offline_model_env,
    write_result,
)

from hivemem.config import EmbeddingSettings  # noqa: E402
from hivemem.providers.embedders import FastEmbedEmbedder, build_embedder  # noqa: E402

ARMS: dict[str, dict[str, Any]] = {
    "fp32, 16 per batch (before)": {"document_precision": "fp32", "batch_size": 16,
                                    "fastembed_batches": True},
    "fp32, 512 tokens": {"document_precision": "fp32", "batch_tokens": 512},
    "int8, 16 per batch": {"batch_size": 16, "fastembed_batches": True},
    "int8, 256 tokens (default)": {},
    "int8, 512 tokens": {"batch_tokens": 512},
    "int8, 1024 tokens": {"batch_tokens": 1024},
    "int8, 2048 tokens": {"batch_tokens": 2048},
    "int8, 256 tokens, 2 threads": {"threads": 2},
}


def texts_of(n: int) -> list[str]:
    per = [locomo_turns(c) for c in locomo_conversations()]
    out: list[str] = []
    for i in range(max(len(t) for t in per)):
        out.extend(t[i] for t in per if i < len(t))
    return out[:n]


def build(arm: dict[str, Any]) -> FastEmbedEmbedder:
    arm = dict(arm)
    fastembed_batches = arm.pop("fastembed_batches", False)
    embedder = build_embedder(EmbeddingSettings(**{"threads": 1, **arm}))
    assert isinstance(embedder, FastEmbedEmbedder)
    if fastembed_batches:
        embedder._steps = None  # the probe compares the path this replaced
    return embedder


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--turns", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    offline_model_env()
    texts = texts_of(100 if args.quick else args.turns)
    rounds = 1 if args.quick else args.rounds
    embedders = {name: build(arm) for name, arm in ARMS.items()}
    walls: dict[str, list[float]] = {name: [] for name in ARMS}
    cpus: dict[str, list[float]] = {name: [] for name in ARMS}
    vectors: dict[str, np.ndarray] = {}
    load = [os.getloadavg()[0]]
    for _ in range(rounds):
        for name, embedder in embedders.items():
            c0, t0 = time.process_time(), time.perf_counter()
            vectors[name] = embedder.embed_documents(texts)
            walls[name].append(time.perf_counter() - t0)
            cpus[name].append(time.process_time() - c0)
        load.append(os.getloadavg()[0])
    reference = vectors["fp32, 16 per batch (before)"]
    before = min(cpus["fp32, 16 per batch (before)"])
    rows = {}
    for name, settings in ARMS.items():
        cos = np.sum(vectors[name] * reference, axis=1)
        rows[name] = {
            "turns_per_s": round(len(texts) / min(walls[name]), 1),
            "turns_per_cpu_s": round(len(texts) / min(cpus[name]), 1),
            "cpu_ms_per_turn": round(min(cpus[name]) / len(texts) * 1000, 3),
            "speedup_by_cpu": round(before / min(cpus[name]), 2),
            "rounds_turns_per_s": [round(len(texts) / w, 1) for w in walls[name]],
            "cosine_to_fp32": {"mean": round(float(cos.mean()), 4),
                               "min": round(float(cos.min()), 4)},
            "settings": settings,
        }
        print(f"{name:32s} {rows[name]['turns_per_s']:7.1f} turns/s wall,"
              f" {rows[name]['turns_per_cpu_s']:7.1f} per CPU-s (x{rows[name]['speedup_by_cpu']:.2f}),"
              f" cosine to fp32 {rows[name]['cosine_to_fp32']}")
    result = {"benchmark": "embed_arms", "turns": len(texts), "rounds": rounds, "arms": rows,
              "load_average_1m": [round(x, 2) for x in load], "machine": machine_facts()}
    print(f"saved {write_result('embed_arms', result, quick=args.quick)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
