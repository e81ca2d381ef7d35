"""The one consume loop every stream worker runs.

Consumer groups give at-least-once delivery: a batch is acked only after its handler has
made the writes durable. A stage's streams are partitioned; the workers of a stage divide
the partitions among themselves through leases in Redis (`hivemem.store.partitions`), and
each reads, reclaims, trims and reports only its own partitions. Entries a dead consumer
left pending are reclaimed (XAUTOCLAIM) after `claim_idle_ms`; an entry that keeps failing
goes to its partition's dead-letter stream with its error after `max_deliveries`. While a
store is down the batch is retried in place with back-off, so an outage never dead-letters
good messages; a misconfiguration (`ConfigurationError`) stops the worker instead, for the
same reason.

Reading: on one Redis a worker blocks in one XREADGROUP over all its partitions' streams.
On a Redis Cluster each partition is its own slot, so it reads them in one pipeline per node
without blocking (or blocks, when it owns one stream) and, between empty polls, waits on a
doorbell (`hivemem.store.doorbell`) that rings when any of its streams grows.
"""

from __future__ import annotations

import math
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Generic, TypeVar

import structlog

from hivemem.config import WorkerSettings
from hivemem.errors import (
    ConfigurationError,
    MalformedEntry,
    RetryLater,
    StoreRejected,
    StoreUnavailable,
)
from hivemem.pipeline.topology import Stage
from hivemem.store.doorbell import Doorbell
from hivemem.store.streams import StreamEntry, StreamStore
from hivemem.workers.keepalive import Keepalive

M = TypeVar("M")
T = TypeVar("T")
log = structlog.get_logger(__name__)

_TRANSIENT = (StoreUnavailable, RetryLater)
# A cluster cannot block on streams of several slots at once. A running worker waits on a
# doorbell (`hivemem.store.doorbell`) between empty polls; a burst run (tests, benchmarks,
# which check for idleness after every empty read) polls this often instead.
_POLL_S = 0.02
_NOT_READY_S = 0.05
_HANDOVER_S = 0.25


