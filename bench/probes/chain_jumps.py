#!/usr/bin/env python
"""Idle recall on a session whose slots changed thousands of times: the fact index's kept
chain jumps (`FactIndex.frontier`) on against off, interleaved in one process.

    python bench/probes/chain_jumps.py --turns 20000
    python bench/probes/chain_jumps.py --shape facts --turns 12000   # no chains: no gain, no cost

A session is filled through the public pipeline (bench/suites/recall_load.py's `turns`
shape: a quarter of the turns change one of ten slots; `--shape facts`: nearly every turn a
fact on a slot of its own, so chains are short), reflected, then recalls
(`limit=20`) alternate in blocks of 50 between the two arms (jumps off: the lens is given no
asker key, so it walks every chain as before), other work's niced processes stopped while
each block is timed. The arms' recalls are compared item by item on 30 queries.
Saved to bench/results/latest/chain_jumps[-facts].json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: harness, suites

from harness import LATEST, PausedBackground, machine_facts, summarize
from suites.recall_load import Turns, _fill, settings

from hivemem import MemoryClient
from hivemem.domain.recall import fact_index


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--shape", choices=["turns", "facts"], default="turns")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    out_path = args.out or str(
        LATEST / ("chain_jumps.json" if args.shape == "turns" else "chain_jumps-facts.json"))
    original = fact_index.CurrencyLens.add
    jumps = {"on": True}

    def add(self: Any, *a: Any, **k: Any) -> None:
        if not jumps["on"]:
            k["admit_key"] = None  # no key: the lens walks every chain
        original(self, *a, **k)

    fact_index.CurrencyLens.add = add  # type: ignore[method-assign]
    texts = (Turns(seed=5, fact_share=0.25) if args.shape == "turns"
             else Turns(seed=5, fact_share=0.95, distinct=True))
    folder = tempfile.mkdtemp(prefix="hivemem-chain-jumps-")
    out: dict[str, Any] = {"turns": args.turns, "shape": args.shape}
    try:
        with MemoryClient.local(folder, settings()) as client:
            t0 = time.perf_counter()
            out["fill"] = _fill(client, "s0", args.turns, texts)
            client.wait_until_reflected("s0", timeout=3600)
            out["reflected_s"] = round(time.perf_counter() - t0, 1)
            info = client.admin.session_info("s0")
            out.update(episodes=info.episodes, facts_active=info.facts_active,
                       facts_with_history=len(client.facts("s0", include_history=True)))
            print(out, flush=True)
            queries = [texts.query() for _ in range(50)]
            ms: dict[str, list[float]] = {"on": [], "off": []}
            for r in range(args.rounds):
                for arm in (("off", "on") if r % 2 == 0 else ("on", "off")):
                    jumps["on"] = arm == "on"
                    with PausedBackground(True):
                        for q in queries:
                            s = time.perf_counter()
                            client.recall("s0", q, limit=20)
                            ms[arm].append((time.perf_counter() - s) * 1000)
            same = 0
            for q in queries[:30]:
                jumps["on"] = True
                a = [i.source_id for i in client.recall("s0", q, limit=20)]
                jumps["on"] = False
                same += a == [i.source_id for i in client.recall("s0", q, limit=20)]
            out.update(jumps_on_ms=summarize(ms["on"]), jumps_off_ms=summarize(ms["off"]),
                       identical_recalls=f"{same}/30", machine=machine_facts())
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"jumps on p50/p95 {out['jumps_on_ms']['p50']:.1f}/{out['jumps_on_ms']['p95']:.1f}"
          f" ms, off {out['jumps_off_ms']['p50']:.1f}/{out['jumps_off_ms']['p95']:.1f} ms,"
          f" identical {out['identical_recalls']}")
    Path(out_path).write_text(json.dumps(out, indent=1))
    print(f"saved {out_path}")


if __name__ == "__main__":
    main()
