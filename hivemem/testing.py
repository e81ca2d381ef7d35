"""Helpers for tests and benchmarks: a throwaway redis-server on a unix socket, and an
in-process fakeredis (the dev extra: nothing at runtime imports this module)."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import redis


class RedisServer:
    """A redis-server of its own, on a unix socket in `folder` (AOF on, like production)."""

    def __init__(
        self, folder: Path, *, appendonly: bool = True, appendfsync: str = "everysec"
    ) -> None:
        self.folder = folder
        self.socket = folder / "redis.sock"
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    @staticmethod
    def available() -> bool:
        return shutil.which("redis-server") is not None

    def start(self, timeout: float = 10.0) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self.process = subprocess.Popen(
            [
                binary,
                "--port", "0",
                "--unixsocket", str(self.socket),
                "--unixsocketperm", "700",
                "--dir", str(self.folder),
                "--appendonly", "yes" if self.appendonly else "no",
                "--appendfsync", self.appendfsync,
                "--save", "",
                "--logfile", str(self.folder / "redis.log"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if redis.Redis(unix_socket_path=str(self.socket)).ping():
                    return
            except redis.RedisError:
                time.sleep(0.02)
        raise RuntimeError(f"redis-server did not start; see {self.folder / 'redis.log'}")

    def client(self) -> redis.Redis:
        return redis.Redis(unix_socket_path=str(self.socket), socket_timeout=5)

    def kill(self) -> None:
        """kill -9: no shutdown, no final fsync (what a crash or power loss leaves)."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)
            self.process = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
            self.process = None


def fake_server() -> Any:
    """An in-process Redis (fakeredis) for unit tests (embedded mode runs a real server)."""
    import fakeredis

    return fakeredis.FakeServer()


def connect_fake(server: Any) -> redis.Redis:
    """A client of `server` (`fake_server`); clients of one server share its data."""
    import fakeredis

    client: redis.Redis = fakeredis.FakeRedis(server=server)
    return client