@dataclass(frozen=True)
class WorkerKind(Generic[M]):
    """A stream stage: where it reads, how an entry becomes a message, what it does."""

    name: str
    streams: tuple[str, ...]
    group: str
    decode: Callable[[StreamEntry], M]
    handle: Callable[[list[M]], None]
    on_dead_letter: Callable[[StreamEntry, str], None] | None = None
    # A stage that works on spare capacity reads only while this says so (None: always);
    # asked before every read, and again every `_NOT_READY_S` while it says no.
    ready: Callable[[], bool] | None = None
    # Entries per read at most, if fewer than `WorkerSettings.batch_size`.
    batch_size: int | None = None
    # Housekeeping of the partitions the worker owns (their indexes), every
    # `sweep_interval_s` (0: never), between reads: state a dead or cut-off worker left that
    # no new entry would resolve (the boundary stage's orphaned buffers).
    sweep: Callable[[list[int]], None] | None = None
    sweep_interval_s: float = 0.0
    # A stage whose writes check a forget's mark (an entry id: `Keys.session_forgotten`)
    # takes each message's entry id too, instead of `handle`.
    handle_delivered: Callable[[list[M], list[str]], None] | None = None

    def deliver(self, decoded: Sequence[tuple[StreamEntry, M]]) -> None:
        """Hand `decoded` to the stage (with their entry ids, if it takes them)."""
        messages = [m for _, m in decoded]
        if self.handle_delivered is not None:
            self.handle_delivered(messages, [e.entry_id for e, _ in decoded])
        else:
            self.handle(messages)

    @classmethod
    def of(
        cls,
        stage: Stage,
        decode: Callable[[StreamEntry], M],
        handle: Callable[[list[M]], None],
        on_dead_letter: Callable[[StreamEntry, str], None] | None = None,
        *,
        ready: Callable[[], bool] | None = None,
        batch_size: int | None = None,
        sweep: Callable[[list[int]], None] | None = None,
        sweep_interval_s: float = 0.0,
        handle_delivered: Callable[[list[M], list[str]], None] | None = None,
    ) -> WorkerKind[M]:
        """The worker kind of a pipeline stage (its name, partitions' streams and group)."""
        return cls(name=stage.name, streams=tuple(stage.streams()), group=stage.group,
                   decode=decode, handle=handle, on_dead_letter=on_dead_letter,
                   ready=ready, batch_size=batch_size, sweep=sweep,
                   sweep_interval_s=sweep_interval_s, handle_delivered=handle_delivered)


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
        self._next_refresh = 0.0
        self._next_sweep = 0.0
        # Leases live a claim interval: a dead worker's partitions move within that.
        self.leases = streams.leases(kind.name, self.consumer, settings.claim_idle_ms,
                                     partitions=len(kind.streams))
        self._refresh_s = min(settings.claim_interval_s, settings.claim_idle_ms / 3000)
        self._keepalive = Keepalive(settings.claim_idle_ms / 3000, self._keep_alive,
                                    name=f"hivemem-keepalive-{kind.name}")
        self.owned: list[str] = []
        self._doorbell: Doorbell | None = None
        self._log = log.bind(worker=kind.name, consumer=self.consumer)
        # Told False while a store is away (the worker backs off), True once it answers
        # again: the process's liveness (its metrics).
        self.on_health: Callable[[bool], None] | None = None
        # Called between batches: may hold this thread back while foreground work (a
        # recall in this process) runs (`hivemem.recall.foreground`). None: never.
        self.pause: Callable[[], None] | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def stop(self) -> None:
        self._stop.set()
        bell = self._doorbell
        if bell is not None:
            bell.wake()  # a stop must not wait for the doorbell's timeout

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
        """Consume until stopped; with `burst`, until its partitions have nothing left."""
        k = self.kind
        self._with_retry(lambda: self.streams.ensure_groups(list(k.streams), k.group))
        self._with_retry(self._refresh)
        self._log.info("worker.started", group=k.group, partitions=len(self.owned),
                       burst=burst)
        try:
            # Entries this consumer name held before a restart come first.
            own = self._with_retry(
                lambda: self.streams.read_many(
                    self.owned, k.group, self.consumer, count=self.settings.batch_size,
                    block_ms=None, own_pending=True,
                )
            )
            if own:
                self._with_retry(lambda: self._redeliver(own))
            while not self.stopping:
                handled = self._with_retry(lambda: self.step(burst=burst))
                if burst and handled == 0 and self._idle():
                    break
        except _TRANSIENT as exc:
            if not self.stopping:
                raise
            # Told to stop while a store is down (or already gone: an embedded owner that
            # stopped its server after the drain timed out): what is in hand stays pending
            # for a reclaim, so this is a stop, not a crash.
            self._log.warning("worker.stopped_with_store_down", error=str(exc))
        finally:
            self._keepalive.close()
            if self._doorbell is not None:
                self._doorbell.close()
                self._doorbell = None
            try:
                self.leases.leave()
            except (StoreUnavailable, ConfigurationError) as exc:
                self._log.warning("worker.leave_failed", error=str(exc))
        self._log.info(
            "worker.stopped",
            handled=self.report.handled,
            dead_lettered=self.report.dead_lettered,
            reclaimed=self.report.reclaimed,
        )
        return self.report

    def _refresh(self) -> None:
        """Renew this worker's partition leases (and take or give up partitions)."""
        before = self.owned
        owned = self.leases.refresh()
        self.owned = [self.kind.streams[p] for p in owned]
        # A worker that joined waits for others to hand over its share: ask again soon
        # rather than a whole refresh interval later.
        self._next_refresh = time.monotonic() + (
            min(self._refresh_s, _HANDOVER_S) if self.leases.waiting else self._refresh_s)
        if self.owned != before:
            self._log.info("worker.partitions", owned=owned)
            self._next_claim = 0.0  # new partitions: look for their orphans now

    def _keep_alive(self, entries: Sequence[StreamEntry]) -> None:
        """While a batch is in hand (from the keepalive thread): this worker is not dead."""
        self.leases.renew()
        for stream in dict.fromkeys(e.stream for e in entries):
            self.streams.touch(stream, self.kind.group, self.consumer,
                               [e.entry_id for e in entries if e.stream == stream])

    def _idle(self) -> bool:
        # Called right after a read found nothing new in this worker's partitions. Others'
        # partitions count too: one still leased by a dead worker may hold undelivered
        # entries (lag) that this worker reads once the lease expires.
        return self.streams.drained(list(self.kind.streams), self.kind.group)

    def _with_retry(self, fn: Callable[[], T]) -> T:
        """Run `fn`, backing off while a store is down. Gives up only when stopping."""
        delay = self.settings.backoff_initial_s
        backed_off = False
        while True:
            try:
                result = fn()
            except _TRANSIENT as exc:
                if self.stopping:
                    raise
                self._log.warning("worker.backoff", error=str(exc), sleep_s=round(delay, 2))
                if self.on_health is not None:
                    self.on_health(False)
                backed_off = True
                self._stop.wait(delay)
                delay = min(delay * 2, self.settings.backoff_max_s)
                continue
            if backed_off and self.on_health is not None:
                self.on_health(True)
            return result

    # -- one iteration ---------------------------------------------------------------------

    def step(self, *, burst: bool = False) -> int:
        """Refresh leases and reclaim orphans when due, then read and handle one batch.
        Returns entries handled."""
        k = self.kind
        handled = 0
        now = time.monotonic()
        if now >= self._next_refresh:
            self._refresh()
        if now >= self._next_claim:
            self._next_claim = now + self.settings.claim_interval_s
            handled += self._reclaim()
        if self.settings.trim_interval_s and now >= self._next_trim:
            self._next_trim = now + self.settings.trim_interval_s
            self._trim()
        if k.sweep is not None and k.sweep_interval_s and now >= self._next_sweep:
            self._next_sweep = now + k.sweep_interval_s
            k.sweep([k.streams.index(s) for s in self.owned])
        if not self.owned:
            self._stop.wait(min(self._refresh_s, self.settings.block_ms / 1000))
            return handled
        if k.ready is not None and not k.ready():
            self._stop.wait(min(_NOT_READY_S, self.settings.block_ms / 1000))
            return handled
        if self.pause is not None:
            self.pause()
        entries = self.streams.read_many(
            self.owned,
            k.group,
            self.consumer,
            count=min(self.settings.batch_size, k.batch_size or self.settings.batch_size),
            block_ms=self.settings.block_ms,
        )
        if entries:
            if self._doorbell is not None:
                for stream, last in {e.stream: e.entry_id for e in entries}.items():
                    self._doorbell.seen(stream, last)
            handled += self._process(entries)
        elif burst:
            if not self.streams.blocks(len(self.owned)):
                self._stop.wait(_POLL_S)
            # Nothing new: orphans are all that can be left, so look for them now.
            self._next_claim = 0.0
        elif not self.streams.blocks(len(self.owned)):
            # Until an entry arrives, a lease refresh or a reclaim is due, or a stop.
            bell = self._bell()
            bell.watch(self.owned)
            due = min(self._next_refresh, self._next_claim,
                      self._next_trim if self.settings.trim_interval_s else math.inf,
                      self._next_sweep if k.sweep is not None and k.sweep_interval_s
                      else math.inf,
                      ) - time.monotonic()
            bell.wait(max(0.0, min(self.settings.block_ms / 1000, due)))
        return handled

    def _bell(self) -> Doorbell:
        if self._doorbell is None:
            self._doorbell = self.streams.doorbell(self.settings.block_ms)
        return self._doorbell

    def _trim(self) -> None:
        """Drop what every group has acknowledged; a failure only delays it to next time."""
        for stream in self.owned:
            try:
                removed = self.streams.trim_consumed(stream)
            except StoreUnavailable as exc:
                self._log.warning("stream.trim_failed", stream=stream, error=str(exc))
                return
            if removed:
                self._log.info("stream.trimmed", stream=stream, removed=removed)

    def _reclaim(self) -> int:
        k = self.kind
        handled = 0
        for stream in self.owned:
            claimed = self.streams.claim_idle(
                stream,
                k.group,
                self.consumer,
                min_idle_ms=self.settings.claim_idle_ms,
                count=self.settings.batch_size,
            )
            if not claimed:
                continue
            self.report.reclaimed += len(claimed)
            self._log.info("worker.reclaimed", stream=stream, count=len(claimed))
            handled += self._redeliver(claimed)
        return handled

    def _redeliver(self, entries: list[StreamEntry]) -> int:
        """Entries delivered before (reclaimed, or held before a restart): an entry past
        `max_deliveries` has killed or failed every consumer that took it, so it goes to
        the dead-letter stream instead of the handler."""
        k = self.kind
        counts: dict[tuple[str, str], int] = {}
        for stream in {e.stream for e in entries}:
            ids = [e.entry_id for e in entries if e.stream == stream]
            for entry_id, n in self.streams.deliveries(stream, k.group, ids).items():
                counts[stream, entry_id] = n
        live: list[StreamEntry] = []
        for entry in entries:
            deliveries = counts.get((entry.stream, entry.entry_id), 1)
            if deliveries > self.settings.max_deliveries:
                error = self.streams.last_error(entry.stream, k.group, entry.entry_id)
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
        with self._keepalive.holding([e for e, _ in decoded]):
            return self._handle(decoded)

    def _handle(self, decoded: list[tuple[StreamEntry, M]]) -> int:
        k = self.kind
        try:
            self._with_retry(lambda: k.deliver(decoded))
        except _TRANSIENT:
            return 0  # stopping while a store is down: leave them pending for a reclaim
        except ConfigurationError:
            raise  # the deployment is wrong, not the entries: never dead-letter for it
        except Exception as exc:
            if len(decoded) == 1:
                self._failed(decoded[0][0], exc)
                return 0
            # One bad message must not hold up the rest: retry them one by one.
            self._log.warning("worker.batch_failed", error=repr(exc), size=len(decoded))
            done = 0
            for entry, message in decoded:
                try:
                    self._with_retry(
                        lambda e=entry, m=message: k.deliver([(e, m)]))  # type: ignore[misc]
                except _TRANSIENT:
                    return done
                except ConfigurationError:
                    raise
                except Exception as single_exc:
                    self._failed(entry, single_exc)
                    continue
                self.streams.ack(entry.stream, k.group, [entry.entry_id])
                done += 1
            self.report.handled += done
            return done
        self._ack([e for e, _ in decoded])
        self.report.handled += len(decoded)
        self.report.batches += 1
        return len(decoded)

    def _ack(self, entries: list[StreamEntry]) -> None:
        for stream in dict.fromkeys(e.stream for e in entries):
            self.streams.ack(stream, self.kind.group,
                             [e.entry_id for e in entries if e.stream == stream])

    def _failed(self, entry: StreamEntry, exc: Exception) -> None:
        k = self.kind
        error = f"{type(exc).__name__}: {exc}"
        self.report.failures += 1
        self.report.errors.append(error)
        self._log.warning("worker.entry_failed", entry_id=entry.entry_id, error=error)
        self.streams.record_error(entry.stream, k.group, entry.entry_id, error)
        deliveries = self.streams.deliveries(entry.stream, k.group, [entry.entry_id]).get(
            entry.entry_id, 1
        )
        # A store's rejection (Qdrant 4xx) is the same on every try: dead-letter it now.
        if deliveries >= self.settings.max_deliveries or isinstance(exc, StoreRejected):
            self._dead_letter(entry, error, deliveries)
        # Otherwise it stays pending; a reclaim after `claim_idle_ms` retries it.

    def _dead_letter(self, entry: StreamEntry, error: str, deliveries: int) -> None:
        k = self.kind
        if self.streams.dead_letter(entry.stream, k.group, entry, error, deliveries,
                                    held=True):
            self.report.dead_lettered += 1
            self._log.error("worker.dead_lettered", entry_id=entry.entry_id, error=error,
                            deliveries=deliveries)
        else:
            # Forgotten while held: no dead letter, but the stage still learns of it (the
            # embed stage's skip, which checks the session's forget mark itself).
            self._log.info("worker.dead_letter_forgotten", entry_id=entry.entry_id)
        if k.on_dead_letter is not None:
            try:
                k.on_dead_letter(entry, error)
            except Exception as exc:  # bookkeeping only; the entry is safe in the DLQ
                self._log.warning("worker.dead_letter_hook_failed", error=repr(exc))
