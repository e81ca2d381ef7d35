"""Where the benchmarks find their inputs (model cache, LoCoMo) and put their results."""

from __future__ import annotations

import os
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent
REPO = BENCH.parent
SHARED = REPO.parent / "shared"
MODEL_CACHE = SHARED / "models" / "fastembed_cache"
LOCOMO = SHARED / "data" / "locomo-dev"
# HIVEMEM_BENCH_RESULTS moves every result elsewhere (bench/ab.py runs a goal twice that way).
RESULTS_ROOT = Path(os.environ.get("HIVEMEM_BENCH_RESULTS") or BENCH / "results")
LATEST = RESULTS_ROOT / "latest"
ARCHIVE = RESULTS_ROOT / "archive"
QUICK = RESULTS_ROOT / "quick"  # --quick runs: smoke tests, not committed
# Scripts that write their own files (probes, bench/change.py) write here, next to the goals.
RESULTS = LATEST
