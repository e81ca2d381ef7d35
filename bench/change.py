#!/usr/bin/env python
"""The change suite ("memory that stays current") through hivemem, gleanr 0.5.0 and mneno 0.4.0.

    python bench/change.py [--mode live|reflected|both] [--suite live|heldout|legacy|all]
                           [--quick] [--budget 300] [--conversation ID ...] [--show-heldout]
    -> bench/results/change.json + change.md (the default, full run), else
       bench/results/change-SUITE-MODE[-quick].json + .md

1. The suite's parts (`hivemem.evaluation.change_parts`): `--suite live` is the tuning part
   (hivemem/evaluation/data/change_live.json), `heldout` the held-out third
   (change_heldout.json, every third conversation of each writer's file, by position), both
   written blind from the writers' brief and split by bench/change_split.py; `legacy` the 51
   v1 conversations (change_suite.json, written next to the rules, every probe at the end);
   `all` every part shipped (a part not split yet is skipped, said so).
2. Two modes (`hivemem.evaluation.change_runner`): **reflected** ingests the whole
   conversation, closes the session, waits for embed + boundary + reflection and asks the
   probes at the end; **live** ingests turn by turn and asks every probe right after its
   `after_turn`, once the turns so far are embedded (no close, no wait for reflection).
3. hivemem: the embedded mode (`MemoryClient.local` on a temporary folder, one per part and
   mode) with the real fastembed all-MiniLM-L6-v2 and the heuristic reflector (no LLM).
4. gleanr 0.5.0 (/work/venv-gleanr, bench/change_gleanr.py) and mneno 0.4.0
   (/work/venv-mneno, bench/change_mneno.py) play the very same conversations (handed over as
   JSON), no LLM, same model, same budget, their own token-budgeted recall. They have no
   pipeline to wait for: in both modes they are asked the same probes at the same points,
   with the same turns added so far. A missing venv skips its system, said so.
5. Every context is judged by `hivemem.evaluation.change.judge_change` (strict and ranked);
   the table has a row per system x mode x part. The held-out part is reported as scores
   only: its per-probe results (contexts, failures) are left out of the outputs unless
   `--show-heldout` (for the final report, once tuning is over).
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
    MODES,
    ChangeConversation,
    ChangeProbeResult,
    ChangeRun,
    ChangeSuite,
    ConversationPlay,
    SystemScore,
    asked_probes,
    markdown_table,
    probe_result,
    run_record,
    score,
)
from hivemem.evaluation.change_parts import SPLIT_RULE, load_part, part_shipped
from hivemem.evaluation.change_runner import run_change_suite

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
DRIVERS = {"gleanr": "change_gleanr.py", "mneno": "change_mneno.py"}
SUITES = {"live": ["tuning"], "heldout": ["heldout"], "legacy": ["legacy"],
          "all": ["tuning", "heldout", "legacy"]}
QUICK_CONVERSATIONS = 4  # per part: the first conversation of each of the first 4 categories


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


def quick_pick(suite: ChangeSuite) -> ChangeSuite:
    """A few conversations of varied categories (the first of each category, file order)."""
    seen: dict[str, str] = {}
    for conv in suite.conversations:
        if conv.category not in seen and len(seen) < QUICK_CONVERSATIONS:
            seen[conv.category] = conv.id
    return suite.select(ids=seen.values())


def load_parts(which: str, quick: bool, ids: list[str] | None) -> dict[str, ChangeSuite]:
    parts: dict[str, ChangeSuite] = {}
    for part in SUITES[which]:
        if not part_shipped(part):
            if which != "all":
                sys.exit(f"the {part} part is not shipped yet: run bench/change_split.py")
            log(f"{part} part skipped: not shipped yet (run bench/change_split.py)")
            continue
        suite = load_part(part).select(ids=ids)
        suite = quick_pick(suite) if quick else suite
        if suite.conversations:  # --conversation may pick none of a part
            parts[part] = suite
    return parts


def run_hivemem(suite: ChangeSuite, budget: int, mode: str, part: str) -> ChangeRun:
    settings = Settings().model_copy(update={"llm": None})  # heuristic reflector
    total = len(suite.conversations)
    done = {"n": 0, "strict": 0, "ranked": 0, "probes": 0}

    def progress(_conv: ChangeConversation, results: list[ChangeProbeResult]) -> None:
        done["n"] += 1
        done["probes"] += len(results)
        done["strict"] += sum(r.strict for r in results)
        done["ranked"] += sum(r.ranked for r in results)
        if done["n"] % 5 == 0 or done["n"] == total:
            log(f"  hivemem {mode} {part}: {done['n']}/{total} conversations, strict "
                f"{done['strict']}/{done['probes']}, ranked {done['ranked']}/{done['probes']}")

    started = time.perf_counter()
    run = run_change_suite(settings, token_budget=budget, suite=suite,
                           reflector_name="heuristic", on_done=progress, mode=mode, part=part)
    log(f"hivemem {mode} {part} done in {time.perf_counter() - started:.1f} s")
    return run


def _key(part: str, mode: str, conv: ChangeConversation) -> str:
    return f"change-{part}-{mode}-{conv.id}"


def run_reference(system: str, parts: dict[str, ChangeSuite], modes: list[str], budget: int,
                  python: str, work: Path, cache: Path) -> list[ChangeRun]:
    """One driver process per system for every part and mode (the model loads once)."""
    if not Path(python).exists():
        log(f"{system} SKIPPED: {python} not found (create the venv: python -m venv "
            f"{Path(python).parent.parent} && {Path(python).parent / 'pip'} install "
            f"{system} fastembed==0.9.1)")
        return []
    job: dict[str, Any] = {"model": MODEL, "model_cache": str(cache), "token_budget": budget,
                           "conversations": []}
    for part, suite in parts.items():
        for mode in modes:
            for conv in suite.conversations:
                n = len(conv.turns)
                job["conversations"].append({
                    "session_id": _key(part, mode, conv),
                    "turns": [{"role": t.role, "content": t.content, "agent": t.agent}
                              for t in conv.turns],
                    "probes": [{"query": p.query, "after_turn": p.point(n)}
                               for p in asked_probes(conv, mode)]})
    job_path, out_path = work / f"{system}-job.json", work / f"{system}-out.json"
    job_path.write_text(json.dumps(job), encoding="utf-8")
    started = time.perf_counter()
    subprocess.run([python, str(Path(__file__).with_name(DRIVERS[system])), str(job_path),
                    str(out_path)], check=True)
    log(f"{system} done in {time.perf_counter() - started:.1f} s")
    got = json.loads(out_path.read_text(encoding="utf-8"))
    runs = []
    for part, suite in parts.items():
        for mode in modes:
            run = ChangeRun.model_validate({
                "system": system, "version": got["version"], "reflector": "none (no LLM)",
                "token_budget": budget, "mode": mode, "part": part})
            for conv in suite.conversations:
                played = got["conversations"][_key(part, mode, conv)]
                run.conversations.append(ConversationPlay(
                    conversation=conv.id, turns=len(conv.turns),
                    episodes=played["stats"]["episodes"], facts=played["stats"]["facts"]))
                asked = asked_probes(conv, mode)
                for probe, answer in zip(asked, played["probes"], strict=True):
                    run.probes.append(probe_result(system, conv, probe, answer["texts"],
                                                   sum(answer["token_counts"]),
                                                   answer["recall_ms"]))
            runs.append(run)
    return runs


def same_probes_md(runs: list[ChangeRun], parts: dict[str, ChangeSuite]) -> str:
    """Live against reflected on the very probes both ask (those at the end): the mode's
    effect apart from live mode's extra, mid-conversation probes."""
    turns = {(part, c.id): len(c.turns) for part, s in parts.items() for c in s.conversations}
    by = {(r.system, r.mode, r.part): r for r in runs}
    lines = []
    for (system, mode, part), run in by.items():
        reflected = by.get((system, "reflected", part))
        if mode != "live" or reflected is None:
            continue
        end = [p for p in run.probes if p.after_turn == turns[(part, p.conversation)]]
        cells = [f"{sum(getattr(p, k) for p in end)}/{len(end)} {k} live vs "
                 f"{sum(getattr(p, k) for p in reflected.probes)}/{len(reflected.probes)} "
                 "reflected" for k in ("strict", "ranked")]
        lines.append(f"- {system} {part}: " + "; ".join(cells))
    return ("## The probes at the end, both modes\n\n" + "\n".join(lines) + "\n"
            if lines else "")


