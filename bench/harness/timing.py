"""Timing and percentiles: every latency the goals report goes through `summarize`."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank-with-interpolation percentile of an already sorted list."""
    if not sorted_values:
        return float("nan")
    if len(sorted_values) == 1:
        return sorted_values[0]
    k = (len(sorted_values) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


def summarize(values_ms: list[float]) -> dict[str, float]:
    v = sorted(values_ms)
    return {
        "n": len(v),
        "mean": round(sum(v) / len(v), 4) if v else float("nan"),
        "p50": round(percentile(v, 50), 4),
        "p90": round(percentile(v, 90), 4),
        "p95": round(percentile(v, 95), 4),
        "p99": round(percentile(v, 99), 4),
        "max": round(v[-1], 4) if v else float("nan"),
    }


class Samples:
    """Milliseconds per call, collected with `with samples.timed(): ...`."""

    def __init__(self) -> None:
        self.ms: list[float] = []

    @contextmanager
    def timed(self) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.ms.append((time.perf_counter() - t0) * 1000)

    def summary(self) -> dict[str, float]:
        return summarize(self.ms)
