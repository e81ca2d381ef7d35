#!/usr/bin/env python
"""The change suite ("memory that stays current") through hivemem, gleanr 0.5.0 and mneno 0.4.0.

    python bench/change.py [--budget 300] [--conversation ID ...]
    -> bench/results/change.json + change.md

1. The suite is hivemem/evaluation/data/change_suite.json (hand-written conversations, each
   probe tagged with the change rule it tests), loaded by `hivemem.evaluation.change_runner`.
2. hivemem: the embedded mode (`MemoryClient.local` on a temporary folder) with the real
   fastembed all-MiniLM-L6-v2 and the heuristic reflector (no LLM), played by
   `run_change_suite` (ingest with role and speaker, close the session, wait for
   embed/boundary/reflect, recall each probe at the budget).
3. gleanr 0.5.0 (/work/venv-gleanr, bench/change_gleanr.py) and mneno 0.4.0
   (/work/venv-mneno, bench/change_mneno.py) play the very same conversations (handed over as
   JSON), no LLM, same model, same budget, their own token-budgeted recall.
4. Every context is judged by `hivemem.evaluation.change.judge_change` (strict and ranked)
   and scored per category; the systems run one after the other.
"""

from __future__ import annotations

import argparse
import json
import os
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

from hivemem import Settings, __version__
from hivemem.evaluation.change import (
    ChangeConversation,
    ChangeProbeResult,
    ChangeRun,
    ChangeSuite,
    ConversationPlay,
    markdown_table,
    probe_result,
    score,
)
from hivemem.evaluation.change_runner import load_change_suite, run_change_suite

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
DRIVERS = {"gleanr": "change_gleanr.py", "mneno": "change_mneno.py"}


def model_cache() -> Path:
    """FASTEMBED_CACHE_PATH when set (from a git worktree, common.MODEL_CACHE points next to
    the worktree, not at /work/shared), else bench/common.py's folder."""
    env = os.environ.get("FASTEMBED_CACHE_PATH")
    if env and Path(env).exists():
        os.environ["HF_HUB_OFFLINE"] = "1"
        return Path(env)
    offline_model_env()
    return MODEL_CACHE


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_hivemem(suite: ChangeSuite, budget: int) -> ChangeRun:
    settings = Settings().model_copy(update={"llm": None})  # heuristic reflector
    total = len(suite.conversations)
    done = {"n": 0, "strict": 0, "ranked": 0, "probes": 0}

    def progress(_conv: ChangeConversation, results: list[ChangeProbeResult]) -> None:
        done["n"] += 1
        done["probes"] += len(results)
        done["strict"] += sum(r.strict for r in results)
        done["ranked"] += sum(r.ranked for r in results)
        if done["n"] % 5 == 0 or done["n"] == total:
            log(f"  hivemem: {done['n']}/{total} conversations, strict {done['strict']}/"
                f"{done['probes']}, ranked {done['ranked']}/{done['probes']}")

    started = time.perf_counter()
    run = run_change_suite(settings, token_budget=budget, suite=suite,
                           reflector_name="heuristic", on_done=progress)
    log(f"hivemem done in {time.perf_counter() - started:.1f} s")
    return run


def run_reference(system: str, suite: ChangeSuite, budget: int, python: str,
                  work: Path, cache: Path) -> ChangeRun | None:
    if not Path(python).exists():
        log(f"{system} skipped: {python} not found")
        return None
    job = {
        "model": MODEL, "model_cache": str(cache), "token_budget": budget,
        "conversations": [
            {"session_id": c.session_id,
             "turns": [{"role": t.role, "content": t.content, "agent": t.agent}
                       for t in c.turns],
             "probes": [{"query": p.query} for p in c.probes]}
            for c in suite.conversations
        ],
    }
    job_path, out_path = work / f"{system}-job.json", work / f"{system}-out.json"
    job_path.write_text(json.dumps(job), encoding="utf-8")
    started = time.perf_counter()
    subprocess.run([python, str(Path(__file__).with_name(DRIVERS[system])), str(job_path),
                    str(out_path)], check=True)
    log(f"{system} done in {time.perf_counter() - started:.1f} s")
    got = json.loads(out_path.read_text(encoding="utf-8"))
    run = ChangeRun(system=system, version=got["version"], reflector="none (no LLM)",
                    token_budget=budget)
    for conv in suite.conversations:
        played = got["conversations"][conv.session_id]
        run.conversations.append(ConversationPlay(
            conversation=conv.id, turns=len(conv.turns), episodes=played["stats"]["episodes"],
            facts=played["stats"]["facts"]))
        for probe, answer in zip(conv.probes, played["probes"], strict=True):
            run.probes.append(probe_result(system, conv, probe, answer["texts"],
                                           sum(answer["token_counts"]), answer["recall_ms"]))
    return run


