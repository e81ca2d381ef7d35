#!/usr/bin/env python
"""Recall's CPU per call in two source trees, paired recall by recall: both trees' recalls
run in lockstep (one process each, the order alternated question by question), so both
see the same load. On a shared 2-core box `recall_identity.py cpu` run tree after tree
moved ±15% between runs of one tree (load 10-17); paired, a 5% change shows.

    python bench/probes/recall_lockstep.py /tmp/locomo26 /tmp/base /work/mine [PASSES]

The store as `recall_identity.py build` makes it (LoCoMo conversation 26), each tree
recalling from its own copy with the query vectors cached after a first pass (excl. the
embedding, as `recall_identity.py cpu`). Per tree: p50/p95/mean of process CPU per recall
(its helper thread included) over PASSES x 150 recalls, and per question the least of its
passes (least disturbed); then the median over questions of the second tree's least over
the first's. The load average is noted per pass.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def worker(folder: Path) -> None:
    """Recall question i for each line "i" on stdin; print its CPU ms."""
    sys.path.insert(0, str(Path.cwd() / "bench"))
    sys.path.insert(0, str(Path.cwd() / "bench" / "probes"))
    from harness import offline_model_env

    offline_model_env()
    import locomo_arms as la
    from recall_identity import CachedQueries

    from hivemem import MemoryClient
    from hivemem.config import Settings

    convs, _ = la.load_dataset(["26"])
    questions = [q["question"] for q in convs[0]["questions"]]
    tmp = Path(tempfile.mkdtemp(prefix="hivemem-lockstep-"))
    shutil.copytree(folder, tmp / "copy")
    client = MemoryClient.local(tmp / "copy" / "memory", Settings())
    try:
        with la.ARMS["defaults"](client):
            recaller = client._service.reads.recaller()  # (an internal: a probe)
            recaller.embedder = CachedQueries(recaller.embedder)
            for q in questions:  # embeds each question once
                client.recall("locomo-26", q, la.BIG_BUDGET, limit=max(la.KS))
            print(json.dumps({"ready": len(questions)}), flush=True)
            for line in sys.stdin:
                started = time.process_time()
                client.recall("locomo-26", questions[int(line)], la.BIG_BUDGET,
                              limit=max(la.KS))
                print(json.dumps((time.process_time() - started) * 1000), flush=True)
    finally:
        client.close()
        shutil.rmtree(tmp, ignore_errors=True)


def _summary(runs: list[list[float]]) -> dict[str, float]:
    flat = sorted(x for run in runs for x in run)
    least = sorted(min(run[i] for run in runs) for i in range(len(runs[0])))
    return {"n": len(flat), "cpu_ms_p50": round(flat[len(flat) // 2], 3),
            "cpu_ms_p95": round(flat[int(len(flat) * 0.95)], 3),
            "cpu_ms_mean": round(sum(flat) / len(flat), 3),
            "least_per_question_mean": round(sum(least) / len(least), 3)}


def main() -> None:
    if sys.argv[1] == "worker":
        worker(Path(sys.argv[2]))
        return
    folder, first, second = sys.argv[1], sys.argv[2], sys.argv[3]
    passes = int(sys.argv[4]) if len(sys.argv) > 4 else 6
    trees = (first, second)
    procs = {t: subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "worker", folder], cwd=t,
        env={**os.environ, "PYTHONPATH": t}, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True) for t in trees}
    try:
        n = min(json.loads(p.stdout.readline())["ready"]  # type: ignore[union-attr]
                for p in procs.values())
        cpu: dict[str, list[list[float]]] = {t: [] for t in trees}
        loads = []
        for k in range(passes):
            loads.append(round(os.getloadavg()[0], 2))
            for t in trees:
                cpu[t].append([0.0] * n)
            for i in range(n):
                for t in trees if (i + k) % 2 == 0 else trees[::-1]:
                    proc: Any = procs[t]
                    proc.stdin.write(f"{i}\n")
                    proc.stdin.flush()
                    cpu[t][k][i] = json.loads(proc.stdout.readline())
    finally:
        for p in procs.values():
            p.stdin.close()  # type: ignore[union-attr]
            p.wait()
    least = {t: [min(run[i] for run in cpu[t]) for i in range(n)] for t in trees}
    ratios = sorted(b / a for a, b in zip(least[first], least[second], strict=True))
    print(json.dumps({"loads": loads, first: _summary(cpu[first]),
                      second: _summary(cpu[second]),
                      "second_over_first_median": round(ratios[n // 2], 3)}, indent=1))


if __name__ == "__main__":
    main()
