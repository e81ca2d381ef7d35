"""Recalls come first in their process: background threads hold back at their next unit of
work while a recall runs (at most `max_pause_s` at a time), and the interpreter hands the
GIL back sooner meanwhile."""

from __future__ import annotations

import sys
import threading
import time

from hivemem.recall.foreground import Foreground


def test_pause_waits_for_the_recall_and_no_longer() -> None:
    gate = Foreground(max_pause_s=5.0)
    released = threading.Event()
    waited: list[float] = []

    def background() -> None:
        t0 = time.perf_counter()
        gate.pause()
        waited.append(time.perf_counter() - t0)
        released.set()

    with gate.serving():
        thread = threading.Thread(target=background)
        thread.start()
        assert not released.wait(0.2)  # held while the recall runs
    assert released.wait(2.0)
    thread.join()
    assert 0.15 < waited[0] < 2.0


def test_pause_is_bounded_and_free_when_idle() -> None:
    gate = Foreground(max_pause_s=0.1)
    t0 = time.perf_counter()
    gate.pause()
    assert time.perf_counter() - t0 < 0.05  # nothing runs: no wait
    with gate.serving():
        t0 = time.perf_counter()
        gate.pause()  # the same thread, a recall in flight: bounded
        assert 0.09 < time.perf_counter() - t0 < 1.0


def test_the_switch_interval_is_short_only_while_recalls_run() -> None:
    before = sys.getswitchinterval()
    gate = Foreground(switch_interval_s=0.0005)
    with gate.serving():
        with gate.serving():
            assert sys.getswitchinterval() == 0.0005
        assert sys.getswitchinterval() == 0.0005  # one recall still runs
    assert sys.getswitchinterval() == before


def test_a_recall_is_foreground_from_its_access_check_on(pipeline) -> None:  # type: ignore[no-untyped-def]
    """The scope check's Redis read is part of the recall: background threads hold back
    and the switch interval is short for it too, not only for the search that follows.
    It rides in the recall's first Redis read (`owned_by`), not a round trip before it."""
    client, drain = pipeline
    client.ingest("s", "user", "The deploy window is Tuesday at noon.")
    drain()
    service = client._service  # noqa: SLF001 (the service's parts are not public)
    gate = service.reads.parts.foreground
    state = service.reads.parts.state
    send = state.send_recent_turns_and_progress
    busy: list[tuple[bool, str | None]] = []

    def watched(*args, **kwargs):  # type: ignore[no-untyped-def]
        busy.append((gate.busy, kwargs.get("owned_by")))
        return send(*args, **kwargs)

    def refused(access, session_id):  # type: ignore[no-untyped-def]
        raise AssertionError("a round trip before the recall")

    state.send_recent_turns_and_progress = watched
    service.reads.access.require = refused
    client.recall("s", "When is the deploy window?", token_budget=200)
    assert busy == [(True, "default")]
    assert not gate.busy