def failures_md(runs: list[ChangeRun]) -> str:
    lines = ["## Ranked failures", ""]
    for run in runs:
        failed = [p for p in run.probes if not p.ranked]
        lines.append(f"- **{run.system}** ({len(failed)}): "
                     + (", ".join(f"{p.conversation} [{p.category}]" for p in failed) or "none"))
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget", type=int, default=300)
    ap.add_argument("--conversation", action="append", default=None)
    ap.add_argument("--gleanr-python", default="/work/venv-gleanr/bin/python")
    ap.add_argument("--mneno-python", default="/work/venv-mneno/bin/python")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    exit_unless_references_run([("gleanr", args.gleanr_python), ("mneno", args.mneno_python)])
    cache = model_cache()
    suite = load_change_suite().select(ids=args.conversation)
    probes = sum(len(c.probes) for c in suite.conversations)
    log(f"change suite: {len(suite.conversations)} conversations, {probes} probes, "
        f"budget {args.budget}")
    started = time.time()
    runs = [run_hivemem(suite, args.budget)]
    with tempfile.TemporaryDirectory(prefix="hivemem-change-bench-") as work:
        for system, python in (("gleanr", args.gleanr_python), ("mneno", args.mneno_python)):
            ref = run_reference(system, suite, args.budget, python, Path(work), cache)
            if ref is not None:
                runs.append(ref)
    scores = [score(r) for r in runs]
    result: dict[str, Any] = {
        "suite": {"conversations": len(suite.conversations), "probes": probes},
        "token_budget": args.budget,
        "embedder": MODEL,
        "wall_s": round(time.time() - started, 1),
        "machine": machine_facts(),
        "setup": {
            "hivemem": f"{__version__}: embedded mode (fakeredis + Qdrant Edge + worker "
                       "threads), fastembed all-MiniLM-L6-v2, heuristic reflector, default "
                       "settings, recall(session, query, token_budget)",
            "gleanr": "0.5.0 public API, InMemoryBackend, same model, hivemem's token "
                      "estimate, reflection disabled (no LLM); bench/change_gleanr.py",
            "mneno": "0.4.0 public API, default MemoryClient, same model (memoised), no LLM; "
                     "build_context order packed into the budget with hivemem's estimate; "
                     "bench/change_mneno.py",
        },
        "scores": [s.model_dump() | {"strict_rate": s.overall.strict_rate,
                                     "ranked_rate": s.overall.ranked_rate} for s in scores],
        "runs": [r.model_dump() for r in runs],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "change.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    md = (f"# Change suite: memory that stays current\n\n"
          f"{len(suite.conversations)} conversations, {probes} probes, budget {args.budget} "
          f"tokens, {MODEL}, no LLM. Wall {result['wall_s']} s. Produced by bench/change.py.\n\n"
          "strict: every expected value in the context and (unless the probe asks about the "
          "past) no item carrying only a superseded value; ranked: the first item carrying "
          "the current value ranks above every item carrying only a superseded one.\n\n"
          + markdown_table(scores) + "\n" + failures_md(runs))
    (args.out / "change.md").write_text(md, encoding="utf-8")
    print(md)


if __name__ == "__main__":
    main()
