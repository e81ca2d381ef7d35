"""rq workers that hand their `JobContext` to every job they run.

A job function of the reflect queue takes the context as its first argument; the job
itself carries only ids (enqueued by name, it runs in whichever worker process picks it
up). The worker, built by `hivemem.runtime.wiring`, holds the context and passes it in, so
several workers in one process (embedded runtimes in tests, threads on one server) never
share or clobber each other's stores, models or reflectors.

Outages and crashes: a worker process runs rq's loop again after every Redis outage
(`work_through_outages`; rq's own loop ends on any Redis error), and the embedded reflect
thread backs off the same way. A running job's heartbeat lasts `reflection.job_heartbeat_s`
and is renewed while it runs; `QueueCare` (a thread of each worker process) hands back the
jobs whose heartbeat lapsed (their worker was killed), so they wait seconds, not the job
timeout plus rq's 10-minute maintenance.

This module imports rq at the top: import it lazily (rq is a heavy optional dependency).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import structlog
from rq import Queue, SimpleWorker
from rq.exceptions import StopRequested
from rq.executions import Execution
from rq.job import Job
from rq.registry import StartedJobRegistry
from rq.timeouts import TimerDeathPenalty

from hivemem.config import ReflectionSettings
from hivemem.errors import HivememError, StoreUnavailable
from hivemem.store.redis import OUTAGE_ERRORS as REDIS_OUTAGE_ERRORS
from hivemem.store.redis import Redis, redis_errors
from hivemem.workers.jobs import JobContext
from hivemem.workers.keepalive import Keepalive
from hivemem.workers.queue import JobQueue
from hivemem.workers.retries import promote_due_retries

log = structlog.get_logger(__name__)

# How long a worker's teardown waits for rq's command listener thread to end (a daemon:
# one still waiting ends by itself, or with the process).
_LISTENER_STOP_S = 1.0
# What a Redis outage raises out of rq (redis-py's errors: rq calls it directly) or ours.
OUTAGE_ERRORS: tuple[type[Exception], ...] = (*REDIS_OUTAGE_ERRORS, StoreUnavailable)


class ContextJob(Job):
    """A job whose function is called as ``func(context, *args, **kwargs)``."""

    context: JobContext | None = None

    def _execute(self) -> Any:
        if self.context is None:
            raise HivememError(
                f"job {self.id} needs a hivemem worker (hivemem worker reflect) to run it"
            )
        return self.func(self.context, *self.args, **self.kwargs)


class ContextWorker(SimpleWorker):
    """A SimpleWorker (jobs run in this process, so models and clients load once) that
    gives each job its context."""

    job_class = ContextJob

    def __init__(
        self, queues: list[Queue], *, context: JobContext, connection: Redis,
        name: str | None = None, job_heartbeat_s: int | None = None,
    ) -> None:
        super().__init__(queues, connection=connection, name=name, job_class=ContextJob)
        self.context = context
        # rq counts successes in the worker's Redis hash only (gone once the worker quits).
        self.handled = 0
        self.job_heartbeat_s = job_heartbeat_s or ReflectionSettings().job_heartbeat_s
        # A running job's heartbeat, renewed from a thread: a SimpleWorker runs the job in
        # its own thread, and rq renews nothing while it does (its heartbeat would have to
        # last the whole job timeout, so a killed worker's job sat "started" that long).
        self._job_keepalive = Keepalive(self.job_heartbeat_s / 3, self._renew_job,
                                        name="rq-job-heartbeat")
        # Registered in rq's worker registry (between birth and death).
        self.registered = False
        # Set from the start of a `work()` run until its teardown registered the death: a
        # run an outage ended before that leaves the registration to be cleared first.
        self._unfinished_run = False
        self.births = 0
        # Called with False when an outage ends a run, True when the worker is registered
        # again (its metrics' liveness gauge).
        self.on_health: Callable[[bool], None] | None = None

    @property
    def stop_requested(self) -> bool:
        """A warm shutdown was asked for (SIGTERM, or `stop_after_job`). rq sets its stop
        flag only when the signal comes mid-job; between jobs it raises `StopRequested` out
        of its loop instead, and only the request's date says so afterwards."""
        return bool(self._stop_requested) or self._shutdown_requested_date is not None

    def get_heartbeat_ttl(self, job: Job, working_time: float = 0.0) -> int:
        """Every job's heartbeat lasts `job_heartbeat_s`, renewed while it runs."""
        return self.job_heartbeat_s

    def perform_job(self, job: Job, queue: Queue, execution: Execution) -> bool:
        if isinstance(job, ContextJob):
            job.context = self.context
        with self._job_keepalive.holding([(job, execution)]):
            succeeded = bool(super().perform_job(job, queue, execution))
        self.handled += succeeded
        return succeeded

    def _renew_job(self, held: Sequence[Any]) -> None:
        for job, execution in held:
            with redis_errors("renew a reflect job's heartbeat"):
                self.maintain_heartbeats(job, execution)

    def work(self, *args: Any, **kwargs: Any) -> bool:
        """rq's work loop; a run that an outage ended before its teardown clears its
        registration first (rq refuses a worker whose name is still registered alive)."""
        if self._unfinished_run:
            self.clear_registration()
        self._unfinished_run = True
        worked = bool(super().work(*args, **kwargs))
        self._unfinished_run = False
        return worked

    def clear_registration(self) -> None:
        """After an outage: stop the old command listener, register the death that the
        teardown could not (raises while Redis is still away)."""
        self.unsubscribe()
        self.register_death()

    def register_birth(self) -> None:
        super().register_birth()  # type: ignore[no-untyped-call]
        self.registered = True
        self.births += 1
        if self.on_health is not None:
            self.on_health(True)

    def register_death(self) -> None:
        self.registered = False
        super().register_death()  # type: ignore[no-untyped-call]

    def unsubscribe(self) -> None:
        """rq's, with the wait for its command listener bounded. redis-py 8.2's
        `PubSubWorkerThread.stop()` joins the thread with no limit, and the thread may be
        in a wait of rq's `sleep_time` (60 s) for a subscription that the unsubscribe just
        ended: a worker's teardown then took up to a minute (measured on each burst of the
        embedded reflect worker; a `hivemem worker reflect` stopping is the same path). The
        thread, if still waiting, finds itself stopped when it wakes and ends."""
        thread = self.pubsub_thread
        if not thread:
            return
        self.pubsub_thread = None
        # Redis away (an outage ended the run): the thread is stopped all the same.
        with contextlib.suppress(*OUTAGE_ERRORS):
            self.pubsub.unsubscribe()
        stop: Any = thread.stop
        try:
            stop(timeout=_LISTENER_STOP_S)  # joins it, this long at most
        except TypeError:  # redis-py before 8.2: stop() takes no timeout and does not join
            stop()
            thread.join(timeout=_LISTENER_STOP_S)
        self.pubsub.close()


