#!/usr/bin/env python
"""One LLM-slice table from several runs of bench/probes/llm_reflection.py.

    python bench/probes/llm_slice_merge.py OLD.json NEW.json [--name NAME]

A slice of 30 conversations through a 0.5B model on a shared 2-core box takes longer than a
session; runs are stopped part way. This puts the runs' conversations together: for each
conversation, its probes from the *last* run given that played it in both modes, for the
heuristic alone and the LLM on top, so the two systems are always compared on the same
conversation from the same run. Per mode: strict / ranked per category, overall, and every
probe where the LLM on top differs from the heuristic. Which run each conversation came
from is in the output. Writes bench/results/latest/NAME.{json,md}.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[1] / "results" / "latest"


def played(run: dict[str, Any]) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Conversation -> "<system> <mode>" -> its probes, for conversations every system
    and mode of the run played."""
    out: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(dict)
    for key, system_run in run["runs"].items():
        for probe in system_run["probes"]:
            out[probe["conversation"]].setdefault(key, []).append(probe)
    complete = set(run.get("conversations_played", []))
    return {c: probes for c, probes in out.items()
            if c in complete and len(probes) == len(run["runs"])}


def tally(probes: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    cats: dict[str, dict[str, int]] = defaultdict(lambda: {"probes": 0, "strict": 0,
                                                           "ranked": 0})
    for p in probes:
        for name in (p["category"], "overall"):
            cats[name]["probes"] += 1
            cats[name]["strict"] += bool(p["strict"])
            cats[name]["ranked"] += bool(p["ranked"])
    return dict(cats)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="slice JSONs, oldest first")
    ap.add_argument("--name", default="change-llm-slice-merged")
    args = ap.parse_args()
    chosen: dict[str, tuple[str, dict[str, list[dict[str, Any]]]]] = {}
    keys: list[str] = []
    for path in args.runs:
        run = json.loads(path.read_text())
        keys = keys or list(run["runs"])
        if list(run["runs"]) != keys:
            raise SystemExit(f"{path}: other systems or modes than {keys}")
        for conversation, probes in played(run).items():
            chosen[conversation] = (path.name, probes)
    modes = sorted({k.rsplit(" ", 1)[1] for k in keys})
    systems = list(dict.fromkeys(k.rsplit(" ", 1)[0] for k in keys))
    scores: dict[str, dict[str, dict[str, dict[str, int]]]] = {}
    differences = []
    for mode in modes:
        scores[mode] = {}
        for system in systems:
            probes = [p for _r, by in chosen.values() for p in by[f"{system} {mode}"]]
            scores[mode][system] = tally(probes)
        base, *others = systems
        for conversation, (_run, by) in sorted(chosen.items()):
            for other in others:
                for a, b in zip(by[f"{base} {mode}"], by[f"{other} {mode}"], strict=True):
                    for verdict in ("strict", "ranked"):
                        if a[verdict] != b[verdict]:
                            differences.append({
                                "mode": mode, "system": other, "verdict": verdict,
                                "better": bool(b[verdict]), "conversation": conversation,
                                "after_turn": a["after_turn"], "category": a["category"],
                                "query": a["query"]})
    out = {"runs": [str(p) for p in args.runs], "systems": systems,
           "conversations": {c: r for c, (r, _b) in sorted(chosen.items())},
           "scores": scores, "differences_from_heuristic": differences}
    (RESULTS / f"{args.name}.json").write_text(json.dumps(out, indent=2) + "\n")
    lines = [f"# LLM slice, merged ({len(chosen)} conversations)", "",
             "Runs (a conversation is taken from the last run that played it): "
             + ", ".join(f"`{p.name}`" for p in args.runs), ""]
    for mode in modes:
        cats = [c for c in scores[mode][systems[0]] if c != "overall"] + ["overall"]
        lines += [f"## {mode}", "", "| category | probes | " + " | ".join(systems) + " |",
                  "|---|---:|" + "---:|" * len(systems)]
        for cat in cats:
            cells = [scores[mode][s].get(cat) for s in systems]
            probes = next(c["probes"] for c in cells if c)
            lines.append(f"| {cat} | {probes} | " + " | ".join(
                f"{c['strict']} / {c['ranked']}" if c else "-" for c in cells) + " |")
        lines.append("")
    lines += ["Cells: strict / ranked probes passed.", "", "## Differences from the heuristic",
              ""]
    lines += [f"- {d['mode']} {d['conversation']}@{d['after_turn']} [{d['category']}] "
              f"{d['verdict']}: {'better' if d['better'] else 'worse'} ({d['query']})"
              for d in differences] or ["- none"]
    lines += ["", "## Conversations and their runs", ""]
    lines += [f"- {c}: `{r}`" for c, (r, _b) in sorted(chosen.items())]
    (RESULTS / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
