"""Embedded mode's reflection in a process of its own, supervised by the owner.

Measured (bench/probes/catchup_wait.py): while reflection works through a backlog in a
thread of the caller's process, a recall's extra wall time is half GIL, half time on the OS
run queue (its thread runnable, the cores taken). A thread cannot be held off the cores
mid-job (it would keep the GIL while stopped); a process can, and shares no interpreter
with the recalls. So reflection runs here, and while a recall runs in the owner the process
is held (SIGSTOP, then SIGCONT when the recall ends) within a bounded share
(`hivemem.runtime.process_share`: a steady stream of recalls leaves it at least
`embedded.reflect_min_share` of the wall time; with no recall it runs at full speed, at the
owner's CPU priority). A fixed lower priority (`nice` +10, the first version) gave way to
every other process of a busy machine too, and reflected at half the thread's pace.
Its vector calls come back to the owner over a private owner API (only the owner may open
the Qdrant Edge shard), each held back while a recall runs (`GatedVectorStore`).

The owner's promises stay: one command (the process is started and stopped with the
owner), clean shutdown (`stop` ends it after the job it runs, then the API), a crash of the
process is logged and it is started again (with back-off), the owner's kill -9 ends it
(also when it was held then: the kernel continues it, `continue_on_parent_death`).
"""

from __future__ import annotations

import contextlib
import logging
import pickle
import secrets
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import structlog

from hivemem.config import Settings
from hivemem.recall.foreground import Foreground
from hivemem.runtime.gated_vectors import GatedVectorStore
from hivemem.runtime.owner_api import OwnerApi
from hivemem.runtime.process_share import ProcessShare
from hivemem.store.redis import Redis
from hivemem.store.vectors.base import VectorStore

log = structlog.get_logger(__name__)

SOCKET_NAME = "workers.sock"
# CPU priority of the process (`nice` increment): the owner's; recalls come first by
# holding it (`ProcessShare`), not by a lower priority.
NICE = 0


@dataclass(frozen=True)
class ChildOrder:
    """What the owner hands its reflection process through the pipe."""

    settings: Settings
    vectors_url: str
    key: str
    nice: int
    # The owner's logging: the settings' level when it configured logging, else the
    # library's quiet default (warnings and errors), to the same stderr.
    log_level: str


def _owner_log_level() -> str:
    """The level this process logs at (the child logs the same), "warning" when unknown."""
    wrapper = structlog.get_config().get("wrapper_class")
    get_level = getattr(wrapper, "get_effective_level", None)
    if get_level is None:
        return "warning"
    try:
        return logging.getLevelName(int(get_level(wrapper))).lower()
    except (TypeError, ValueError):
        return "warning"


class ReflectProcess:
    """`start()` serves the worker API and starts the process; `idle()` for the owner's
    drain; `stop()` ends both. `restarts`: how often the process was started again;
    `share`: its hold while the owner's recalls run (added to `foreground`)."""

    def __init__(self, store: Path, settings: Settings, vectors: VectorStore,
                 foreground: Foreground, connection: Redis, *, nice: int = NICE,
                 restart_backoff_s: tuple[float, float] = (0.5, 30.0)) -> None:
        from rq import Queue  # rq: lazily, as the embedded mode's thread worker does

        self.settings = settings
        self.key = secrets.token_urlsafe(32)
        self.api = OwnerApi(store, GatedVectorStore(vectors, foreground.pause), self.key,
                            socket_name=SOCKET_NAME)
        self.nice = nice
        self.queue = Queue(settings.episodes.reflect_queue, connection=connection)
        self.backoff = restart_backoff_s
        self.restarts = 0
        self.foreground = foreground
        self.share = ProcessShare(min_share=settings.embedded.reflect_min_share,
                                  max_hold_s=settings.embedded.reflect_max_hold_s)
        self._proc: subprocess.Popen[bytes] | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._watch: threading.Thread | None = None
        self._started = threading.Event()
        self._spawn_error: BaseException | None = None

    def start(self, timeout: float = 30.0) -> None:
        self.api.start()
        # The process is started by the watching thread, which lives as long as this
        # object: the kernel's parent-death signal (`continue_on_parent_death`) follows
        # the thread that started it.
        self._watch = threading.Thread(target=self._supervise, name="hivemem-reflect-watch",
                                       daemon=True)
        self._watch.start()
        self._started.wait(timeout)
        if self._spawn_error is not None:
            self.api.stop()
            raise self._spawn_error
        self.foreground.add_hold(self.share)

    def _spawn(self) -> None:
        level = _owner_log_level()
        order = ChildOrder(settings=self.settings, vectors_url=self.api.url, key=self.key,
                           nice=self.nice, log_level=level)
        proc = subprocess.Popen(  # our own interpreter and module
            [sys.executable, "-m", "hivemem.runtime.reflect_child"],
            stdin=subprocess.PIPE, close_fds=True)
        assert proc.stdin is not None
        proc.stdin.write(pickle.dumps(order))
        proc.stdin.close()
        with self._lock:
            self._proc = proc
        self.share.attach(proc.pid)
        log.info("embedded.reflect_process_started", pid=proc.pid, restarts=self.restarts)

    def _supervise(self) -> None:
        try:
            self._spawn()
        except BaseException as exc:  # handed to start()
            self._spawn_error = exc
            return
        finally:
            self._started.set()
        delay = self.backoff[0]
        while not self._stop.wait(0.2):
            proc = self._proc
            if proc is None or proc.poll() is None:
                continue
            if self._stop.is_set():
                return
            self.share.attach(None)
            log.error("embedded.reflect_process_exited", pid=proc.pid,
                      returncode=proc.returncode, restart_in_s=delay)
            if self._stop.wait(delay):
                return
            delay = min(delay * 2, self.backoff[1])
            self.restarts += 1
            self._spawn()

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def idle(self) -> bool:
        """No job queued or running (retries scheduled for later do not count)."""
        from rq.registry import StartedJobRegistry

        return self.queue.count == 0 and StartedJobRegistry(queue=self.queue).count == 0

    def stop(self, timeout: float = 30.0) -> None:
        """The process ends after the job it runs (SIGTERM), then the API goes."""
        self._stop.set()
        if self._watch is not None:
            self._watch.join(timeout=5)
        # Held no more: a stopped process would not act on SIGTERM.
        self.foreground.remove_hold(self.share)
        self.share.close()
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                log.warning("embedded.reflect_process_killed", pid=proc.pid)
                proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
        self.api.stop()
