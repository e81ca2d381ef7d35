"""Waiting for the pipeline through the public API (`Admin.pipeline_status`), never its keys."""

from __future__ import annotations

import time
from typing import Any


def stage_backlog(client: Any, stage: str) -> int:
    """Entries the stage has not finished (lag + pending), from `pipeline_status()`."""
    for status in client.admin.pipeline_status().stages:
        if status.stage == stage:
            return int(status.lag + status.pending)
    return 0


def wait_for_windows(client: Any, timeout: float = 900) -> float | None:
    """With `window_mode: refined`, wait until the window stage has refined every turn.
    Seconds waited; None: not refined mode."""
    if client.settings.embedding.window_mode != "refined":
        return None
    t0 = time.perf_counter()
    while stage_backlog(client, "window"):
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError("window stage did not catch up")
        time.sleep(0.05)
    return time.perf_counter() - t0
