"""The owner's API for its guests, served on a unix socket in the folder by a thread.

Other processes on the machine cannot open the folder's Qdrant Edge shard: they send the
vector-store primitives here (`hivemem.api.owner`), with the local key from `owner.key`.
A unix socket, not a port: nothing is exposed beyond the machine, the file's mode (0600)
and the key both limit it to the folder's user, and no port has to be chosen.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import structlog

from hivemem.errors import ConfigurationError
from hivemem.runtime.child_server import socket_path
from hivemem.store.vectors.base import VectorStore

log = structlog.get_logger(__name__)

SOCKET_NAME = "owner.sock"


def owner_socket(store: Path) -> Path:
    return socket_path(store, SOCKET_NAME)


class OwnerApi:
    """`start()` serves the owner API on `<store>/owner.sock` (or `socket_name`: embedded
    mode's own worker processes get a socket of their own); `stop()` ends it."""

    def __init__(self, store: Path, vectors: VectorStore, key: str, *,
                 socket_name: str = SOCKET_NAME) -> None:
        self.socket = socket_path(store, socket_name)
        self._vectors = vectors
        self._key = key
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    def start(self, timeout: float = 15.0) -> None:
        try:
            import uvicorn

            from hivemem.api.owner import owner_app
        except ImportError as exc:
            raise ConfigurationError(
                f"serving an embedded folder to other processes needs {exc.name}:"
                " pip install 'hivemem[api]'") from None
        self.socket.unlink(missing_ok=True)  # a killed owner's socket; we hold the lock
        config = uvicorn.Config(owner_app(self._vectors, self._key), uds=str(self.socket),
                                log_level="warning", access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="hivemem-owner-api",
                                        daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise ConfigurationError(f"the owner API did not start on {self.socket}")
            time.sleep(0.01)
        self.socket.chmod(0o600)
        log.info("embedded.owner_api_started", socket=str(self.socket))

    def stop(self) -> None:
        if self._server is None or self._thread is None:
            return
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._server = None
        self._thread = None
        self.socket.unlink(missing_ok=True)
