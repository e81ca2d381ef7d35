"""The one consume loop every stream worker runs.

Consumer groups give at-least-once delivery: a batch is acked only after its handler has
made the writes durable. Entries a dead consumer left pending are reclaimed (XAUTOCLAIM)
after `claim_idle_ms`; an entry that keeps failing goes to the dead-letter stream with its
error after `max_deliveries`. While a store is down the batch is retried in place with
back-off, so an outage never dead-letters good messages.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Generic, TypeVar

import structlog

from hivemem.config import WorkerSettings
from hivemem.errors import MalformedEntry, RetryLater, StoreRejected, StoreUnavailable
from hivemem.pipeline.topology import Stage
from hivemem.store.streams import StreamEntry, StreamStore

M = TypeVar("M")
T = TypeVar("T")
log = structlog.get_logger(__name__)

_TRANSIENT = (StoreUnavailable, RetryLater)


@dataclass(frozen=True)
class WorkerKind(Generic[M]):
    """A stream stage: where it reads, how an entry becomes a message, what it does."""

    name: str
    stream: str
    group: str
    decode: Callable[[StreamEntry], M]
    handle: Callable[[list[M]], None]
    on_dead_letter: Callable[[StreamEntry, str], None] | None = None

    @classmethod
    def of(
        cls,
        stage: Stage,
        decode: Callable[[StreamEntry], M],
        handle: Callable[[list[M]], None],
        on_dead_letter: Callable[[StreamEntry, str], None] | None = None,
    ) -> WorkerKind[M]:
        """The worker kind of a pipeline stage (its name, stream and group)."""
        return cls(name=stage.name, stream=stage.stream, group=stage.group, decode=decode,
                   handle=handle, on_dead_letter=on_dead_letter)


@dataclass
class WorkerReport:
    handled: int = 0
    batches: int = 0
    dead_lettered: int = 0
    reclaimed: int = 0
    failures: int = 0
    errors: list[str] = field(default_factory=list)


def default_consumer_name(kind: str) -> str:
    return f"{kind}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class StreamWorker(Generic[M]):
    def __init__(
        self,
        kind: WorkerKind[M],
        streams: StreamStore,
        settings: WorkerSettings,
        *,
        consumer: str | None = None,
    ) -> None:
        self.kind = kind
        self.streams = streams
        self.settings = settings
        self.consumer = consumer or default_consumer_name(kind.name)
        self.report = WorkerReport()
        self._stop = threading.Event()
        self._next_claim = 0.0
        self._next_trim = time.monotonic() + settings.trim_interval_s
        self._log = log.bind(worker=kind.name, consumer=self.consumer)

    # -- lifecycle -------------------------------------------------------------------------

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT finish the batch in hand, ack it, then exit (main thread only)."""

        def _handler(signum: int, _frame: FrameType | None) -> None:
            self._log.info("worker.stopping", signal=signal.Signals(signum).name)
            self.stop()

        signal.signal(signal.SIGTERM, _handler)
        signal.signal(signal.SIGINT, _handler)

    def run(self, *, burst: bool = False) -> WorkerReport:
        """Consume until stopped; with `burst`, until the group has nothing left to do."""
        k = self.kind
        self._with_retry(lambda: self.streams.ensure_group(k.stream, k.group))
        self._log.info("worker.started", stream=k.stream, group=k.group, burst=burst)
        # Entries this consumer name held before a restart come first.
        own = self._with_retry(
            lambda: self.streams.read(
                k.stream, k.group, self.consumer, count=self.settings.batch_size,
                block_ms=None, own_pending=True,
            )
        )
        if own:
            self._with_retry(lambda: self._redeliver(own))
        while not self.stopping:
            handled = self._with_retry(lambda: self.step(burst=burst))
            if burst and handled == 0 and self._idle():
                break
        self._log.info(
            "worker.stopped",
            handled=self.report.handled,
            dead_lettered=self.report.dead_lettered,
            reclaimed=self.report.reclaimed,
        )
        return self.report

    def _idle(self) -> bool:
        # Called right after a read found nothing new: pending entries are all that is left.
        return self.streams.pending_count(self.kind.stream, self.kind.group) == 0

    def _with_retry(self, fn: Callable[[], T]) -> T:
        """Run `fn`, backing off while a store is down. Gives up only when stopping."""
        delay = self.settings.backoff_initial_s
        while True:
            try:
                return fn()
            except _TRANSIENT as exc:
                if self.stopping:
                    raise
                self._log.warning("worker.backoff", error=str(exc), sleep_s=round(delay, 2))
                self._stop.wait(delay)
                delay = min(delay * 2, self.settings.backoff_max_s)

    # -- one iteration ---------------------------------------------------------------------

    def step(self, *, burst: bool = False) -> int:
        """Reclaim orphans when due, then read and handle one batch. Returns entries handled."""
        k = self.kind
        handled = 0
        now = time.monotonic()
        if now >= self._next_claim:
            self._next_claim = now + self.settings.claim_interval_s
            handled += self._reclaim()
        if self.settings.trim_interval_s and now >= self._next_trim:
            self._next_trim = now + self.settings.trim_interval_s
            self._trim()
        entries = self.streams.read(
            k.stream,
            k.group,
            self.consumer,
            count=self.settings.batch_size,
            block_ms=self.settings.block_ms,
        )
        if entries:
            handled += self._process(entries)
        elif burst:
            # Nothing new: orphans are all that can be left, so look for them now.
            self._next_claim = 0.0
        return handled

    def _trim(self) -> None:
        """Drop what every group has acknowledged; a failure only delays it to next time."""
        try:
            removed = self.streams.trim_consumed(self.kind.stream)
        except StoreUnavailable as exc:
            self._log.warning("stream.trim_failed", stream=self.kind.stream, error=str(exc))
            return
        if removed:
            self._log.info("stream.trimmed", stream=self.kind.stream, removed=removed)

    def _reclaim(self) -> int:
        k = self.kind
        claimed = self.streams.claim_idle(
            k.stream,
            k.group,
            self.consumer,
            min_idle_ms=self.settings.claim_idle_ms,
            count=self.settings.batch_size,
        )
        if not claimed:
            return 0
        self.report.reclaimed += len(claimed)
        self._log.info("worker.reclaimed", count=len(claimed))
        return self._redeliver(claimed)

    def _redeliver(self, entries: list[StreamEntry]) -> int:
        """Entries delivered before (reclaimed, or held before a restart): an entry past
        `max_deliveries` has killed or failed every consumer that took it, so it goes to
        the dead-letter stream instead of the handler."""
        k = self.kind
        counts = self.streams.deliveries(k.stream, k.group, [e.entry_id for e in entries])
        live: list[StreamEntry] = []
        for entry in entries:
            deliveries = counts.get(entry.entry_id, 1)
            if deliveries > self.settings.max_deliveries:
                error = self.streams.last_error(k.stream, k.group, entry.entry_id)
                self._dead_letter(
                    entry, error or "consumer died while holding it (no error recorded)",
                    deliveries - 1,
                )
            else:
                live.append(entry)
        return self._process(live) if live else 0

    def _process(self, entries: list[StreamEntry]) -> int:
        k = self.kind
        decoded: list[tuple[StreamEntry, M]] = []
        for entry in entries:
            try:
                decoded.append((entry, k.decode(entry)))
            except MalformedEntry as exc:
                # Undecodable now is undecodable forever: no point in retrying.
                self._dead_letter(entry, f"undecodable: {exc.reason}", 1)
            except Exception as exc:
                # A stage's own decoder failing unexpectedly: just as permanent.
                self._dead_letter(entry, f"undecodable: {type(exc).__name__}: {exc}", 1)
        if not decoded:
            return 0
        try:
            self._with_retry(lambda: k.handle([m for _, m in decoded]))
        except _TRANSIENT:
            return 0  # stopping while a store is down: leave them pending for a reclaim
        except Exception as exc:
            if len(decoded) == 1:
                self._failed(decoded[0][0], exc)
                return 0
            # One bad message must not hold up the rest: retry them one by one.
            self._log.warning("worker.batch_failed", error=repr(exc), size=len(decoded))
            done = 0
            for entry, message in decoded:
                try:
                    self._with_retry(lambda m=message: k.handle([m]))  # type: ignore[misc]
                except _TRANSIENT:
                    return done
                except Exception as single_exc:
                    self._failed(entry, single_exc)
                    continue
                self.streams.ack(k.stream, k.group, [entry.entry_id])
                done += 1
            self.report.handled += done
            return done
        self.streams.ack(k.stream, k.group, [e.entry_id for e, _ in decoded])
        self.report.handled += len(decoded)
        self.report.batches += 1
        return len(decoded)

    def _failed(self, entry: StreamEntry, exc: Exception) -> None:
        k = self.kind
        error = f"{type(exc).__name__}: {exc}"
        self.report.failures += 1
        self.report.errors.append(error)
        self._log.warning("worker.entry_failed", entry_id=entry.entry_id, error=error)
        self.streams.record_error(k.stream, k.group, entry.entry_id, error)
        deliveries = self.streams.deliveries(k.stream, k.group, [entry.entry_id]).get(
            entry.entry_id, 1
        )
        # A store's rejection (Qdrant 4xx) is the same on every try: dead-letter it now.
        if deliveries >= self.settings.max_deliveries or isinstance(exc, StoreRejected):
            self._dead_letter(entry, error, deliveries)
        # Otherwise it stays pending; a reclaim after `claim_idle_ms` retries it.

    def _dead_letter(self, entry: StreamEntry, error: str, deliveries: int) -> None:
        k = self.kind
        self.streams.dead_letter(k.stream, k.group, entry, error, deliveries)
        self.report.dead_lettered += 1
        self._log.error(
            "worker.dead_lettered", entry_id=entry.entry_id, error=error, deliveries=deliveries
        )
        if k.on_dead_letter is not None:
            try:
                k.on_dead_letter(entry, error)
            except Exception as exc:  # bookkeeping only; the entry is safe in the DLQ
                self._log.warning("worker.dead_letter_hook_failed", error=repr(exc))
