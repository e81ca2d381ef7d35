#!/usr/bin/env python
"""The change suite with a real local LLM on top of the heuristic reflector, next to the
heuristic alone, on a slice of the suite, in both modes (probe: uses internals).

    bench/probes/llm_server.sh start                      # llama.cpp, Qwen2.5-Coder 0.5B, port 8011
    HIVEMEM_LLM__PROVIDER=openai HIVEMEM_LLM__BASE_URL=http://127.0.0.1:8011/v1 \\
    HIVEMEM_LLM__MODEL=qwen2.5-coder-0.5b-instruct HIVEMEM_LLM__TIMEOUT_S=180 \\
    python bench/probes/llm_reflection.py [--part tuning|legacy] [--mode live|reflected|both]
        [--per-category K] [--conversation ID ...] [--limit N] [--bare] [--name NAME]
    -> bench/results/latest/NAME.json + NAME.md (default NAME: llm_reflection), rewritten
       after every conversation, so an interrupted run keeps what it measured

- The LLM: the HIVEMEM_LLM__* environment when HIVEMEM_LLM__PROVIDER is set (as a deployment
  would configure it), else `--base-url`/`--model`/`--timeout-s` (json_mode, temperature 0).
  A configured LLM reflects on top of the heuristic reflector
  (`hivemem.providers.llm.reflector_for`, planned by `hivemem.domain.augment`): its actions
  may add facts, never undo the change rules. `--bare` adds the LLM reflector alone.
- The slice: the first K conversations of each category (the conversation's own category, in
  file order; `--shortest`: the K with the fewest turns, so fewer episodes to reflect) of one
  part: the tuning part by default, never the held-out one (its failures
  are not to be looked at). They are played in rounds (the first of every category, then the
  second...), so a run cut short still covers every category; `--limit N` stops after N.
- Each conversation is played by every system in every mode before the next one (paired: a
  cut-short run compares the same conversations), each system in its own embedded memory
  (`MemoryClient.local`, the real MiniLM model, the same budget). Modes as bench/change.py
  (`hivemem.evaluation.change_runner.play_conversation`); after a live play the runner waits
  until the session's episodes are reflected (not counted), so that a slow LLM's backlog of
  one conversation does not fall on the next one's probes.
- Saved per conversation: the probes' verdicts, and for the LLM systems the reflection traces
  (the LLM's actions, the rules' actions, what the plan saved and dropped, the time per
  episode). The llama.cpp server's log (`--server-log`) gives the decode rates.

A CPU server answers one request at a time (~5-15 tokens/s on 2 cores, one reflection
~20-60 s), so this is run on a slice, not on the whole suite. Not run in CI.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import tempfile
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: harness, suites

from change import model_cache
from harness import RESULTS, machine_facts

from hivemem import Settings, __version__
from hivemem.errors import ReflectionFailed
from hivemem.evaluation.change import (
    CATEGORIES,
    ChangeConversation,
    ChangeProbeResult,
    ChangeRun,
    ChangeSuite,
    ConversationPlay,
    SystemScore,
    asked_probes,
    markdown_table,
    probe_result,
    score,
)
from hivemem.evaluation.change_parts import load_part
from hivemem.evaluation.change_runner import play_conversation, session_for
from hivemem.evaluation.runs import timed_recall
from hivemem.producer.client import MemoryClient
from hivemem.providers.llm import build_reflector
from hivemem.providers.reflector import Reflector

MODES = ("reflected", "live")
PARTS = ("tuning", "legacy")  # never the held-out part: its failures are not looked at
TRACE_KEYS = ("episode_id", "index", "reflector", "actions", "rule_actions", "saved",
              "superseded", "conflicted", "retracted", "dropped", "elapsed_ms", "error",
              "failed", "raw_output")
# llama.cpp's timing lines (llama-cpp-python, verbose): prompt eval and eval (decode).
EVAL_LINE = re.compile(r"llama_perf_context_print:\s+(prompt eval|eval) time =\s+([\d.]+) ms /"
                       r"\s+(\d+) (?:tokens|runs)")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def pick(suite: ChangeSuite, per_category: int, shortest: bool = False) -> list[str]:
    """The first `per_category` conversations of each category (file order; `shortest`: the
    fewest turns first, then file order), in rounds: the first of every category (in the
    report's category order), then the second, ..."""
    by_category: dict[str, list[str]] = {c: [] for c in CATEGORIES}
    ordered = (sorted(suite.conversations, key=lambda c: len(c.turns)) if shortest
               else suite.conversations)  # sorted() is stable: ties stay in file order
    for conversation in ordered:
        chosen = by_category[conversation.category]
        if len(chosen) < per_category:
            chosen.append(conversation.id)
    return [ids[k] for k in range(per_category) for ids in by_category.values() if k < len(ids)]


def llm_settings(args: argparse.Namespace) -> Settings:
    """The LLM from the HIVEMEM_LLM__* environment when set, else from the flags."""
    if os.environ.get("HIVEMEM_LLM__PROVIDER"):
        settings = Settings()
    else:
        settings = Settings.model_validate({"llm": {
            "provider": "openai", "base_url": args.base_url, "model": args.model,
            "timeout_s": args.timeout_s, "max_retries": 1, "temperature": 0.0,
            "json_mode": True,
        }})
    if settings.llm is None:
        sys.exit("no LLM configured")
    return settings


def decode_rates(log_path: Path | None, offset: int) -> dict[str, Any]:
    """llama.cpp's prompt and decode totals from the server log, from `offset` on."""
    if log_path is None or not log_path.exists():
        return {"log": None}
    with log_path.open("rb") as f:
        f.seek(offset)
        text = f.read().decode("utf-8", "replace")
    totals = {"prompt eval": [0.0, 0, 0], "eval": [0.0, 0, 0]}  # ms, tokens, requests
    per_request: list[float] = []
    for kind, ms, tokens in EVAL_LINE.findall(text):
        total = totals[kind]
        total[0] += float(ms)
        total[1] += int(tokens)
        total[2] += 1
        if kind == "eval" and float(ms) > 0:
            per_request.append(int(tokens) / (float(ms) / 1000))
    out: dict[str, Any] = {"log": str(log_path)}
    for kind, (ms, tokens, requests) in totals.items():
        key = "decode" if kind == "eval" else "prompt"
        out[key] = {"requests": requests, "tokens": tokens, "seconds": round(ms / 1000, 1),
                    "tokens_per_s": round(tokens / (ms / 1000), 2) if ms else None}
    if per_request:
        per_request.sort()
        out["decode"]["per_request_tokens_per_s"] = {
            "min": round(per_request[0], 2), "median": round(per_request[len(per_request) // 2], 2),
            "max": round(per_request[-1], 2)}
    return out


def log_size(path: Path | None) -> int:
    return path.stat().st_size if path is not None and path.exists() else 0


def traces_of(client: MemoryClient, session: str) -> list[dict[str, Any]]:
    traces = client.traces(count=100, session_id=session)
    return sorted(({k: t[k] for k in TRACE_KEYS if k in t} for t in traces),
                  key=lambda t: t.get("index", 0))


def _key(result: ChangeProbeResult) -> tuple[str, int | None, str]:
    return (result.conversation, result.after_turn, result.query)


def differences(runs: dict[tuple[str, str], ChangeRun], base: str) -> list[dict[str, Any]]:
    """Every probe where a system's verdict differs from `base`'s in the same mode."""
    out = []
    for (system, mode), run in runs.items():
        reference = runs.get((base, mode))
        if system == base or reference is None:
            continue
        verdicts = {_key(p): p for p in reference.probes}
        for probe in run.probes:
            other = verdicts.get(_key(probe))
            if other is None:
                continue
            for verdict in ("strict", "ranked"):
                mine, theirs = getattr(probe, verdict), getattr(other, verdict)
                if mine != theirs:
                    out.append({"system": system, "mode": mode, "verdict": verdict,
                                "better": mine, "conversation": probe.conversation,
                                "after_turn": probe.after_turn, "category": probe.category,
                                "query": probe.query})
    return out


def ask_anyway(client: MemoryClient, conversation: ChangeConversation, budget: int,
               wait_s: float) -> tuple[ConversationPlay, list[ChangeProbeResult]]:
    """Reflected mode after a failed episode (`ReflectionFailed`: the session moved past it):
    the probes at the end, asked of the memory as the failure left it."""
    session = session_for(conversation, "reflected")
    with contextlib.suppress(ReflectionFailed):  # the later episodes may still be running
        client.wait_until_reflected(session, wait_s)
    results = []
    for probe in asked_probes(conversation, "reflected"):
        items, recall_ms = timed_recall(client, session, probe.query, budget)
        results.append(probe_result("hivemem", conversation, probe,
                                    [item.content for item in items], items.used_tokens,
                                    recall_ms))
    play = ConversationPlay(conversation=conversation.id, turns=len(conversation.turns),
                            episodes=len(client.episodes(session)),
                            facts=len(client.facts(session)))
    return play, results


def category_table(scores: list[SystemScore]) -> str:
    """Counts, not percentages: a slice has a handful of probes per category."""
    modes = list(dict.fromkeys(s.mode for s in scores))
    lines = []
    for mode in modes:
        rows = [s for s in scores if s.mode == mode]
        lines += [f"### {mode}", "",
                  "| category | probes | " + " | ".join(s.reflector for s in rows) + " |",
                  "|---|---:|" + "---:|" * len(rows)]
        cats = [c for c in CATEGORIES if any(c in s.categories for s in rows)]
        for name, cells in [(c, [s.categories.get(c) for s in rows]) for c in cats] + [
                ("**overall**", [s.overall for s in rows])]:
            probes = next((c.probes for c in cells if c is not None), 0)
            lines.append(f"| {name} | {probes} | " + " | ".join(
                "-" if c is None else f"{c.strict} / {c.ranked}" for c in cells) + " |")
        lines.append("")
    lines.append("Cells: strict / ranked probes passed.")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=PARTS, default="tuning")
    ap.add_argument("--mode", choices=[*MODES, "both"], default="both")
    ap.add_argument("--base-url", default="http://127.0.0.1:8011/v1")
    ap.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    ap.add_argument("--timeout-s", type=float, default=240.0, help="LLM request timeout")
    ap.add_argument("--budget", type=int, default=300)
    ap.add_argument("--conversation", action="append", default=None)
    ap.add_argument("--per-category", type=int, default=1)
    ap.add_argument("--shortest", action="store_true",
                    help="the per-category picks are each category's shortest conversations")
    ap.add_argument("--limit", type=int, default=None, help="stop after N conversations")
    ap.add_argument("--bare", action="store_true", help="also run the LLM without the heuristic")
    ap.add_argument("--wait-s", type=float, default=3600.0,
                    help="how long to wait for one session's episodes to be reflected")
    ap.add_argument("--server-log", type=Path, default=Path("/work/llm/llm_server.8011.log"))
    ap.add_argument("--name", default="llm_reflection")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    model_cache()
    llm = llm_settings(args)
    assert llm.llm is not None
    base_url, model = llm.llm.base_url, llm.llm.model
    # A CPU server answers one request at a time: a busy one takes a while even for this.
    with urllib.request.urlopen(f"{base_url}/models", timeout=llm.llm.timeout_s) as reply:
        served = json.load(reply)
    log(f"LLM server at {base_url}: {[m['id'] for m in served.get('data', [])]}")
    full = load_part(args.part)
    ids = args.conversation or pick(full, args.per_category, args.shortest)
    ids = ids[:args.limit] if args.limit else ids
    by_id = {c.id: c for c in full.conversations}
    missing = [i for i in ids if i not in by_id]
    if missing:
        sys.exit(f"not in the {args.part} part: {missing}")
    modes = list(MODES) if args.mode == "both" else [args.mode]
    heuristic = Settings().model_copy(update={"llm": None})
    plans: list[tuple[str, Settings, Reflector | None]] = [
        ("heuristic", heuristic, None), (f"llm:{model}+heuristic", llm, None)]
    if args.bare:
        plans.append((f"llm:{model} alone", llm, build_reflector(llm.llm)))
    log(f"{len(ids)} conversations of the {args.part} part, modes {modes}, budget "
        f"{args.budget}, systems {[p[0] for p in plans]}")
    runs: dict[tuple[str, str], ChangeRun] = {
        (name, mode): ChangeRun.model_validate({
            "system": f"hivemem ({name})", "version": __version__, "reflector": name,
            "token_budget": args.budget, "mode": mode, "part": args.part})
        for name, _, _ in plans for mode in modes}
    traces: dict[str, list[dict[str, Any]]] = {}
    wall: dict[str, float] = {f"{name} {mode}": 0.0 for name, _, _ in plans for mode in modes}
    log_offset = log_size(args.server_log)
    started = time.time()
    machine_before = machine_facts()
    played: list[str] = []
    failures: list[str] = []  # episodes whose reflection failed for good
    loads = [[round(x, 2) for x in os.getloadavg()]]  # at the start, then per conversation
    with ExitStack() as stack:
        clients = {}
        for name, settings, reflector in plans:
            folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="hivemem-llm-"))
            clients[name] = stack.enter_context(
                MemoryClient.local(folder, settings, reflector=reflector))
        for n, conversation_id in enumerate(ids, 1):
            conversation = by_id[conversation_id]
            for mode in modes:
                for name, _, _ in plans:
                    client = clients[name]
                    t0 = time.perf_counter()
                    session = session_for(conversation, mode)
                    try:
                        play, results = play_conversation(client, conversation, args.budget,
                                                          timeout=args.wait_s, mode=mode)
                    except ReflectionFailed as exc:  # reflected mode: ask the memory as is
                        failures.append(f"{name} {mode} {conversation.id}: {exc}")
                        play, results = ask_anyway(client, conversation, args.budget, args.wait_s)
                    # Reflected mode waited already; live mode settles here, not counted.
                    try:
                        client.wait_until_reflected(session, args.wait_s)
                    except ReflectionFailed as exc:
                        failures.append(f"{name} {mode} {conversation.id}: {exc}")
                    elapsed = time.perf_counter() - t0
                    wall[f"{name} {mode}"] += elapsed
                    run = runs[(name, mode)]
                    run.conversations.append(play)
                    run.probes.extend(results)
                    if name != "heuristic":
                        traces[f"{name} {mode} {conversation.id}"] = traces_of(client, session)
                    log(f"  [{n}/{len(ids)}] {conversation.id} ({conversation.category}) "
                        f"{mode} {name}: strict {sum(r.strict for r in results)}/"
                        f"{len(results)}, ranked {sum(r.ranked for r in results)}/"
                        f"{len(results)}, {elapsed:.0f} s")
            played.append(conversation.id)
            loads.append([round(x, 2) for x in os.getloadavg()])
            save(args, runs, traces, wall, played, ids, started, machine_before, loads, failures,
                 decode_rates(args.server_log, log_offset), llm, modes)
    log(f"done in {time.time() - started:.0f} s")