def failures_md(runs: list[ChangeRun], show_heldout: bool) -> str:
    lines = ["## Ranked failures", ""]
    for run in runs:
        if run.part == "heldout" and not show_heldout:
            continue
        failed = [p for p in run.probes if not p.ranked]
        lines.append(f"- **{run.system} {run.mode} {run.part}** ({len(failed)}): "
                     + (", ".join(f"{p.conversation}@{p.after_turn} [{p.category}]"
                                  for p in failed) or "none"))
    if not show_heldout and any(r.part == "heldout" for r in runs):
        lines.append("- held-out part: not listed (scores only; `--show-heldout` lists it)")
    return "\n".join(lines) + "\n"


def writer_of(conversation_id: str) -> str:
    """The writer a conversation came from: its id's prefix ("c-paint-revert" -> "c")."""
    return conversation_id.split("-", 1)[0]


def by_writer(runs: list[ChangeRun]) -> list[dict[str, Any]]:
    """Strict and ranked per system, mode, part and writer: a writer added later is
    measured apart (its held-out third was never tuned on, nor, on its first run, the rest)."""
    out = []
    for run in runs:
        if run.part == "legacy":  # (written before writers had prefixes)
            continue
        writers = sorted({writer_of(p.conversation) for p in run.probes})
        for writer in writers:
            mine = [p for p in run.probes if writer_of(p.conversation) == writer]
            out.append({"system": run.system, "mode": run.mode, "part": run.part,
                        "writer": writer, "probes": len(mine),
                        "strict": sum(p.strict for p in mine),
                        "ranked": sum(p.ranked for p in mine)})
    return out