class ThreadContextWorker(ContextWorker):
    """A ContextWorker that can live in a thread (embedded mode): no signal handlers,
    timer-based job timeouts."""

    death_penalty_class = TimerDeathPenalty

    def _install_signal_handlers(self) -> None:
        pass  # signals reach the main thread only; the owner stops this worker itself

    # Called before each job: may hold this thread back while foreground work (a recall in
    # this process) runs (`hivemem.recall.foreground`). None: never.
    before_job: Callable[[], None] | None = None

    def perform_job(self, job: Job, queue: Queue, execution: Execution) -> bool:
        if self.before_job is not None:
            self.before_job()
        return super().perform_job(job, queue, execution)

    def subscribe(self) -> None:
        """No command listener: rq's pubsub commands (shutdown, kill-horse, stop-job) are
        for worker processes; the owner stops this one itself (`stop_after_job`). rq
        would otherwise open a pubsub connection and a thread for every burst."""
        self.pubsub_thread = None

    def stop_after_job(self) -> None:
        """End the current burst after the job that runs (what rq's warm shutdown does):
        the jobs still queued wait in Redis for the next start."""
        self._stop_requested = True


class ThreadWorker:
    """Runs the reflect queue's jobs in a thread (embedded mode): a `ThreadContextWorker`
    in burst passes, with the queue's upkeep (`QueueCare`: due retries, abandoned jobs)
    done by this loop (there is no rq scheduler process). An outage of its Redis ends a
    pass; the loop backs off and goes on."""

    def __init__(
        self, connection: Redis, jobs: JobQueue, context: JobContext, *, poll_s: float = 0.05,
        backoff_initial_s: float = 0.2, backoff_max_s: float = 5.0,
    ) -> None:
        self.connection = connection
        self.queue = Queue(jobs.name, connection=connection)
        self.worker: ContextWorker = ThreadContextWorker(
            [self.queue], context=context, connection=connection,
            job_heartbeat_s=jobs.reflection.job_heartbeat_s,
        )
        self.care = QueueCare(self.worker, jobs)
        self.poll_s = poll_s
        self.backoff = (backoff_initial_s, backoff_max_s)
        self._stop = threading.Event()
        # Set while this loop may hold a job: rq pops a job off the queue before it enters
        # the started registry, and in that gap the queue and the registry both look empty.
        self._busy = threading.Event()

    def idle(self) -> bool:
        """No job queued or running (retries scheduled for later do not count)."""
        if self._busy.is_set():  # read first: nothing leaves the queue while it is clear
            return False
        return self.queue.count == 0 and StartedJobRegistry(queue=self.queue).count == 0

    def run(self) -> None:
        delay = self.backoff[0]
        while not self._stop.is_set():
            try:
                worked = self._pass()
            except OUTAGE_ERRORS as exc:
                log.warning("reflect.worker_backoff", worker=self.worker.name,
                            error=str(exc), sleep_s=round(delay, 2))
                self._stop.wait(delay)
                delay = min(delay * 2, self.backoff[1])
                continue
            delay = self.backoff[0]
            if not worked:
                self._stop.wait(self.poll_s)

    def _pass(self) -> bool:
        self.care.tick()
        self._busy.set()
        try:
            if self.queue.count:
                self.worker.work(burst=True, logging_level="WARNING")
                return True
        finally:
            self._busy.clear()
        return False

    def pause_before_jobs(self, pause: Callable[[], None]) -> None:
        """`pause` runs before each job (see `ThreadContextWorker.before_job`)."""
        if isinstance(self.worker, ThreadContextWorker):
            self.worker.before_job = pause

    def stop(self) -> None:
        self._stop.set()
        # A burst runs every queued job before it returns: a long queue would outlive the
        # owner's Redis server (embedded mode stops it right after its workers).
        if isinstance(self.worker, ThreadContextWorker):
            self.worker.stop_after_job()


