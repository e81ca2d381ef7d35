"""The benchmarks' shared harness: one module per job.

- paths: where inputs and results live; env: the offline model cache;
- machine: what a number was measured on, and how busy the shared machine was;
- timing: percentiles; results: latest/ + dated archive/; references: the reference venvs;
- locomo_data: LoCoMo turns and questions; settle: waiting for the pipeline (public API).

Imports only hivemem's public modules (pinned by tests/unit/test_bench_layout.py).
"""

from harness.env import MODEL, model_cache, offline_model_env
from harness.locomo_data import locomo_conversations, locomo_questions, locomo_turns
from harness.machine import (
    CpuMonitor,
    PausedBackground,
    cpu_facts,
    git_state,
    machine_facts,
    wait_for_quiet,
)
from harness.paths import (
    ARCHIVE,
    BENCH,
    LATEST,
    LOCOMO,
    MODEL_CACHE,
    QUICK,
    REPO,
    RESULTS,
    RESULTS_ROOT,
    SHARED,
)
from harness.references import (
    DEFAULT_PYTHON,
    REFERENCE_VERSIONS,
    exit_unless_references_run,
    run_adapter,
)
from harness.results import archive_latest, results_dir, write_result
from harness.settle import stage_backlog, wait_for_windows
from harness.timing import Samples, percentile, summarize
from hivemem.testing import RedisServer

__all__ = [
    "ARCHIVE", "BENCH", "DEFAULT_PYTHON", "LATEST", "LOCOMO", "MODEL", "MODEL_CACHE", "QUICK",
    "REFERENCE_VERSIONS", "REPO", "RESULTS", "RESULTS_ROOT", "SHARED", "CpuMonitor", "PausedBackground",
    "RedisServer",
    "Samples", "archive_latest", "cpu_facts", "exit_unless_references_run", "git_state",
    "locomo_conversations", "locomo_questions", "locomo_turns", "machine_facts", "model_cache",
    "offline_model_env", "percentile", "results_dir", "run_adapter", "stage_backlog", "summarize",
    "wait_for_quiet", "wait_for_windows", "write_result",
]
