"""A background process held while foreground work runs, within a bounded share: stopped by
the first recall and continued by the last, never held past its budget, the budget earned
back while it runs; a recall without budget leaves it running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hivemem.recall.foreground import Foreground
from hivemem.runtime.process_share import ProcessShare


def _state(pid: int) -> str:
    # /proc/<pid>/stat: "pid (comm) S ..."; T: stopped.
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _wait_state(pid: int, want: bool) -> None:
    deadline = time.monotonic() + 10
    while (_state(pid) == "T") != want:
        assert time.monotonic() < deadline, f"stopped should be {want}"
        time.sleep(0.01)


@pytest.fixture
def sleeper() -> Iterator[int]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")


def test_the_first_recall_stops_the_process_and_the_last_continues_it(sleeper: int) -> None:
    gate = Foreground()
    share = ProcessShare(min_share=0.25, max_hold_s=30)
    share.attach(sleeper)
    gate.add_hold(share)
    try:
        with gate.serving():
            _wait_state(sleeper, True)
            with gate.serving():  # a second recall at once: still held
                assert share.held
            assert share.held and _state(sleeper) == "T"
        assert not share.held
        _wait_state(sleeper, False)
        assert share.holds == 1
    finally:
        share.close()
    assert _state(sleeper) != "T"


def test_a_hold_ends_with_its_budget_even_while_the_recall_runs(sleeper: int) -> None:
    share = ProcessShare(min_share=0.5, max_hold_s=0.05)
    share.attach(sleeper)
    try:
        share.hold()
        assert share.held
        deadline = time.monotonic() + 10
        while share.held:  # the pacer lets it go: the recall has not ended
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert share.cut == 1
        _wait_state(sleeper, False)
        share.release()  # the recall's end finds nothing to do
        assert share.cut == 1
    finally:
        share.close()


def test_holding_spends_a_budget_that_running_earns_back(sleeper: int) -> None:
    clock = Clock()
    # min_share 0.25: each second of running earns 3 s of hold, up to 1 s.
    share = ProcessShare(min_share=0.25, max_hold_s=1.0, clock=clock)
    share.attach(sleeper)
    try:
        share.hold()
        clock.now += 0.8  # a recall of 0.8 s
        share.release()
        assert share.stats()["held_s"] == pytest.approx(0.8)
        share.hold()
        clock.now += 0.2  # the rest of the budget
        share.release()
        share.hold()  # nothing left: this recall runs beside the process
        assert not share.held and share.skipped == 1
        clock.now += 0.1  # the process ran 0.1 s: 0.3 s of hold earned
        share.hold()
        assert share.held
        clock.now += 0.3
        share.release()
        share.hold()
        assert not share.held and share.skipped == 2
        clock.now += 10  # a long quiet stretch: the budget is full again, not more
        share.hold()
        clock.now += 1.0
        share.release()
        share.hold()
        assert not share.held and share.skipped == 3
    finally:
        share.close()
    _wait_state(sleeper, False)


def test_min_share_one_never_holds_and_close_lets_go(sleeper: int) -> None:
    never = ProcessShare(min_share=1.0)
    never.attach(sleeper)
    never.hold()
    assert not never.held
    never.close()
    share = ProcessShare()
    share.attach(sleeper)
    share.hold()
    _wait_state(sleeper, True)
    share.close()  # e.g. before the process is asked to end
    _wait_state(sleeper, False)
    share.hold()  # closed: holds no more
    assert not share.held


def test_a_child_asks_for_sigcont_when_its_parent_dies(tmp_path: Path) -> None:
    # A middle process starts a child that asks for the signal, stops it and dies: the
    # kernel continues the child, which then notices it is orphaned and writes a file.
    done = tmp_path / "orphan-ran"
    child = (
        "import os, sys, time\n"
        "from hivemem.runtime.process_share import continue_on_parent_death\n"
        "parent = os.getppid()\n"
        "assert continue_on_parent_death()\n"
        "sys.stdout.write('ready\\n'); sys.stdout.flush()\n"
        "while os.getppid() == parent: time.sleep(0.01)\n"
        f"open({str(done)!r}, 'w').write('ok')\n"
    )
    middle = (
        "import os, signal, subprocess, sys\n"
        f"proc = subprocess.Popen([sys.executable, '-c', {child!r}], stdout=subprocess.PIPE)\n"
        "assert proc.stdout.readline() == b'ready\\n'\n"
        "os.kill(proc.pid, signal.SIGSTOP)\n"
        "print(proc.pid, flush=True)\n"
        "os._exit(0)\n"
    )
    out = subprocess.run([sys.executable, "-c", middle], capture_output=True, text=True,
                         check=True, timeout=60)
    pid = int(out.stdout.split()[0])
    deadline = time.monotonic() + 30
    while not done.exists():
        assert time.monotonic() < deadline, f"the stopped orphan {pid} never ran again"
        time.sleep(0.05)


def test_the_pacer_continues_the_process_not_the_recalls_thread(
    sleeper: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[tuple[int, str]] = []
    real = os.kill

    def spy(pid: int, sig: int) -> None:
        if pid == sleeper:
            sent.append((sig, threading.current_thread().name))
        real(pid, sig)

    monkeypatch.setattr(os, "kill", spy)
    share = ProcessShare(min_share=0.25, max_hold_s=30)
    share.attach(sleeper)
    try:
        share.hold()
        share.release()
        assert not share.held  # for the caller the hold has ended
        deadline = time.monotonic() + 10
        while len(sent) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        _wait_state(sleeper, False)
        me = threading.current_thread().name
        assert sent == [(signal.SIGSTOP, me), (signal.SIGCONT, "hivemem-share-pacer")]
    finally:
        share.close()
