#!/usr/bin/env python
"""Marker detection quality: hivemem's rules vs a gleanr-like prefix-only baseline.

    /work/venv/bin/python bench/probes/markers.py

1. Precision / recall / F1 per marker (and support) on tests/data/markers_labelled.jsonl, for
   `hivemem.domain.markers.detect_markers` and for a baseline that only sees a leading
   "Decision:" / "Constraint:" / "Failure:" / "Goal:" (what gleanr detects).
2. Held-out sanity check: how many LoCoMo turns (../shared/data/locomo-dev/*.json, raw turn text)
   get each marker, per 1000 turns, with 5 seeded random examples per marker for a human to judge.
3. Throughput of detect_markers on those turns.

Results: printed, and saved as JSON to bench/results/markers.json.
"""

from __future__ import annotations

import json
import random
import re
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: harness, suites

from harness import RESULTS, locomo_conversations

from hivemem.domain.markers import ORDER, detect_markers

LABELLED = Path(__file__).resolve().parents[2] / "tests" / "data" / "markers_labelled.jsonl"
SEED = 1234
EXAMPLES = 5
_BASELINE = re.compile(r"^(Decision|Constraint|Failure|Goal)\s*:", re.IGNORECASE)
_SESSION = re.compile(r"session_\d+")


def baseline(content: str) -> tuple[str, ...]:
    """gleanr-style: a marker only when the turn starts with its label."""
    m = _BASELINE.match(content.strip())
    return (m.group(1).lower(),) if m else ()


def load_labelled() -> list[dict[str, Any]]:
    with open(LABELLED, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def scores(rows: list[dict[str, Any]], detect: Any) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    predicted = [set(detect(r["text"])) for r in rows]
    for marker in ORDER:
        tp = sum(1 for r, p in zip(rows, predicted, strict=True)
                 if marker in p and marker in r["markers"])
        fp = sum(1 for r, p in zip(rows, predicted, strict=True)
                 if marker in p and marker not in r["markers"])
        support = sum(1 for r in rows if marker in r["markers"])
        precision = tp / (tp + fp) if tp + fp else 0.0
        recall = tp / support if support else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        out[marker] = {"precision": round(precision, 3), "recall": round(recall, 3),
                       "f1": round(f1, 3), "support": support, "tp": tp, "fp": fp}
    return out


def locomo_turn_texts() -> list[str]:
    texts: list[str] = []
    for conv in locomo_conversations():
        for key, turns in conv["data"].items():
            if _SESSION.fullmatch(key) and isinstance(turns, list):
                texts.extend(t["text"] for t in turns)
    return texts


HELD_OUT = LABELLED.with_name("markers_heldout.jsonl")


def report(title: str, key: str, rows: list[dict[str, Any]], res: dict[str, Any]) -> None:
    empty = sum(1 for r in rows if not r["markers"])
    print(f"{title}: {len(rows)} sentences ({empty} with no marker)\n")
    res[key] = {"n": len(rows), "no_marker": empty}
    for name, fn in (("hivemem", detect_markers), ("baseline_prefix", baseline)):
        res[key][name] = s = scores(rows, fn)
        print(f"{name:<16} {'marker':<11} {'P':>6} {'R':>6} {'F1':>6} {'support':>8} {'FP':>4}")
        for marker in ORDER:
            v = s[marker]
            print(f"{'':<16} {marker:<11} {v['precision']:>6.3f} {v['recall']:>6.3f} "
                  f"{v['f1']:>6.3f} {v['support']:>8} {v['fp']:>4}")
        print()


def main() -> int:
    res: dict[str, Any] = {}
    report("labelled set (rules written against it)", "labelled", load_labelled(), res)
    with open(HELD_OUT, encoding="utf-8") as fh:
        held_out = [json.loads(line) for line in fh if line.strip()]
    report("held-out set (written after the rules, never tuned on)", "held_out", held_out, res)

    texts = locomo_turn_texts()
    started = time.perf_counter()
    detected = [detect_markers(t) for t in texts]
    elapsed = time.perf_counter() - started
    rng = random.Random(SEED)
    locomo: dict[str, Any] = {"turns": len(texts), "per_marker": {},
                              "turns_per_second": round(len(texts) / elapsed)}
    print(f"LoCoMo held-out: {len(texts)} turns, detect_markers at "
          f"{locomo['turns_per_second']:,} turns/s")
    for marker in ORDER:
        hits = [t for t, d in zip(texts, detected, strict=True) if marker in d]
        rate = 1000 * len(hits) / len(texts)
        examples = rng.sample(hits, min(EXAMPLES, len(hits)))
        base = sum(1 for t in texts if marker in baseline(t))
        locomo["per_marker"][marker] = {"turns": len(hits), "per_1000": round(rate, 1),
                                        "baseline_turns": base, "examples": examples}
        print(f"\n{marker}: {len(hits)} turns = {rate:.1f} per 1000 (baseline: {base})")
        for ex in examples:
            print(f"  - {ex}")
    res["locomo"] = locomo

    out_path = RESULTS / "markers.json"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(res, indent=2) + "\n", encoding="utf-8")
    print(f"\nresults in {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
