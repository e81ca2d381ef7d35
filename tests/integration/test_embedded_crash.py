"""Embedded mode on its real child Redis server: kill -9 of the owner loses nothing, the
orphaned server is adopted by the next owner, and a power-loss-like kill of both loses
nothing with `durable=True`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hivemem import MemoryClient
from hivemem.config import Settings
from hivemem.providers.embedders import HashingEmbedder
from hivemem.runtime.child_server import DATA_DIR, PIDFILE
from hivemem.runtime.owner import read_record

pytestmark = pytest.mark.integration

OWNER = Path(__file__).resolve().parent.parent / "support" / "embedded_owner.py"
TURNS = 40
DIM = 64


def _settings() -> Settings:
    return Settings.model_validate({"embedding": {"provider": "hashing", "dim": DIM}})


def _start_owner(folder: Path, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        process = subprocess.Popen([sys.executable, str(OWNER), str(folder), str(TURNS), *extra],
                                   stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while b"ingested" not in log.read_bytes():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"owner did not ingest: {log.read_text(errors='replace')}")
        time.sleep(0.05)
    return process


def _server_pid(folder: Path) -> int:
    return int((folder / DATA_DIR / PIDFILE).read_text().strip())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _reopen_and_count(folder: Path) -> tuple[int, MemoryClient]:
    client = MemoryClient.local(folder, _settings(), embedder=HashingEmbedder(DIM))
    client.wait_until_processed("crash", timeout=60)
    return client.vector_store().count_turns("crash"), client


def test_kill_9_of_the_owner_mid_load_loses_nothing_and_the_orphan_is_adopted(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "store"
    owner = _start_owner(folder, tmp_path / "owner.log")
    server = _server_pid(folder)
    owner.send_signal(signal.SIGKILL)
    owner.wait(timeout=10)
    # The acknowledged turns were not all embedded: the slow embedder had one batch at most.
    assert _alive(server), "the child server should outlive its killed owner (an orphan)"
    count, client = _reopen_and_count(folder)
    try:
        assert count == TURNS
        record = read_record(folder)
        assert record is not None and record.pid == os.getpid()
        assert _server_pid(folder) == server  # adopted, not a second server on the files
    finally:
        client.close()
    deadline = time.monotonic() + 10
    while _alive(server) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(server), "the adopted server stops with its new owner"


def test_kill_9_of_owner_and_server_with_durable_loses_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "store"
    owner = _start_owner(folder, tmp_path / "owner.log", "durable")
    server = _server_pid(folder)
    # Power loss: both die at once, no SHUTDOWN, no final fsync.
    os.kill(server, signal.SIGKILL)
    owner.send_signal(signal.SIGKILL)
    owner.wait(timeout=10)
    deadline = time.monotonic() + 10
    while _alive(server) and time.monotonic() < deadline:
        time.sleep(0.05)
    count, client = _reopen_and_count(folder)
    try:
        assert count == TURNS
        assert client.get_session_stats("crash").last_seq == TURNS
    finally:
        client.close()
