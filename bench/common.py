"""Kept for bench/change.py (owned elsewhere until the lead folds it into the harness): the old
helper names, re-exported from bench/harness/. New code imports `harness` directly."""

from harness import (
    LOCOMO,
    MODEL_CACHE,
    REFERENCE_VERSIONS,
    RESULTS,
    CpuMonitor,
    RedisServer,
    cpu_facts,
    exit_unless_references_run,
    locomo_conversations,
    locomo_questions,
    locomo_turns,
    machine_facts,
    offline_model_env,
    percentile,
    summarize,
    wait_for_quiet,
    wait_for_windows,
)

__all__ = [
    "LOCOMO", "MODEL_CACHE", "REFERENCE_VERSIONS", "RESULTS", "CpuMonitor", "RedisServer",
    "cpu_facts", "exit_unless_references_run", "locomo_conversations", "locomo_questions",
    "locomo_turns", "machine_facts", "offline_model_env", "percentile", "summarize",
    "wait_for_quiet", "wait_for_windows",
]
