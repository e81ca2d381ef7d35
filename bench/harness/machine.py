"""What a number was measured on (machine, CPU features, versions, the git commit) and how busy
the shared machine was meanwhile (`CpuMonitor`, `wait_for_quiet`)."""

from __future__ import annotations

import contextlib
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
from importlib import metadata
from typing import Any

from harness.paths import REPO


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


# The CPU features that int8 ONNX and the engine's distance kernels depend on: the VMs here
# are not all one CPU kind. "AMD EPYC" family 23 model 1 (AVX2 only; 2026-12-05) ran the bare
# 100k search at 1.95-2.12 ms p50, where the fastest runs recorded (CPU not recorded then)
# took 0.75-1.38: a result is read next to the machine it ran on.
_CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8")


def cpu_facts() -> dict[str, Any]:
    """The CPU's name, family / model and the vector features the benchmarks depend on."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if not line.strip():
                    break  # the first processor's block is enough
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        pass
    flags = set(fields.get("flags", "").split())
    return {"cpu": fields.get("model name"), "cpu_family": fields.get("cpu family"),
            "cpu_model": fields.get("model"),
            "cpu_flags": [f for f in _CPU_FLAGS if f in flags]}


def machine_facts() -> dict[str, Any]:
    cpu = cpu_facts()
    mem_gb = None
    try:
        with open("/proc/meminfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("MemTotal"):
                    mem_gb = round(int(line.split()[1]) / 1024 / 1024, 1)
                    break
    except OSError:
        pass
    redis_server = None
    binary = shutil.which("redis-server")
    if binary:
        out = subprocess.run(
            [binary, "--version"], check=False, capture_output=True, text=True
        ).stdout
        m = re.search(r"v=(\S+)", out)
        redis_server = m.group(1) if m else out.strip()
    return {
        "nproc": os.cpu_count(),
        "sched_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        **cpu,
        "mem_gb": mem_gb,
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "redis_server": redis_server,
        "redis_py": _version("redis"),
        "fastembed": _version("fastembed"),
        "qdrant_edge_py": _version("qdrant-edge-py"),
        "onnxruntime": _version("onnxruntime"),
        "tokenizers": _version("tokenizers"),
        "numpy": _version("numpy"),
        "hivemem": _version("hivemem"),
    }


# -- CPU contention -----------------------------------------------------------------------

_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _system_busy_s() -> float | None:
    try:
        with open("/proc/stat", encoding="utf-8") as fh:
            parts = [int(x) for x in fh.readline().split()[1:]]
    except OSError:
        return None
    idle = parts[3] + (parts[4] if len(parts) > 4 else 0)  # idle + iowait
    return (sum(parts[:8]) - idle) / _HZ


def _pid_cpu_s(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _HZ  # utime + stime
    except (OSError, IndexError, ValueError):
        return 0.0


class CpuMonitor:
    """How busy the machine was during a section, and how much of it was someone else.

    `foreign_cores`: average CPUs used by processes other than this one and `extra_pids`
    (the bench's redis-server). Non-zero means the numbers were measured under contention.
    """

    def __init__(self, extra_pids: list[int] | None = None) -> None:
        self.extra_pids = extra_pids or []

    def _own(self) -> float:
        t = os.times()
        return t.user + t.system + sum(_pid_cpu_s(p) for p in self.extra_pids)

    def __enter__(self) -> CpuMonitor:
        self.t0 = time.perf_counter()
        self.busy0 = _system_busy_s()
        self.own0 = self._own()
        self.load0 = os.getloadavg()[0]
        self.result: dict[str, float] = {}
        return self

    def __exit__(self, *_exc: object) -> None:
        wall = time.perf_counter() - self.t0
        busy1 = _system_busy_s()
        own = self._own() - self.own0
        out = {"wall_s": round(wall, 2), "own_cores": round(own / wall, 2),
               "load1_start": round(self.load0, 2), "load1_end": round(os.getloadavg()[0], 2)}
        if self.busy0 is not None and busy1 is not None:
            busy = busy1 - self.busy0
            out["machine_busy_cores"] = round(busy / wall, 2)
            out["foreign_cores"] = round(max(0.0, busy - own) / wall, 2)
        self.result = out


def wait_for_quiet(max_wait_s: float, threshold_cores: float = 0.35, log: Any = print) -> dict[str, Any]:
    """Wait (up to `max_wait_s`) until other processes use under `threshold_cores` CPUs.

    This VM is shared: a test suite running next to the benchmark halves the model's
    throughput. Called between sections, while the bench itself is idle.
    """
    t0 = time.perf_counter()
    last = None
    announced = False
    while True:
        b0 = _system_busy_s()
        time.sleep(1.0)
        b1 = _system_busy_s()
        if b0 is None or b1 is None:
            return {"waited_s": 0.0, "busy_cores": None}
        last = b1 - b0
        waited = time.perf_counter() - t0
        if last < threshold_cores or waited >= max_wait_s:
            if announced or last >= threshold_cores:
                log(f"  (machine busy: other processes used {last:.2f} cores; waited"
                    f" {waited:.0f} s{'' if last < threshold_cores else ', giving up'})")
            return {"waited_s": round(waited, 1), "busy_cores": round(last, 2)}
        if not announced:
            log(f"  (machine busy: other processes use {last:.2f} cores; waiting up to"
                f" {max_wait_s:.0f} s for them to finish)")
            announced = True


def git_state() -> dict[str, Any]:
    """The hivemem code the numbers were measured on."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True,
                                  text=True, timeout=10, check=False).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    return {"commit": git("rev-parse", "HEAD"),
            "hivemem_dirty": bool(git("status", "--porcelain", "--", "hivemem"))}


def _niced_user_processes() -> list[int]:
    """Processes of other work started at a positive nice value (`nice -n 19 ...`: the
    background work of a shared machine), not this one nor its descendants (the measured
    system's own processes: the embedded mode's reflection process, its Redis server);
    kernel threads (no command line) are left out."""
    niced: list[int] = []
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                has_command = bool(fh.read(1))
        except OSError:
            continue
        parent[int(entry)] = int(fields[1])  # field 4 of stat: ppid
        if has_command and int(fields[16]) > 0:  # field 19 of stat: nice
            niced.append(int(entry))
    return [pid for pid in niced if not _descends_from(pid, os.getpid(), parent)]


def _descends_from(pid: int, ancestor: int, parent: dict[int, int]) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        pid = parent.get(pid, 0)
    return False


class PausedBackground:
    """While entered, the niced processes of other work are stopped (SIGSTOP) and continued
    after (SIGCONT): a timed phase on a shared machine measures the code, not the
    neighbours. `enabled=False`: does nothing. `paused` counts the processes stopped, so
    the result can say what was paused."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.paused = 0
        self._pids: list[int] = []

    def __enter__(self) -> PausedBackground:
        if self.enabled:
            for pid in _niced_user_processes():
                try:
                    os.kill(pid, signal.SIGSTOP)
                    self._pids.append(pid)
                except OSError:
                    pass
            self.paused = len(self._pids)
        return self

    def __exit__(self, *exc: object) -> None:
        for pid in self._pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGCONT)
        self._pids = []
