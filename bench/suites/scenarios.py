#!/usr/bin/env python
"""`hivemem eval` next to gleanr 0.5.0 on the same generated scenarios, in one run.

    python bench/quality.py --only scenarios [--turns 10,20,40,80] [--iterations 3] [--budget 200]
    -> bench/results/latest/eval.json + eval.md (--quick: bench/results/quick/)

1. The suite is generated once with `hivemem.evaluation.scenarios.build_suite` (seeded, pure).
2. hivemem: the embedded mode (`MemoryClient.local` on a temporary folder) with the real
   fastembed all-MiniLM-L6-v2 and the heuristic reflector (no LLM), played by
   `hivemem.evaluation.runner` (ingest, wait for embed/boundary/reflect, recall each probe).
3. gleanr 0.5.0 in its own venv (/work/venv-gleanr): bench/adapters/gleanr.py (task `eval`) plays the very same
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
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import (
    MODEL,
    exit_unless_references_run,
    machine_facts,
    model_cache,
    run_adapter,
    write_result,
)

from hivemem import MemoryClient, Settings, __version__
from hivemem.evaluation.report import build_report, markdown
from hivemem.evaluation.runner import ConversationTiming, SystemRun, probe_result, run_suite
from hivemem.evaluation.scenarios import SCENARIOS, Suite, build_suite


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
        "model_cache": str(model_cache()),
        "token_budget": budget,
        "conversations": [
            {"session_id": c.session_id,
             "turns": [{"role": t.role, "content": t.content} for t in c.turns],
             "probes": [{"query": p.query} for p in c.probes]}
            for c in suite.conversations
        ],
    }
    started = time.perf_counter()
    got = run_adapter("gleanr", "eval", job, work, python=python)
    log(f"gleanr done in {time.perf_counter() - started:.1f} s")
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


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The scenario options of bench/quality.py."""
    ap.add_argument("--scenario", action="append", default=None)
    ap.add_argument("--turns", default="10,20,40,80")
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget", type=int, default=200)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The scenario eval (hivemem, then gleanr unless --quick/--skip-reference), saved as
    latest/eval.* (--quick: quick/eval.*, two scenarios at 10 turns, one iteration)."""
    quick = args.quick
    if not (quick or args.skip_reference):
        exit_unless_references_run([("gleanr", args.gleanr_python)])
    scenarios = args.scenario or (list(SCENARIOS)[:2] if quick else list(SCENARIOS))
    turns = [10] if quick else [int(x) for x in args.turns.split(",")]
    suite = build_suite(scenarios, turns, 1 if quick else args.iterations, args.seed)
    probes = sum(len(c.probes) for c in suite.conversations)
    log(f"{len(suite.conversations)} conversations, {probes} probes, budget {args.budget}")
    started = time.time()
    runs = [run_hivemem(suite, args.budget)]
    if not (quick or args.skip_reference):
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
                        "disabled (no LLM), default config otherwise; bench/adapters/gleanr.py eval",
        "hivemem_setup": "embedded mode (fakeredis + Qdrant Edge + worker threads), fastembed "
                         "all-MiniLM-L6-v2, heuristic reflector, default settings",
    })
    md = markdown(report)
    result: dict[str, Any] = json.loads(report.model_dump_json())
    write_result("eval", result, md, quick=quick)
    print(md)
    return result
