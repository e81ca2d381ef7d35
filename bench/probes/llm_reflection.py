#!/usr/bin/env python
"""The change suite with a real local LLM as the reflector, next to the heuristic one.

    bench/probes/llm_server.sh start                      # llama.cpp, Qwen2.5-Coder 0.5B, port 8011
    python bench/probes/llm_reflection.py [--conversation ID ...] [--per-category N] [--timeout-s 240]
                                   [--bare]
    -> bench/results/llm_reflection.json + llm_reflection.md

The runs play the same conversations through the embedded mode with the real MiniLM model
and the same budget: the heuristic reflector alone (no LLM); the configured LLM, which is the
OpenAI-compatible llama.cpp server (json_mode on, temperature 0) on top of the heuristic
reflector (`hivemem.providers.llm.reflector_for`: its actions may add facts, never undo the
change rules); with `--bare`, also the LLM reflector alone (`build_reflector`). A CPU server
answers one request at a time (~5-15 tokens/s on 2 cores), so the default plays
`--per-category` conversations of each category rather than all 51. Not run in CI.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: harness, suites

from change import model_cache
from harness import RESULTS, machine_facts

from hivemem import Settings, __version__
from hivemem.evaluation.change import ChangeSuite, markdown_table, score
from hivemem.evaluation.change_runner import load_change_suite, run_change_suite
from hivemem.providers.llm import build_reflector
from hivemem.providers.reflector import Reflector


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def pick(suite: ChangeSuite, per_category: int) -> list[str]:
    chosen: list[str] = []
    counts: dict[str, int] = {}
    for conversation in suite.conversations:
        cats = {p.category for p in conversation.probes}
        if any(counts.get(c, 0) < per_category for c in cats):
            chosen.append(conversation.id)
            for c in cats:
                counts[c] = counts.get(c, 0) + 1
    return chosen


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:8011/v1")
    ap.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    ap.add_argument("--budget", type=int, default=300)
    ap.add_argument("--conversation", action="append", default=None)
    ap.add_argument("--per-category", type=int, default=1)
    ap.add_argument("--timeout-s", type=float, default=240.0, help="LLM request timeout")
    ap.add_argument("--bare", action="store_true", help="also run the LLM without the heuristic")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    model_cache()
    # A CPU server answers one request at a time: a busy one takes a while even for this.
    with urllib.request.urlopen(f"{args.base_url}/models", timeout=args.timeout_s) as reply:
        served = json.load(reply)
    log(f"LLM server at {args.base_url}: {[m['id'] for m in served.get('data', [])]}")
    full = load_change_suite()
    ids = args.conversation or pick(full, args.per_category)
    suite = full.select(ids=ids)
    probes = sum(len(c.probes) for c in suite.conversations)
    log(f"{len(suite.conversations)} conversations, {probes} probes, budget {args.budget}")
    base = Settings.model_validate({})
    llm = Settings.model_validate({"llm": {
        "provider": "openai", "base_url": args.base_url, "model": args.model,
        "timeout_s": args.timeout_s, "max_retries": 1, "temperature": 0.0, "json_mode": True,
    }})
    assert llm.llm is not None
    plans: list[tuple[str, Settings, Reflector | None, str]] = [
        ("heuristic", base, None, "heuristic"),
        ("llm", llm, None, f"llm:{args.model}+heuristic"),
    ]
    if args.bare:
        plans.append(("bare", llm, build_reflector(llm.llm), f"llm:{args.model} alone"))
    runs: dict[str, Any] = {}
    for name, settings, reflector, label in plans:
        started = time.perf_counter()

        def done(conversation: Any, results: list[Any], name: str = name) -> None:
            log(f"  {name}: {conversation.id}: strict {sum(r.strict for r in results)}"
                f"/{len(results)}, ranked {sum(r.ranked for r in results)}/{len(results)}")

        run = run_change_suite(settings, token_budget=args.budget, suite=suite,
                               reflector=reflector, reflector_name=label, on_done=done,
                               timeout=args.timeout_s * 8)
        runs[name] = run.model_copy(update={"system": f"hivemem ({run.reflector})"})
        log(f"{name} done in {time.perf_counter() - started:.0f} s")
    scores = [score(r) for r in runs.values()]
    table = markdown_table(scores)
    print(table)
    result = {
        "conversations": ids, "probes": probes, "token_budget": args.budget,
        "llm": {"base_url": args.base_url, "model": args.model, "timeout_s": args.timeout_s,
                "mode": "on top of the heuristic reflector"},
        "version": __version__, "machine": machine_facts(),
        "scores": [s.model_dump() | {"strict_rate": s.overall.strict_rate,
                                     "ranked_rate": s.overall.ranked_rate} for s in scores],
        "runs": {k: r.model_dump() for k, r in runs.items()},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "llm_reflection.json").write_text(json.dumps(result, indent=1) + "\n",
                                                  encoding="utf-8")
    (args.out / "llm_reflection.md").write_text(
        f"# Change suite: heuristic vs local LLM ({args.model})\n\n{len(ids)} conversations, "
        f"{probes} probes, budget {args.budget}. The LLM reflects on top of the heuristic "
        f"reflector (it may add facts, never undo the change rules).\n\n{table}\n",
        encoding="utf-8")


if __name__ == "__main__":
    main()
