"""Embedded mode's reflection in a process of its own (`hivemem.runtime.reflect_process`):
it reflects, a crash of it is restarted, closing the owner ends it, and the setting (or a
handed-in reflector) keeps the thread."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from hivemem import MemoryClient
from hivemem.config import Settings
from hivemem.providers.heuristic import HeuristicReflector
from hivemem.runtime.embedded import EmbeddedRuntime
from hivemem.runtime.reflect_process import SOCKET_NAME

pytestmark = pytest.mark.integration


def _settings(**embedded: object) -> Settings:
    # The process is the default (`embedded.reflect_process`): these tests run with it
    # unless they say otherwise.
    return Settings.model_validate({"embedding": {"provider": "hashing", "dim": 64},
                                    "embedded": {**embedded}})


def _reflect(client: MemoryClient, session: str) -> int:
    client.ingest_many([
        {"session_id": session, "role": "user", "content": f"Decision: the cache {i} is Redis."}
        for i in range(12)])
    client.wait_until_processed(session, timeout=60)
    client.wait_until_reflected(session, timeout=60)
    return client.admin.session_info(session).facts_active


def test_reflection_runs_in_a_process_that_comes_back_after_a_crash(tmp_path: Path) -> None:
    runtime = EmbeddedRuntime(tmp_path / "store", _settings())
    client = MemoryClient(runtime.settings, runtime=runtime)
    process = runtime.reflect_process
    try:
        assert process is not None
        first = process.pid
        assert first is not None and first != os.getpid() and process.alive()
        assert _reflect(client, "s1") > 0
        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while not (process.restarts == 1 and process.alive()):
            assert time.monotonic() < deadline, "the reflection process was not restarted"
            time.sleep(0.1)
        assert process.pid != first
        assert _reflect(client, "s2") > 0  # the new process reflects
    finally:
        client.close()
    assert process is not None and not process.alive()
    assert not (tmp_path / "store" / SOCKET_NAME).exists()


def test_the_setting_or_a_handed_in_reflector_keeps_the_thread(tmp_path: Path) -> None:
    for folder, runtime in (
        ("off", EmbeddedRuntime(tmp_path / "off", _settings(reflect_process=False))),
        ("handed", EmbeddedRuntime(tmp_path / "handed", _settings(),
                                   reflector=HeuristicReflector())),
    ):
        client = MemoryClient(runtime.settings, runtime=runtime)
        try:
            assert runtime.reflect_process is None, folder
            assert _reflect(client, "s1") > 0
        finally:
            client.close()


def _stopped(pid: int) -> bool:
    # /proc/<pid>/stat: "pid (comm) S ..."; T: stopped.
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
def test_a_recall_holds_the_process_and_reflection_goes_on_under_a_recall_loop(
        tmp_path: Path) -> None:
    # A hold of up to 2 s: long enough to see it from here on a busy machine.
    runtime = EmbeddedRuntime(tmp_path / "store", _settings(reflect_max_hold_s=2.0))
    client = MemoryClient(runtime.settings, runtime=runtime)
    process = runtime.reflect_process
    try:
        assert process is not None and process.pid is not None
        pid = process.pid
        foreground = runtime.wiring.foreground
        with foreground.serving():  # what a recall does
            _until(lambda: _stopped(pid), "a recall did not hold the process")
        _until(lambda: not _stopped(pid), "the process was not let go after the recall")

        n = 150
        client.ingest_many([
            {"session_id": "s1", "role": "user",
             "content": f"Decision: the cache {i} is Redis {i}."} for i in range(n)])
        client.wait_until_processed("s1", timeout=120)
        stop = threading.Event()
        recalls = [0]

        def recall_loop() -> None:  # recalls back to back, as many as the process allows
            while not stop.is_set():
                client.recall("s1", "what is the cache now?", limit=20)
                recalls[0] += 1

        loop = threading.Thread(target=recall_loop)
        loop.start()
        try:
            # The process still gets its share: reflection finishes while recalls run.
            client.wait_until_reflected("s1", timeout=600)
        finally:
            stop.set()
            loop.join()
        assert client.admin.session_info("s1").facts_active >= n // 2
        share = process.share
        assert share.holds > 1 and recalls[0] > 1
        # The budget ran out at times (a hold cut mid-recall, or a recall without one).
        assert share.cut + share.skipped > 0, share.stats()
        assert not share.held
        _until(lambda: not _stopped(pid), "the process stayed stopped after the loop")
    finally:
        client.close()
    assert not process.alive()
