"""LoCoMo through the reference systems: their adapters (bench/adapters/) run and scored."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from adapters.reference import hivemem_estimate_tokens as estimate_tokens
from harness import (
    CpuMonitor,
)

from suites.locomo.data import (
    ADAPTERS,
    BUDGETS,
    Scores,
    pack_greedy,
)

# -- reference systems ------------------------------------------------------------------------


def run_references(
    systems: list[tuple[str, str]],
    job_path: Path,
    convs: list[dict[str, Any]],
    scores: Scores,
    log: Callable[[str], None],
    timeout_s: float,
    parallel: bool,
    out_dir: Path,
) -> dict[str, Any]:
    """Run the drivers (both at once when `parallel`: each is single-threaded Python, one core
    each on a 2-core machine), then score their outputs."""
    infos: dict[str, Any] = {}
    procs: list[tuple[str, subprocess.Popen[str], Path, float]] = []
    finished: list[Path] = []
    reused_cpu: dict[str, Any] = {}

    job_text = job_path.read_bytes()

    def start(system: str, python: str) -> None:
        driver = ADAPTERS / f"{system}.py"
        digest = hashlib.sha256(
            job_text + driver.read_bytes() + (ADAPTERS / "reference.py").read_bytes()
        ).hexdigest()[:12]
        out_path = out_dir / f"{system}-{digest}.json"
        if out_path.exists():
            log(f"  {system}: reusing {out_path} (same job and driver)")
            meta_path = out_path.with_suffix(".meta.json")
            meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
            infos[system] = score_reference(system, out_path, convs, scores,
                                            meta.get("wall_s", float("nan")))
            infos[system]["reused"] = str(out_path)
            reused_cpu[system] = meta.get("cpu")
            return
        if not Path(python).exists():
            log(f"  {system}: {python} not found, skipped (see this script's docstring)")
            infos[system] = {"skipped": f"{python} not found"}
            return
        log(f"  {system}: {python} {driver.name}")
        proc = subprocess.Popen(  # progress lines go straight to our stderr
            [python, str(driver), "locomo", str(job_path), str(out_path)], text=True,
            stdout=subprocess.DEVNULL,
        )
        procs.append((system, proc, out_path, time.perf_counter()))

    def finish(system: str, proc: subprocess.Popen[str], out_path: Path, t0: float) -> None:
        try:
            code = proc.wait(timeout=max(1.0, timeout_s - (time.perf_counter() - t0)))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = -9
        wall = time.perf_counter() - t0
        log(f"  {system}: finished in {wall:.0f} s (exit {code})")
        if code != 0 or not out_path.exists():
            infos[system] = {"skipped": f"driver exit {code}"}
            return
        infos[system] = score_reference(system, out_path, convs, scores, wall)
        finished.append(out_path)

    children0 = os.times()
    with CpuMonitor() as cpu:
        if parallel:
            for system, python in systems:
                start(system, python)
            for system, proc, out_path, t0 in list(procs):
                finish(system, proc, out_path, t0)
        else:
            for system, python in systems:
                start(system, python)
                if procs:
                    system_, proc, out_path, t0 = procs.pop()
                    finish(system_, proc, out_path, t0)
    children1 = os.times()
    res = dict(cpu.result)
    kids = (children1.children_user + children1.children_system
            - children0.children_user - children0.children_system)
    if res.get("wall_s"):
        # CpuMonitor counts this process only; the drivers are children.
        res["driver_cores"] = round(kids / res["wall_s"], 2)
        if "foreign_cores" in res:
            res["foreign_cores"] = round(max(0.0, res["foreign_cores"] - res["driver_cores"]), 2)
    if finished:
        for out_path in finished:  # what the run was like, for whoever reuses the output
            system = out_path.name.split("-")[0]
            out_path.with_suffix(".meta.json").write_text(json.dumps(
                {"wall_s": infos[system]["wall_s"], "cpu": res, "parallel": parallel}))
    elif reused_cpu:
        # Nothing ran now: report the conditions of the run that made the reused outputs.
        first = next(iter(reused_cpu.values()))
        res = dict(first) if first else {}
        res["reused"] = True
    infos["cpu"] = res
    infos["parallel"] = parallel
    return infos


def score_reference(
    system: str,
    out_path: Path,
    convs: list[dict[str, Any]],
    scores: Scores,
    wall: float,
) -> dict[str, Any]:
    out = json.loads(out_path.read_text(encoding="utf-8"))
    info: dict[str, Any] = {
        "version": out.get("version"),
        "wall_s": round(wall, 1),
        "ingest_s": round(out.get("ingest_s", 0.0), 2),
        "systems": [r["system"] for r in out["runs"]],
        "unmapped_items": 0,
        "stats": {n: c.get("stats") for n, c in out["runs"][0]["conversations"].items()},
    }
    if "warm_s" in out:
        info["embed_cache_warm_s"] = round(out["warm_s"], 2)
    if "returned_tokens_check" in out:
        bad = [c for c, t in out["returned_tokens_check"] if estimate_tokens(c) != t]
        info["token_counter_matches_hivemem"] = not bad
    for run in out["runs"]:
        name = run["system"]
        for conv in convs:
            got = run["conversations"][conv["name"]]
            tokens = {t["dia_id"]: estimate_tokens(t["content"]) for t in conv["turns"]}
            for q in conv["questions"]:
                ranked_ids = got["ranked"][q["qid"]]
                info["unmapped_items"] += sum(1 for d in ranked_ids if d not in tokens)
                if "budget" in got:  # native budgets (gleanr)
                    sets = {b: got["budget"][str(b)][q["qid"]] for b in BUDGETS}
                else:  # mneno: its context order, packed with hivemem's estimate
                    order = [d for d, _words in got["context_order"][q["qid"]]]
                    sets = {b: pack_greedy(order, tokens, b) for b in BUDGETS}
                    # Did the order hold enough for the largest budget? (If not, mneno had
                    # nothing more to give: it ran out of candidates, not of budget.)
                    short = sum(tokens.get(d, 0) for d in order) < max(BUDGETS)
                    key = f"{name}_orders_shorter_than_max_budget"
                    info[key] = info.get(key, 0) + short
                toks = {b: sum(tokens.get(d, 0) for d in sets[b]) for b in BUDGETS}
                scores.add(name, q, [[d] for d in ranked_ids], sets, toks)
        scores.latency_ms[name] = run["latency_ms"]["rank"]
        if run["latency_ms"].get("budget"):
            scores.budget_latency_ms[name] = run["latency_ms"]["budget"]
    return info
