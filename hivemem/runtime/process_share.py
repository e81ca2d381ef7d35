"""A background process's bounded share of the machine while foreground work runs.

Embedded mode's reflection process (`hivemem.runtime.reflect_process`) competes with the
owner's recalls for the cores. A fixed lower CPU priority (`nice`) made it give way, but
also lose to every other process on a busy machine: it reflected at half the thread's pace
(issue 40's notes). Instead the owner holds it (SIGSTOP) while a recall runs and lets it go
(SIGCONT) when the recall ends: the recall meets free cores, and reflection runs at full
speed whenever no recall runs.

The hold is bounded, so that a steady stream of recalls slows reflection, never stops it:
holding spends a budget of seconds that the process earns back while it runs, at
`(1 - min_share) / min_share` seconds per second, up to `max_hold_s`. Over any stretch of
wall time T the process therefore runs at least `min_share * T - max_hold_s`, and one hold
lasts at most `max_hold_s` (a thread of this class lets the process go when the budget
runs out mid-recall). With no budget left a recall starts without a hold.

The end of a hold is the pacer's: `release()` only marks it, and the pacer thread sends
the SIGCONT. Continuing a process that has work wakes it, and the kernel may run it at once
in place of the thread that sent the signal (measured under load: p95 0.45 ms for the
`kill` call itself), which was the recall's own thread, inside its timed path. A recall
that starts before the pacer got to it keeps the process held (no signal at all).

A stopped process cannot watch for its owner's death itself: it asks the kernel for a
SIGCONT when its parent goes (`continue_on_parent_death`), then sees it is orphaned.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Callable

import structlog

log = structlog.get_logger(__name__)

# A hold shorter than this is not worth two signals: a recall starts without one.
MIN_HOLD_S = 0.005
PR_SET_PDEATHSIG = 1


class ProcessShare:
    """`hold()` / `release()` around foreground work (`Foreground.add_hold`); `attach(pid)`
    names the process (None: none); `close()` lets it go for good."""

    def __init__(self, *, min_share: float = 0.25, max_hold_s: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not 0 < min_share <= 1:
            raise ValueError("min_share: above 0, at most 1")
        self.min_share = min_share
        self.max_hold_s = max_hold_s
        # Budget earned per second the process runs.
        self.rate = (1 - min_share) / min_share
        self._clock = clock
        self._cond = threading.Condition()
        self._pid: int | None = None
        self._held = False
        self._releasing = False  # the recall ended: the pacer lets the process go
        self._budget = max_hold_s
        self._last = clock()
        self._closed = False
        # What happened (for benchmarks and tests).
        self.holds = 0  # recalls that held the process
        self.skipped = 0  # recalls that found no budget left: the process ran on
        self.cut = 0  # holds ended by the budget, not by the recall
        self.held_s = 0.0
        self._pacer = threading.Thread(target=self._pace, name="hivemem-share-pacer",
                                       daemon=True)
        self._pacer.start()

    def _settle(self, now: float) -> None:
        """Account the time since the last look: spent while held, earned while running."""
        elapsed = max(0.0, now - self._last)
        self._last = now
        if self._held:
            self._budget -= elapsed
            self.held_s += elapsed
        else:
            self._budget = min(self.max_hold_s, self._budget + elapsed * self.rate)

    def _signal(self, sig: signal.Signals) -> None:
        if self._pid is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self._pid, sig)

    def _let_go(self) -> None:
        self._releasing = False
        if self._held:
            self._signal(signal.SIGCONT)
            self._held = False

    @property
    def held(self) -> bool:
        """Held for a recall now (not counting a release the pacer has yet to send)."""
        return self._held and not self._releasing

    def attach(self, pid: int | None) -> None:
        """The process to hold from now on (a restarted one), None: none. The one before
        is let go first."""
        with self._cond:
            self._settle(self._clock())
            self._let_go()
            self._pid = pid

    def hold(self) -> None:
        """Foreground work starts: stop the process if the budget allows."""
        with self._cond:
            if self._closed or self._pid is None or self.min_share >= 1:
                return
            if self._held and not self._releasing:
                return
            self._settle(self._clock())
            if self._budget < MIN_HOLD_S:
                self._let_go()  # a release still pending: now
                self.skipped += 1
                return
            if self._held:  # released, not yet let go: stays held, no signal
                self._releasing = False
                self.holds += 1
                self._cond.notify_all()
                return
            self._signal(signal.SIGSTOP)
            self._held = True
            self.holds += 1
            self._cond.notify_all()  # the pacer times this hold

    def release(self) -> None:
        """Foreground work ended: the pacer lets the process go (off the caller's path)."""
        with self._cond:
            if not self._held or self._releasing:
                return
            self._settle(self._clock())
            self._releasing = True
            self._cond.notify_all()

    def _pace(self) -> None:
        with self._cond:
            while not self._closed:
                if not self._held:
                    self._cond.wait()
                    continue
                self._settle(self._clock())
                if self._releasing:
                    self._let_go()
                    continue
                if self._budget <= 0:
                    self._let_go()
                    self.cut += 1
                    continue
                self._cond.wait(self._budget)

    def close(self) -> None:
        """Let the process go and stop holding it (before it is asked to end: a stopped
        process does not act on SIGTERM)."""
        with self._cond:
            self._settle(self._clock())
            self._let_go()
            self._closed = True
            self._pid = None
            self._cond.notify_all()
        self._pacer.join(timeout=5)

    def stats(self) -> dict[str, float]:
        with self._cond:
            self._settle(self._clock())
            return {"holds": self.holds, "skipped": self.skipped, "cut": self.cut,
                    "held_s": round(self.held_s, 3)}


def continue_on_parent_death() -> bool:
    """In a held child: ask the kernel for SIGCONT when the parent (the thread that started
    us) ends, so that a child stopped by an owner killed with kill -9 runs again and can
    notice it is orphaned. Linux only; False elsewhere or when it fails."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGCONT), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False
