"""Foreground first: recall does not wait behind the pipeline's work in the same process.

In the embedded mode the pipeline's stages (embed, window, boundary, reflect) are threads of
the caller's process: one interpreter, one GIL. A recall that gives the GIL up for an engine
search or a Redis reply waits for it again behind whichever stage holds it, up to the
interpreter's switch interval (5 ms) each time, and a recall makes about ten such calls;
reflection that works through a backlog holds it nearly all the time (measured: recall
p50 1.3 s while 30k episodes were reflected).

`Foreground` is the one gate between the two. A recall runs `with foreground.serving():`;
background stages call `foreground.pause()` between their units of work (a batch of
stream entries, a reflection job). While any recall runs:
- `pause()` holds a background thread at its next boundary until no recall runs, for at
  most `max_pause_s` at a time (its bounded share: a steady stream of recalls slows the
  pipeline, it never stops it);
- the interpreter's switch interval is `switch_interval_s` (0.5 ms): a background thread
  still inside its unit gives the GIL back to the recall within that, not within 5 ms;
- background work outside this interpreter (embedded mode's reflection process) is held
  through the holds added with `add_hold`: `hold()` when the first recall starts,
  `release()` when the last one ends (`hivemem.runtime.process_share` bounds its share).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol


class Hold(Protocol):
    """Background work outside this interpreter that gives way while recalls run."""

    def hold(self) -> None: ...

    def release(self) -> None: ...


class Foreground:
    def __init__(self, *, max_pause_s: float = 0.25, switch_interval_s: float = 0.0005
                 ) -> None:
        self.max_pause_s = max_pause_s
        self.switch_interval_s = switch_interval_s
        self._active = 0
        self._idle = threading.Condition()
        self._saved_interval: float | None = None
        self._holds: list[Hold] = []
        self.paused_s = 0.0  # time background threads spent held back (for benchmarks)

    def add_hold(self, hold: Hold) -> None:
        with self._idle:
            self._holds.append(hold)

    def remove_hold(self, hold: Hold) -> None:
        with self._idle:
            if hold in self._holds:
                self._holds.remove(hold)
                hold.release()

    @contextmanager
    def serving(self) -> Iterator[None]:
        """Around a foreground call (a recall)."""
        with self._idle:
            self._active += 1
            if self._active == 1:
                for hold in self._holds:
                    hold.hold()
                if self.switch_interval_s:
                    self._saved_interval = sys.getswitchinterval()
                    sys.setswitchinterval(self.switch_interval_s)
        try:
            yield
        finally:
            with self._idle:
                self._active -= 1
                if not self._active:
                    for hold in self._holds:
                        hold.release()
                    if self._saved_interval is not None:
                        sys.setswitchinterval(self._saved_interval)
                        self._saved_interval = None
                    self._idle.notify_all()

    @property
    def busy(self) -> bool:
        return self._active > 0

    def pause(self) -> None:
        """For a background thread between two units of work: wait while a recall runs
        (at most `max_pause_s`)."""
        if not self._active:
            return
        started = time.perf_counter()
        with self._idle:
            self._idle.wait_for(lambda: not self._active, timeout=self.max_pause_s)
        self.paused_s += time.perf_counter() - started
