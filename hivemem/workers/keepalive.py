"""Keeping a batch alive while its handler works on it.

A worker that holds entries longer than `claim_idle_ms` (a big embed batch on a slow or
busy CPU) would look dead: its partition leases expire, another worker takes the partitions,
reclaims the entries it is still working on and does the work a second time. While a batch
is in hand, a `Keepalive` thread renews the worker's leases and resets the entries' idle time
every third of `claim_idle_ms`. A worker that really dies stops its keepalive with it, so
its entries are reclaimed as before.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import structlog

from hivemem.errors import StoreUnavailable

log = structlog.get_logger(__name__)


class Keepalive:
    """`with keepalive.holding(entries): handle(entries)` calls `renew(entries)` every
    `interval_s` for as long as the block runs (never when it is shorter than that)."""

    def __init__(self, interval_s: float, renew: Callable[[Sequence[Any]], None],
                 *, name: str = "hivemem-keepalive") -> None:
        self.interval_s = interval_s
        self._renew = renew
        self._name = name
        self._cond = threading.Condition()
        self._held: Sequence[Any] | None = None
        self._due = 0.0
        self._closed = False
        self._thread: threading.Thread | None = None
        # Held while a renewal runs: leaving `holding` waits for it, so the worker's next
        # lease refresh never races a renewal made with the partitions it owned before.
        self._renewing = threading.Lock()
        self.renewals = 0

    @contextmanager
    def holding(self, entries: Sequence[Any]) -> Iterator[None]:
        with self._cond:
            self._held = entries
            self._due = time.monotonic() + self.interval_s
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._loop, name=self._name,
                                                daemon=True)
                self._thread.start()
            self._cond.notify()
        try:
            yield
        finally:
            with self._cond:
                self._held = None
            with self._renewing:
                pass

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._closed and (
                        self._held is None or time.monotonic() < self._due):
                    wait = None if self._held is None else self._due - time.monotonic()
                    self._cond.wait(wait)
                if self._closed:
                    return
                held = self._held
                self._due = time.monotonic() + self.interval_s
            try:
                with self._renewing:
                    if self._held is not held:  # the batch ended meanwhile: nothing to keep
                        continue
                    self._renew(held or ())
                self.renewals += 1
            except StoreUnavailable as exc:
                # Only a lease renewal missed: if Redis stays away the entries are
                # reclaimed and handled again, which the handlers tolerate (idempotent).
                log.warning("worker.keepalive_failed", error=str(exc))