def by_writer_md(rows: list[dict[str, Any]]) -> str:
    if len({r["writer"] for r in rows}) < 2:
        return ""
    lines = ["## By writer", "", "| system | mode | part | writer | probes | strict | ranked |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['system']} | {r['mode']} | {r['part']} | {r['writer']} | {r['probes']} | "
              f"{r['strict']} ({100 * r['strict'] / r['probes']:.0f}%) | "
              f"{r['ranked']} ({100 * r['ranked'] / r['probes']:.0f}%) |" for r in rows]
    return "\n".join(lines) + "\n"


def heldout_gap_md(scores: list[SystemScore]) -> str:
    """Held-out vs tuning, per system and mode (the issue: within 3 points)."""
    by = {(s.system, s.mode, s.part): s for s in scores}
    lines = []
    for (system, mode, part), s in by.items():
        tuning = by.get((system, mode, "tuning"))
        if part != "heldout" or tuning is None:
            continue
        cells = []
        for name in ("strict", "ranked"):
            held = getattr(s.overall, f"{name}_rate")
            tuned = getattr(tuning.overall, f"{name}_rate")
            if held is not None and tuned is not None:
                cells.append(f"{name} {100 * tuned:.1f}% tuning vs {100 * held:.1f}% held out "
                             f"({100 * (held - tuned):+.1f} points)")
        lines.append(f"- {system} {mode}: " + "; ".join(cells))
    return ("## Held out vs tuning\n\n" + "\n".join(lines) + "\n") if lines else ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=[*MODES, "both"], default="both")
    ap.add_argument("--suite", choices=list(SUITES), default="all")
    ap.add_argument("--quick", action="store_true",
                    help=f"{QUICK_CONVERSATIONS} conversations per part (varied categories)")
    ap.add_argument("--budget", type=int, default=300)
    ap.add_argument("--conversation", action="append", default=None)
    ap.add_argument("--show-heldout", action="store_true",
                    help="also write the held-out part's per-probe results and failures")
    ap.add_argument("--gleanr-python", default="/work/venv-gleanr/bin/python")
    ap.add_argument("--mneno-python", default="/work/venv-mneno/bin/python")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    exit_unless_references_run([("gleanr", args.gleanr_python), ("mneno", args.mneno_python)])
    cache = model_cache()
    modes = list(MODES) if args.mode == "both" else [args.mode]
    parts = load_parts(args.suite, args.quick, args.conversation)
    if not parts:
        sys.exit("no conversations to play")
    counts = {part: {mode: sum(len(asked_probes(c, mode)) for c in suite.conversations)
                     for mode in modes} | {"conversations": len(suite.conversations)}
              for part, suite in parts.items()}
    log(f"change suite: {counts}, budget {args.budget}")
    started = time.time()
    runs = [run_hivemem(suite, args.budget, mode, part)
            for part, suite in parts.items() for mode in modes]
    with tempfile.TemporaryDirectory(prefix="hivemem-change-bench-") as work:
        for system, python in (("gleanr", args.gleanr_python), ("mneno", args.mneno_python)):
            runs.extend(run_reference(system, parts, modes, args.budget, python, Path(work),
                                      cache))
    order = {(p, m): i for i, (p, m) in enumerate((p, m) for p in parts for m in modes)}
    runs.sort(key=lambda r: order[(r.part, r.mode)])  # stable: hivemem, gleanr, mneno
    scores = [score(r) for r in runs]
    skipped = sorted({"gleanr", "mneno"} - {r.system for r in runs})
    result: dict[str, Any] = {
        "suite": counts,
        "modes": modes,
        "quick": args.quick,
        "split_rule": SPLIT_RULE,
        "token_budget": args.budget,
        "embedder": MODEL,
        "wall_s": round(time.time() - started, 1),
        "machine": machine_facts(),
        "skipped": skipped,
        "setup": {
            "hivemem": f"{__version__}: embedded mode (Redis-compatible child server + Qdrant "
                       "Edge + worker threads), fastembed all-MiniLM-L6-v2, heuristic "
                       "reflector, default settings, recall(session, query, token_budget); "
                       "reflected: close + wait embed/boundary/reflection, end probes; live: "
                       "wait_until_processed after the probe's turn, no close",
            "gleanr": "0.5.0 public API, InMemoryBackend, same model, hivemem's token "
                      "estimate, reflection disabled (no LLM); asked at each probe's point; "
                      "bench/change_gleanr.py",
            "mneno": "0.4.0 public API, default MemoryClient, same model (memoised), no LLM; "
                     "build_context order packed into the budget with hivemem's estimate; "
                     "asked at each probe's point; bench/change_mneno.py",
        },
        "scores": [s.model_dump() | {"strict_rate": s.overall.strict_rate,
                                     "ranked_rate": s.overall.ranked_rate} for s in scores],
        "by_writer": by_writer(runs),
        "runs": [run_record(r, args.show_heldout) for r in runs],
    }
    full = args.suite == "all" and args.mode == "both" and not args.quick \
        and args.conversation is None
    name = "change" if full else (f"change-{args.suite}-{args.mode}"
                                  + ("-quick" if args.quick else ""))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n",
                                           encoding="utf-8")
    described = "; ".join(
        f"{part}: {c['conversations']} conversations, "
        + ", ".join(f"{c[m]} probes {m}" for m in modes) for part, c in counts.items())
    md = (f"# Change suite: memory that stays current\n\n"
          f"{described}. Budget {args.budget} tokens, {MODEL}, no LLM. Wall {result['wall_s']} "
          f"s. Produced by bench/change.py" + (" --quick" if args.quick else "") + ".\n\n"
          "reflected: the whole conversation ingested, session closed, every episode "
          "reflected, then the probes at the end; live: turn by turn, each probe asked right "
          "after its turn once the turns so far are embedded (no close, no reflection wait). "
          "strict: every expected value in the context and (unless the probe asks about the "
          "past) no item carrying only a superseded value; ranked: the first item carrying "
          "the current value ranks above every item carrying only a superseded one. "
          f"Held out: {SPLIT_RULE}.\n\n"
          + (f"Skipped (venv missing): {', '.join(skipped)}.\n\n" if skipped else "")
          + "\n".join(section for section in (
              markdown_table(scores), heldout_gap_md(scores), by_writer_md(by_writer(runs)),
              same_probes_md(runs, parts),
              failures_md(runs, args.show_heldout)) if section))
    (args.out / f"{name}.md").write_text(md, encoding="utf-8")
    print(md)


if __name__ == "__main__":
    main()
