"""The lifecycle sweep: retention applied every `lifecycle.retention_interval_s`, by one
process a round (a lease in Redis), as a thread of the embedded owner or of a reflect
worker. Each round is an ordinary forget per namespace (`Forgetting.apply_retention`):
written down first, finished by the next process if this one dies."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from typing import Any

import structlog

log = structlog.get_logger(__name__)


class RetentionSweep:
    def __init__(self, apply: Callable[[], list[Any]], take_round: Callable[[str, int], bool],
                 interval_s: float) -> None:
        self.apply = apply
        self.take_round = take_round
        self.interval_s = interval_s
        self.owner = f"{socket.gethostname()}:{os.getpid()}"
        self._stop = threading.Event()
        self.rounds = 0

    def run_once(self) -> int:
        """One round if this process gets it; returns how many forgets it ran."""
        if not self.take_round(self.owner, max(1, int(self.interval_s * 1000) - 50)):
            return 0
        done = self.apply()
        self.rounds += 1
        log.info("retention.swept", forgets=len(done))
        return len(done)

    def run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.run_once()
            except Exception as exc:  # the next round tries again
                log.warning("retention.failed", error=str(exc)[:300])

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, name="hivemem-retention", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self._stop.set()
