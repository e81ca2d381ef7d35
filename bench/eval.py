#!/usr/bin/env python
"""`hivemem eval` next to gleanr 0.5.0 on the same generated scenarios, in one run.

    python bench/eval.py [--turns 10,20,40,80] [--iterations 3] [--seed 0] [--budget 200]
    -> bench/results/eval.json + eval.md

1. The suite is generated once with `hivemem.evaluation.scenarios.build_suite` (seeded, pure).
2. hivemem: the embedded mode (`MemoryClient.local` on a temporary folder) with the real
   fastembed all-MiniLM-L6-v2 and the heuristic reflector (no LLM), played by
   `hivemem.evaluation.runner` (ingest, wait for embed/boundary/reflect, recall each probe).
3. gleanr 0.5.0 in its own venv (/work/venv-gleanr): bench/eval_gleanr.py plays the very same
   conversations (handed over as JSON) without an LLM, with the same embedder and hivemem's
   token estimate, and returns what `recall(question, token_budget=B)` gave.
4. Both are judged by `hivemem.evaluation.scenarios.judge` and reported by
   `hivemem.evaluation.report` (hit rate per scenario x turn count, latency percentiles).

The two systems run one after the other (not at the same time), so their latencies do not
disturb each other.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    MODEL_CACHE,
    RESULTS,
    exit_unless_references_run,
    machine_facts,
    offline_model_env,
)

from hivemem import MemoryClient, Settings, __version__
from hivemem.evaluation.report import build_report, markdown
from hivemem.evaluation.runner import ConversationTiming, SystemRun, probe_result, run_suite
from hivemem.evaluation.scenarios import SCENARIOS, Suite, build_suite

MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_hivemem(suite: Suite, budget: int) -> SystemRun:
    settings = Settings().model_copy(update={"llm": None})  # heuristic reflector
    folder = Path(tempfile.mkdtemp(prefix="hivemem-eval-bench-"))
    started = time.perf_counter()
    try:
        with MemoryClient.local(folder, settings) as client:
            done = 0

            def progress(*_args: Any) -> None:
                nonlocal done
                done += 1
                if done % 10 == 0:
                    log(f"  hivemem: {done}/{len(suite.conversations)} conversations")

            run = run_suite(client, suite, budget, reflector="heuristic", version=__version__,
                            on_done=progress)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    log(f"hivemem done in {time.perf_counter() - started:.1f} s")
    return run


def run_gleanr(suite: Suite, budget: int, python: str, work: Path) -> SystemRun | None:
    if not Path(python).exists():
        log(f"gleanr skipped: {python} not found")
        return None
    job = {
        "model": MODEL,
        "model_cache": str(MODEL_CACHE),
        "token_budget": budget,
        "conversations": [
            {"session_id": c.session_id,
             "turns": [{"role": t.role, "content": t.content} for t in c.turns],
             "probes": [{"query": p.query} for p in c.probes]}
            for c in suite.conversations
        ],
    }
    job_path, out_path = work / "gleanr-job.json", work / "gleanr-out.json"
    job_path.write_text(json.dumps(job), encoding="utf-8")
    started = time.perf_counter()
    subprocess.run([python, str(Path(__file__).with_name("eval_gleanr.py")), str(job_path),
                    str(out_path)], check=True)
    log(f"gleanr done in {time.perf_counter() - started:.1f} s")
    got = json.loads(out_path.read_text(encoding="utf-8"))
    run = SystemRun(system="gleanr", version=got["version"], reflector="none (no LLM)",
                    token_budget=budget)
    for conv in suite.conversations:
        played = got["conversations"][conv.session_id]
        run.conversations.append(ConversationTiming(
            scenario=conv.scenario, turns=conv.turns_target, iteration=conv.iteration,
            ingest_ms=[round(ms, 3) for ms in played["ingest_ms"]],
            episodes=played["stats"]["episodes"], facts=played["stats"]["facts"]))
        for probe, answer in zip(conv.probes, played["probes"], strict=True):
            run.probes.append(probe_result("gleanr", conv, probe, answer["texts"],
                                           sum(answer["token_counts"]), answer["recall_ms"]))
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", action="append", default=None)
    ap.add_argument("--turns", default="10,20,40,80")
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget", type=int, default=200)
    ap.add_argument("--gleanr-python", default="/work/venv-gleanr/bin/python")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    offline_model_env()
    exit_unless_references_run([("gleanr", args.gleanr_python)])
    scenarios = args.scenario or list(SCENARIOS)
    turns = [int(x) for x in args.turns.split(",")]
    suite = build_suite(scenarios, turns, args.iterations, args.seed)
    probes = sum(len(c.probes) for c in suite.conversations)
    log(f"{len(suite.conversations)} conversations, {probes} probes, budget {args.budget}")
    started = time.time()
    runs = [run_hivemem(suite, args.budget)]
    with tempfile.TemporaryDirectory(prefix="hivemem-eval-gleanr-") as work:
        gleanr = run_gleanr(suite, args.budget, args.gleanr_python, Path(work))
    if gleanr is not None:
        runs.append(gleanr)
    report = build_report(suite, args.budget, runs, extra={
        "machine": machine_facts(),
        "wall_s": round(time.time() - started, 1),
        "embedder": MODEL,
        "gleanr_setup": "gleanr 0.5.0 public API, InMemoryBackend, fastembed embedder (same "
                        "model), hivemem's token estimate, no reflector and reflection "
                        "disabled (no LLM), default config otherwise; bench/eval_gleanr.py",
        "hivemem_setup": "embedded mode (fakeredis + Qdrant Edge + worker threads), fastembed "
                         "all-MiniLM-L6-v2, heuristic reflector, default settings",
    })
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "eval.json").write_text(report.model_dump_json(indent=2) + "\n",
                                        encoding="utf-8")
    md = markdown(report)
    (args.out / "eval.md").write_text(md, encoding="utf-8")
    print(md)


if __name__ == "__main__":
    main()
