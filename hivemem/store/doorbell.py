"""Wake a Redis Cluster consumer when one of its streams gets an entry.

On one Redis a consumer blocks in a single XREADGROUP over all its partitions' streams. On a
cluster it cannot: every partition is its own hash slot, and one command may name keys of
one slot only. So the consume loop polls its streams without blocking (one XREADGROUP per
stream, pipelined per node) and, when they are all empty, waits on this doorbell instead of
sleeping: one thread per stream blocks in `XREAD BLOCK` (a plain read: it delivers nothing
to the group and changes no pending list) from the newest entry it has seen, and rings as
soon as the stream grows. An idle worker then costs one blocked connection per stream, not
a poll of every stream 50 times a second, and a new entry is picked up at once.

A ring is only a hint: the loop reads with XREADGROUP as before, so a ring too many costs one
empty poll, and a missed one (a thread reconnecting) costs at most the loop's `timeout`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

import structlog

from hivemem.store.redis import Redis, route
from hivemem.store.stream_entries import read_reply

log = structlog.get_logger(__name__)

_RETRY_S = 0.5  # after a failed read (a node down, a failover): try again this much later


def _later(a: str, b: str | None) -> str:
    """The later of two entry ids ('$' = none known yet)."""
    if b is None:
        return a
    if a == "$":
        return b
    ka = tuple(int(x) for x in a.split("-"))
    kb = tuple(int(x) for x in b.split("-"))
    return a if ka >= kb else b


class Doorbell:
    def __init__(self, client: Redis, block_ms: int) -> None:
        self._r = client
        self.block_ms = block_ms
        self._rang = threading.Event()
        self._cond = threading.Condition()
        self._watched: dict[str, threading.Thread] = {}
        self._seen: dict[str, str] = {}
        self._waits = 0
        self._closed = threading.Event()

    def watch(self, streams: Iterable[str]) -> None:
        """Ring for these streams from now on (threads start and stop to match)."""
        wanted = set(streams)
        with self._cond:
            for stream in [s for s in self._watched if s not in wanted]:
                del self._watched[stream]  # its thread sees this and ends after its read
            for stream in wanted - set(self._watched):
                thread = threading.Thread(target=self._listen, args=(stream,), daemon=True,
                                          name=f"doorbell:{stream}")
                self._watched[stream] = thread
                thread.start()

    def seen(self, stream: str, entry_id: str) -> None:
        """The loop has read `stream` up to `entry_id`: ring only for entries after it
        (without this a listener would ring for entries the loop read meanwhile)."""
        with self._cond:
            self._seen[stream] = _later(entry_id, self._seen.get(stream))

    def wait(self, timeout_s: float) -> bool:
        """Wait until a watched stream got an entry (True) or `timeout_s` passed. The ring
        is consumed: the next wait waits for the next entry."""
        with self._cond:
            # A new wait: the loop has read (and told `seen`) all it polled since the last
            # one, so the listeners that rang may read on.
            self._waits += 1
            self._cond.notify_all()
        rang = self._rang.wait(timeout_s)
        self._rang.clear()
        return rang

    def wake(self) -> None:
        """Ring now (the loop is stopping)."""
        self._rang.set()

    def close(self) -> None:
        """Stop ringing. Listeners end after their current read (within `block_ms`); they
        are daemon threads and are not waited for."""
        self._closed.set()
        with self._cond:
            self._watched.clear()
            self._cond.notify_all()
        self._rang.set()

    def _active(self, stream: str) -> bool:
        with self._cond:
            return not self._closed.is_set() and self._watched.get(stream) is (
                threading.current_thread())

    def _listen(self, stream: str) -> None:
        last = "$"
        while self._active(stream):
            with self._cond:
                start = _later(last, self._seen.get(stream))
            try:
                reply: Any = self._r.execute_command(  # type: ignore[no-untyped-call]
                    "XREAD", "COUNT", 1, "BLOCK", self.block_ms, "STREAMS", stream, start,
                    **route(self._r, stream))
            except Exception as exc:  # never let a listener die: the loop still polls
                log.debug("doorbell.read_failed", stream=stream, error=repr(exc))
                self._rang.set()  # let the loop meet the problem on its own reads
                self._closed.wait(_RETRY_S)
                continue
            newest = _newest_id(reply)
            if newest is None:
                continue
            last = newest
            with self._cond:
                self._rang.set()
                # One ring per wait of the loop: read on only once the loop has polled and
                # waits again (having said what it read), so a listener never walks a
                # backlog entry by entry.
                waits = self._waits
                while self._waits == waits and self._watched.get(stream) is (
                        threading.current_thread()) and not self._closed.is_set():
                    self._cond.wait(1.0)


def _newest_id(reply: Any) -> str | None:
    """The id of the entry an `XREAD COUNT 1` returned, or None."""
    entries = read_reply(reply)
    return entries[-1].entry_id if entries else None