class QueueCare:
    """The reflect queue's upkeep, from a thread of a reflect worker process (or the
    embedded reflect loop): due retries back onto the queue at every tick; every
    `reflection.maintenance_interval_s`, the worker's registration renewed (its liveness in
    `hivemem status`) and the jobs whose heartbeat lapsed handed back (`JobQueue.
    recover_abandoned`)."""

    def __init__(self, worker: ContextWorker, jobs: JobQueue, *, tick_s: float = 0.5) -> None:
        self.worker = worker
        self.jobs = jobs
        self.tick_s = tick_s
        self.interval_s = jobs.reflection.maintenance_interval_s
        self._next = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def tick(self) -> None:
        """One round; raises what an outage raises."""
        promote_due_retries(self.worker.connection, self.jobs.name)
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self.interval_s
        if self.worker.registered:
            self.worker.heartbeat()
        for job_id in self.jobs.recover_abandoned(self.worker):
            log.warning("reflect.job_abandoned", job_id=job_id,
                        heartbeat_s=self.worker.job_heartbeat_s)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="rq-care", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        failing = False
        while not self._stop.wait(self.tick_s):
            try:
                self.tick()
            except Exception as exc:  # Redis away for a moment: try again next tick
                log.warning("reflect.queue_care_failed", error=repr(exc))
                if not failing:
                    # An idle worker meets an outage inside rq's dequeue, which reconnects
                    # by itself: its liveness says so from here.
                    failing = True
                    self._health(False)
            else:
                if failing:
                    failing = False
                    self._health(True)

    def _health(self, ok: bool) -> None:
        if self.worker.on_health is not None:
            self.worker.on_health(ok)


def work_through_outages(
    worker: ContextWorker, *, burst: bool = False, backoff_initial_s: float = 0.2,
    backoff_max_s: float = 10.0,
) -> None:
    """Run rq's work loop until a warm shutdown (or, with `burst`, an empty queue), again
    after every outage: rq ends its loop on any Redis error (its teardown's
    `register_death` then raises too), so a reflect worker used to exit with its Redis.
    While Redis is away the worker backs off, says so in the log and through
    `worker.on_health(False)`, and starts again (re-registered) when Redis answers."""
    delay = backoff_initial_s
    births = worker.births
    while True:
        try:
            worker.work(burst=burst, with_scheduler=False, logging_level="WARNING")
            error = None
        except StopRequested:
            return
        except OUTAGE_ERRORS as exc:
            error = f"{type(exc).__name__}: {exc}"
        if worker.stop_requested:
            return
        if error is None:
            if burst:
                return
            # rq's loop ends by itself only on an error it logged (rq.worker) and swallowed.
            error = "rq's work loop ended on an error (see the rq.worker log)"
        if worker.births != births:  # it ran since the last outage: back off from the start
            births = worker.births
            delay = backoff_initial_s
        if worker.on_health is not None:
            worker.on_health(False)
        log.warning("reflect.worker_backoff", worker=worker.name, error=error,
                    sleep_s=round(delay, 2))
        try:
            time.sleep(delay)
        except StopRequested:  # SIGTERM while backing off (rq's handler, still installed)
            return
        delay = min(delay * 2, backoff_max_s)
