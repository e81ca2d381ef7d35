#!/usr/bin/env python
"""The scope check before the recall (a Redis round trip of its own, as before 2026-12-07)
against the check in the recall's first Redis read (`Recaller.recall(check_owner=True)`),
paired in one process on LoCoMo.

    python bench/probes/scope_check_pair.py --conversations 41 26 30 --passes 3

Builds the conversations in the embedded default (real model, settled), then asks every
question through both paths, alternating which goes first, `--passes` times, with other
work's niced processes paused; prints p50 / p95 / mean per path and the paired difference
(same question, same moment: robust to a noisy machine where two separate runs are not).
Not run in CI.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: harness, suites

from harness import PausedBackground, wait_for_windows
from suites.locomo.data import load_dataset
from suites.locomo.hivemem_run import _payload

from hivemem import MemoryClient
from hivemem.config import Settings
from hivemem.domain.models import RecallResult
from hivemem.domain.recall.policy import resolve_policy
from hivemem.domain.scope import Scope


def percentiles(values: list[float]) -> tuple[float, float, float]:
    v = sorted(values)
    return (round(v[len(v) // 2], 3), round(v[int(len(v) * 0.95)], 3),
            round(statistics.mean(v), 3))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--conversations", nargs="+", default=["41", "26", "30"])
    ap.add_argument("--passes", type=int, default=3)
    args = ap.parse_args()
    convs, _notes = load_dataset(args.conversations, None)
    with tempfile.TemporaryDirectory() as folder, \
            MemoryClient.local(Path(folder) / "m", Settings()) as client:
        for conv in convs:
            session = f"locomo-{conv['name']}"
            client.ingest_many(_payload(conv, session))
            client.wait_until_processed(session, timeout=900)
            client.wait_until_processed(session, timeout=300, stage="boundary")
            client.wait_until_reflected(session, timeout=600)
        wait_for_windows(client)
        questions = [(f"locomo-{c['name']}", q["question"]) for c in convs
                     for q in c["questions"]]
        reads = client._service.reads  # (the two paths are internal)
        recaller = reads.recaller()
        scope = Scope(namespace="default")
        policy = resolve_policy(None, reads.parts.settings.recall.default_preset
                                ).model_copy(update={"limit": 20})
        gate = reads.parts.foreground

        def before(session: str, query: str) -> RecallResult:
            with gate.serving():
                reads.access.require(scope, session)
                return recaller.recall(session, query, 2000, policy, access=scope)

        def within(session: str, query: str) -> RecallResult:
            with gate.serving():
                return recaller.recall(session, query, 2000, policy, access=scope,
                                       check_owner=True)

        for session, query in questions[:20]:  # warm-up, and the same answers both ways
            assert [i.content for i in before(session, query)] == [
                i.content for i in within(session, query)]
        paths = {"before": before, "within": within}
        ms: dict[str, list[float]] = {name: [] for name in paths}
        with PausedBackground(True):
            for n in range(args.passes):
                for i, (session, query) in enumerate(questions):
                    order = list(paths) if (i + n) % 2 == 0 else list(reversed(paths))
                    for name in order:
                        t0 = time.perf_counter()
                        paths[name](session, query)
                        ms[name].append((time.perf_counter() - t0) * 1000)
    for name, values in ms.items():
        p50, p95, mean = percentiles(values)
        print(f"check {name:6s} the recall: p50 {p50} p95 {p95} mean {mean} ms")
    saved = np.array(ms["before"]) - np.array(ms["within"])
    print(f"paired (before - within): mean {saved.mean():.3f} median {np.median(saved):.3f}"
          f" ms; within faster in {(saved > 0).mean() * 100:.1f}% of pairs")


if __name__ == "__main__":
    main()
