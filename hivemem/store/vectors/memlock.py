"""Keeping an embedded store's mapped files in memory (`mlock`), for hosts that page out
memory nobody touched lately.

The engine maps its segment files (graphs, vectors, payload, keyword store). A kernel that
reclaims idle pages pushes them back to disk, and a search then waits on the disk for them.
On a VM whose DAMON scheme pages out what went untouched for a minute, a 100k-point store
reopened after 150 s closed took 36 major faults a recall, bare search p95 8.2 ms; locked at
open, none and 2.9 ms (`bench/probes/recall_scale.py --lock-arm`).

Locking pins the files' pages: the memory is not given back under pressure (opt-in,
`VectorIndexSettings.lock_in_memory`). An unprivileged process may lock only
RLIMIT_MEMLOCK bytes (often 8 MB): locking is then refused once, with what to raise, and the
store works on unlocked.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import structlog

log = structlog.get_logger(__name__)

_MAPS = Path("/proc/self/maps")
# New mappings (a segment grown by writes) are locked at most this often: an idle page is
# paged out after a minute or more of no access, and a page just written is not idle.
RELOCK_INTERVAL_S = 30.0
_HINT = ("raise the lock limit of the process (ulimit -l unlimited; systemd LimitMEMLOCK="
         "infinity; docker --ulimit memlock=-1:-1) or grant it CAP_IPC_LOCK")


class _Libc(Protocol):
    def mlock(self, addr: int, size: int) -> int: ...


@dataclass(frozen=True, slots=True)
class Locked:
    """What one `lock` call pinned: address ranges and bytes of file data newly locked,
    its time, and why locking was refused (None: not refused)."""

    regions: int
    bytes: int
    ms: float
    refused: str | None = None


def _libc() -> _Libc | None:
    """The C library's `mlock`, from the symbols this process has loaded."""
    lib = ctypes.CDLL(None, use_errno=True)
    if not hasattr(lib, "mlock"):
        return None
    lib.mlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    lib.mlock.restype = ctypes.c_int
    return lib


@dataclass(frozen=True, slots=True)
class Mapping:
    """One file mapping of this process: its addresses and where in which file they start."""

    start: int
    end: int
    offset: int
    path: str


def mapped_under(folder: Path, maps: Path = _MAPS) -> list[Mapping]:
    """This process's file mappings under `folder`."""
    prefix = str(folder.resolve()) + os.sep
    found: list[Mapping] = []
    with open(maps, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            fields = line.split(None, 5)
            if len(fields) < 6 or not fields[5].startswith(prefix):
                continue
            start, end = fields[0].split("-")
            found.append(Mapping(int(start, 16), int(end, 16), int(fields[2], 16),
                                 fields[5].rstrip("\n")))
    return found


def data_ranges(mapping: Mapping, page: int = mmap.PAGESIZE) -> list[tuple[int, int]]:
    """The address ranges of `mapping` that hold file data: not past the file's end, not
    its holes. The engine maps its files in preallocated chunks, mostly holes (100k points:
    1.5 GB mapped over 0.8 GB of data), and locking a hole would fill it with memory."""
    try:
        fd = os.open(mapping.path, os.O_RDONLY)
    except OSError:
        return []  # removed meanwhile: the engine is dropping it
    try:
        stop = min(mapping.offset + mapping.end - mapping.start, os.fstat(fd).st_size)
        ranges: list[tuple[int, int]] = []
        at = mapping.offset
        while at < stop:
            try:
                data = os.lseek(fd, at, os.SEEK_DATA)
            except OSError:
                break  # no data after `at`
            if data >= stop:
                break
            hole = min(os.lseek(fd, data, os.SEEK_HOLE), stop)
            first = mapping.start + (data - mapping.offset) // page * page
            last = mapping.start + -(-(hole - mapping.offset) // page) * page
            ranges.append((first, min(last, mapping.end)))
            at = hole
        return ranges
    finally:
        os.close(fd)


class MemoryLock:
    """Locks the data of the files mapped under one folder: all of it at `lock()`, what is
    new at most every `interval_s` (`after_write`). Refused once, it stops trying."""

    def __init__(self, folder: Path, *, interval_s: float = RELOCK_INTERVAL_S,
                 libc: _Libc | None = None, maps: Path = _MAPS) -> None:
        self.folder = Path(folder)
        self.interval_s = interval_s
        self._libc = libc
        self._maps = maps
        self._locked: set[tuple[int, int]] = set()
        self._last = 0.0
        self._guard = threading.Lock()
        self.refused: str | None = None
        self.total_bytes = 0  # locked now, of the ranges this lock knows

    def lock(self) -> Locked:
        """Lock the file data of every mapping under the folder not locked yet (ranges the
        engine dropped are forgotten). Reads from disk what is not in memory."""
        started = time.perf_counter()
        with self._guard:
            self._last = time.monotonic()
            if self.refused is not None:
                return Locked(0, 0, 0.0, self.refused)
            try:
                ranges = [r for m in mapped_under(self.folder, self._maps)
                          for r in data_ranges(m)]
            except OSError as exc:
                return self._refuse(f"cannot read {self._maps}: {exc.strerror}", started)
            libc = self._libc if self._libc is not None else _libc()
            if libc is None:
                return self._refuse("no C library to call mlock from", started)
            self._libc = libc
            current = set(ranges)
            self._locked &= current
            regions = size = 0
            for start, end in ranges:
                if (start, end) in self._locked:
                    continue
                if libc.mlock(start, end - start) != 0:
                    code = ctypes.get_errno()
                    # ENOMEM is also what a range unmapped meanwhile gives (the engine
                    # dropped a segment, the store closed): nothing to keep, not a refusal.
                    if code in (errno.EPERM, errno.ENOMEM, errno.EAGAIN) and self._mapped(
                            start, end):
                        name = errno.errorcode.get(code, str(code))
                        return self._refuse(
                            f"mlock: {name} after {self.total_bytes + size} bytes", started)
                    continue
                self._locked.add((start, end))
                regions += 1
                size += end - start
            # What is locked now: ranges the engine dropped (a retired shard) are gone.
            self.total_bytes = sum(end - start for start, end in self._locked)
            return Locked(regions, size, _ms(started))

    def _mapped(self, start: int, end: int) -> bool:
        """Whether [start, end) is still inside a file mapping under the folder."""
        try:
            return any(m.start <= start and end <= m.end
                       for m in mapped_under(self.folder, self._maps))
        except OSError:
            return True

    def after_write(self) -> Locked | None:
        """`lock()` when `interval_s` has passed since the last one (else None)."""
        if self.refused is not None or time.monotonic() - self._last < self.interval_s:
            return None
        return self.lock()

    def _refuse(self, reason: str, started: float) -> Locked:
        self.refused = reason
        log.warning("store.memory_lock_refused", folder=str(self.folder), reason=reason,
                    hint=_HINT)
        return Locked(0, 0, _ms(started), reason)


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 1)


__all__ = ["RELOCK_INTERVAL_S", "Locked", "Mapping", "MemoryLock", "data_ranges", "mapped_under"]