def save(args: argparse.Namespace, runs: dict[tuple[str, str], ChangeRun],
         traces: dict[str, list[dict[str, Any]]], wall: dict[str, float], played: list[str],
         planned: list[str], started: float, machine_before: dict[str, Any], loads: list[list[float]], failures: list[str],
         decode: dict[str, Any], llm: Settings, modes: list[str]) -> None:
    assert llm.llm is not None
    scores = [score(r) for r in runs.values()]
    diffs = differences(runs, "heuristic")
    worse = [d for d in diffs if not d["better"]]
    by_id = {c.id: c for c in load_part(args.part).conversations}
    probes = {mode: sum(len(asked_probes(by_id[i], mode)) for i in played) for mode in modes}
    categories = sorted({by_id[i].category for i in played}, key=CATEGORIES.index)
    result = {
        "part": args.part, "modes": modes, "selection": {
            "per_category": args.per_category, "shortest": args.shortest, "limit": args.limit,
            "explicit": bool(args.conversation)}, "token_budget": args.budget,
        "conversations_planned": planned, "conversations_played": played,
        "conversation_categories": categories, "probes": probes,
        "complete": len(played) == len(planned),
        "llm": {"provider": llm.llm.provider, "base_url": llm.llm.base_url,
                "model": llm.llm.model, "timeout_s": llm.llm.timeout_s,
                "max_retries": llm.llm.max_retries, "json_mode": llm.llm.json_mode,
                "temperature": llm.llm.temperature, "max_tokens": llm.llm.max_tokens,
                "from_environment": bool(os.environ.get("HIVEMEM_LLM__PROVIDER")),
                "mode": "on top of the heuristic reflector"},
        "wall_s": round(time.time() - started, 1),
        "wall_s_per_system_mode": {k: round(v, 1) for k, v in wall.items()},
        "decode": decode,
        "version": __version__, "machine_at_start": machine_before,
        "machine": machine_facts(),
        "load_avg_1_5_15": {"start": loads[0], "after_each_conversation": loads[1:]},
        "scores": [s.model_dump() | {"strict_rate": s.overall.strict_rate,
                                     "ranked_rate": s.overall.ranked_rate} for s in scores],
        "differences_from_heuristic": diffs,
        "reflection_failures": failures,
        "runs": {f"{name} {mode}": r.model_dump(mode="json") for (name, mode), r in runs.items()},
        "traces": traces,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(result, indent=1) + "\n",
                                                encoding="utf-8")
    dec = decode.get("decode") or {}
    md = (f"# Change suite, a slice: heuristic alone vs local LLM on top ({llm.llm.model})\n\n"
          f"{len(played)} of {len(planned)} planned conversations of the {args.part} part "
          f"({', '.join(f'{probes[m]} probes {m}' for m in modes)}), conversation "
          f"categories: {', '.join(categories)}. Budget {args.budget}. The LLM reflects on "
          "top of the heuristic reflector (it may add facts, never undo the change rules); "
          "json_mode, temperature 0, timeout "
          f"{llm.llm.timeout_s:g} s, max_retries {llm.llm.max_retries}. Produced by "
          "bench/probes/llm_reflection.py.\n\n"
          f"Wall {result['wall_s']} s; per system and mode (plays incl. the reflection wait): "
          + ", ".join(f"{k} {v:.0f} s" for k, v in result["wall_s_per_system_mode"].items())
          + f". Decode (llama.cpp eval): {dec.get('tokens')} tokens in {dec.get('seconds')} s "
          f"= {dec.get('tokens_per_s')} tokens/s over {dec.get('requests')} requests; prompt: "
          f"{(decode.get('prompt') or {}).get('tokens')} tokens at "
          f"{(decode.get('prompt') or {}).get('tokens_per_s')} tokens/s. Load average (1 min) "
          f"{min(x[0] for x in loads)}-{max(x[0] for x in loads)} over the run (start "
          f"{loads[0]}, now {loads[-1]}).\n\n"
          "## Per probe category\n\n" + category_table(scores) + "\n"
          "## Percentages\n\n" + markdown_table(scores) + "\n"
          f"## Probes where the LLM run differs from the heuristic alone ({len(diffs)}; "
          f"worse: {len(worse)})\n\n"
          + (f"Episodes whose reflection failed for good: {failures}.\n\n" if failures else "")
          + ("\n".join(f"- {'better' if d['better'] else 'WORSE'}: {d['system']} {d['mode']} "
                       f"{d['verdict']}: {d['conversation']}@{d['after_turn']} "
                       f"[{d['category']}] {d['query']}" for d in diffs) or "none") + "\n")
    (args.out / f"{args.name}.md").write_text(md, encoding="utf-8")


if __name__ == "__main__":
    main()
