"""Building the embedded engine's HNSW index without stopping the store.

qdrant-edge's `optimize()` holds the GIL for the whole build (minutes at 100k points): run in
a thread, it would freeze every other thread of the process, recall and the workers
included. So the build runs in a child process on a copy of the collection's folder:

1. holding the store's write lock (writes wait, reads go on: the copy took 1.9 s at 1M
   points, 7.3 s at 100k on a saturated machine): flush, copy the collection's folder to a
   new generation folder (`<name>.g<n>`), start a journal of every later write to it;
2. the child (`python -m hivemem.store.vectors.edge_build <copy>`, niced by
   `index_build_nice`) opens the copy,
   optimises it (HNSW and payload-index build) and closes it; the store serves reads and
   writes all the while;
3. the parent opens the built copy and replays the journal on it while writes go on; then,
   under the lock, replays the last few and makes it the collection (`<name>.current` names
   the folder in use): the only pause. The old shard is closed and removed after the lock.

A crash at any point leaves the folder that `<name>.current` names complete; `recover`
removes the others. A build that falls too far behind (journal over `max_journal`) is
dropped and tried again later.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog

from hivemem.store.vectors.warm import Warmed, warm

log = structlog.get_logger(__name__)

CURRENT = ".current"


def active_folder(path: Path, collection: str) -> Path:
    """The folder holding the collection: `<name>`, or the generation `<name>.current` names."""
    pointer = path / f"{collection}{CURRENT}"
    if pointer.exists():
        name = pointer.read_text(encoding="utf-8").strip()
        if name and (path / name).exists():
            return path / name
    return path / collection


def set_active(path: Path, collection: str, folder: Path) -> None:
    pointer = path / f"{collection}{CURRENT}"
    tmp = pointer.with_suffix(".tmp")
    tmp.write_text(folder.name, encoding="utf-8")
    os.replace(tmp, pointer)


def recover(path: Path, collection: str) -> Path:
    """Before opening: remove what an interrupted build left (every folder of the
    collection but the active one). Returns the active folder."""
    active = active_folder(path, collection)
    candidates = [path / collection, *path.glob(f"{collection}.g*")]
    for folder in candidates:
        if folder.is_dir() and folder != active:
            shutil.rmtree(folder, ignore_errors=True)
    return active


def _copy(source: Path, target: Path) -> None:
    """The engine's files are sparse (a new shard is ~200 MB apparent, ~0.5 MB used): copy
    them as such, which `shutil.copytree` does not (GNU cp; copytree where it is missing)."""
    cp = shutil.which("cp")
    if cp is not None and sys.platform.startswith("linux"):
        subprocess.run([cp, "-a", "--sparse=always", str(source), str(target)], check=True)
    else:  # pragma: no cover - the product runs on Linux
        shutil.copytree(source, target)


class BackgroundIndex:
    """Decides when a collection is due for an index build and runs it (one at a time)."""

    def __init__(
        self,
        path: Path,
        every: int,
        lock: threading.RLock,
        writes: threading.RLock,
        shard_of: Callable[[str], Any],
        folder_of: Callable[[str], Path],
        load: Callable[[Path], Any],
        swap: Callable[[str, Any, Path], Callable[[], None]],
        *,
        max_journal: int = 200_000,
        nice: int = 10,
    ) -> None:
        self.path = path
        self.every = every
        self.max_journal = max_journal
        self.nice = nice
        self._lock = lock
        self._writes = writes  # held by every write, outside `lock`
        self._shard_of = shard_of
        self._folder_of = folder_of
        self._load = load
        self._swap = swap
        self._grown: dict[str, int] = {}
        self._journal: dict[str, list[Any]] = {}
        self._journaled = 0
        self._thread: threading.Thread | None = None
        self._child: subprocess.Popen[bytes] | None = None
        self._closing = False
        self.builds = 0  # finished builds (for tests and logs)
        self.warmed: Warmed | None = None  # what the last finished build read in (`warm`)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wrote(self, collection: str, points: int, operation: Any) -> None:
        """Called under the store's lock after every write to `collection`."""
        journal = self._journal.get(collection)
        if journal is not None:
            journal.append(operation)
            self._journaled += points
            if self._journaled > self.max_journal:
                log.warning("store.index_dropped", collection=collection,
                            reason="too many writes during the build", writes=self._journaled)
                self._stop_child()
        self._grown[collection] = self._grown.get(collection, 0) + points
        if self.every and self._grown[collection] >= self.every and not self.running:
            self.start(collection)

    def start(self, collection: str) -> None:
        """Start a build of `collection`: the copy and the child run on the index thread
        (call under the store's lock; the copy waits until this write is done)."""
        if self.running or self._closing:
            return
        self._grown[collection] = 0
        self._thread = threading.Thread(
            target=self._run, args=(collection,), name="hivemem-index", daemon=True)
        self._thread.start()

    def _snapshot(self, collection: str) -> Path:
        """Copy the collection with writes held back (reads go on), and journal every
        write after it."""
        copy = self.path / f"{collection}.g{time.time_ns()}"
        with self._writes:
            started = time.perf_counter()
            with self._lock:
                self._shard_of(collection).flush()
                folder = self._folder_of(collection)
            _copy(folder, copy)
            with self._lock:
                self._journal = {collection: []}
                self._journaled = 0
            log.info("store.index_started", collection=collection,
                     copy_ms=round((time.perf_counter() - started) * 1000, 1))
        return copy

    def _run(self, collection: str) -> None:
        started = time.perf_counter()
        try:
            copy = self._snapshot(collection)
        except Exception as exc:
            log.warning("store.index_failed", collection=collection, error=str(exc))
            return
        if self._closing:
            with self._lock:
                self._journal.pop(collection, None)
            shutil.rmtree(copy, ignore_errors=True)
            return
        child = subprocess.Popen(
            [sys.executable, "-m", "hivemem.store.vectors.edge_build", "--nice",
             str(self.nice), str(copy)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self._child = child
        _out, err = child.communicate()
        self._child = None
        built: Any = None
        warmed = Warmed(0, 0, 0.0)
        try:
            if child.returncode == 0 and not self._closing:
                built = self._load(copy)
                # The built files are cold (`warm`): read once here, not faulted in by recall.
                warmed = warm(copy)
                # Catch up outside the lock while writes go on; only the last few under it.
                done = self._replay(collection, built, 0, 64)
            with self._lock:
                journal = self._journal.pop(collection, None)
                if built is None or journal is None or self._closing:
                    if built is not None:
                        built.close()
                    shutil.rmtree(copy, ignore_errors=True)
                    if not self._closing:
                        log.warning("store.index_failed", collection=collection,
                                    code=child.returncode,
                                    error=err.decode(errors="replace")[-500:])
                    return
                swap_started = time.perf_counter()
                for operation in journal[done:]:
                    built.update(operation)
                retire = self._swap(collection, built, copy)
                self.builds += 1
                self.warmed = warmed
                paused = time.perf_counter() - swap_started
            retire()  # close and remove the old shard, outside the lock
        except Exception as exc:
            log.warning("store.index_failed", collection=collection, error=str(exc))
            shutil.rmtree(copy, ignore_errors=True)
            return
        log.info("store.index_built", collection=collection, replayed=len(journal),
                 build_s=round(swap_started - started, 1),
                 paused_ms=round(paused * 1000, 1), warmed_mb=round(warmed.bytes / 2**20, 1),
                 warm_ms=warmed.ms,
                 retired_ms=round((time.perf_counter() - swap_started - paused) * 1000, 1))

    def _replay(self, collection: str, built: Any, done: int, until_left: int) -> int:
        """Apply journalled writes to the built copy until fewer than `until_left` remain."""
        while True:
            with self._lock:
                journal = self._journal.get(collection)
                pending = [] if journal is None else journal[done:]
            if len(pending) < until_left:
                return done
            for operation in pending:
                built.update(operation)
            done += len(pending)

    def wait(self, timeout: float | None = None) -> None:
        """Until the running build (if any) is in place or dropped."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _stop_child(self) -> None:
        child = self._child
        if child is not None and child.poll() is None:
            child.terminate()

    def close(self) -> None:
        """Stop a running build (its copy is removed); the store stays as it was."""
        self._closing = True
        self._stop_child()
        thread = self._thread
        if thread is not None:
            thread.join(timeout=30)
