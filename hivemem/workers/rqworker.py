"""rq workers that hand their `JobContext` to every job they run.

A job function of the reflect queue takes the context as its first argument; the job
itself carries only ids (enqueued by name, it runs in whichever worker process picks it
up). The worker, built by `hivemem.runtime.wiring`, holds the context and passes it in, so
several workers in one process (embedded runtimes in tests, threads on one server) never
share or clobber each other's stores, models or reflectors.

This module imports rq at the top: import it lazily (rq is a heavy optional dependency).
"""

from __future__ import annotations

import threading
from typing import Any

from rq import Queue, SimpleWorker
from rq.executions import Execution
from rq.job import Job
from rq.registry import StartedJobRegistry
from rq.timeouts import TimerDeathPenalty

from hivemem.errors import HivememError
from hivemem.store.redis import Redis
from hivemem.workers.jobs import JobContext
from hivemem.workers.retries import promote_due_retries

# How long a worker's teardown waits for rq's command listener thread to end (a daemon:
# one still waiting ends by itself, or with the process).
_LISTENER_STOP_S = 1.0


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
        name: str | None = None,
    ) -> None:
        super().__init__(queues, connection=connection, name=name, job_class=ContextJob)
        self.context = context
        # rq counts successes in the worker's Redis hash only (gone once the worker quits).
        self.handled = 0

    def perform_job(self, job: Job, queue: Queue, execution: Execution) -> bool:
        if isinstance(job, ContextJob):
            job.context = self.context
        succeeded = bool(super().perform_job(job, queue, execution))
        self.handled += succeeded
        return succeeded

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
    in burst passes, with due retries moved back onto the queue by this loop (there is no
    rq scheduler process)."""

    def __init__(
        self, connection: Redis, queue_name: str, context: JobContext, *, poll_s: float = 0.05,
    ) -> None:
        self.connection = connection
        self.queue = Queue(queue_name, connection=connection)
        self.worker: ContextWorker = ThreadContextWorker(
            [self.queue], context=context, connection=connection
        )
        self.poll_s = poll_s
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
        while not self._stop.is_set():
            promote_due_retries(self.connection, self.queue.name)
            self._busy.set()
            try:
                if self.queue.count:
                    self.worker.work(burst=True, logging_level="WARNING")
                    continue
            finally:
                self._busy.clear()
            self._stop.wait(self.poll_s)

    def stop(self) -> None:
        self._stop.set()
        # A burst runs every queued job before it returns: a long queue would outlive the
        # owner's Redis server (embedded mode stops it right after its workers).
        if isinstance(self.worker, ThreadContextWorker):
            self.worker.stop_after_job()
