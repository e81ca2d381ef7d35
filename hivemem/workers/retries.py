"""Due rq retries back onto their queue, from a thread of the worker process.

rq's own scheduler runs in a forked child. A child forked from a reflect worker inherits its
open files, the embedded Qdrant shard's lock among them, and outlives a SIGKILLed parent: the
restarted worker then finds the folder "open in another process". This thread does the one
thing hivemem needs from the scheduler (retry back-off) without a second process.
"""

from __future__ import annotations

import threading

import structlog

from hivemem.store.redis import Redis

log = structlog.get_logger(__name__)


def promote_due_retries(connection: Redis, queue_name: str) -> int:
    """Move jobs whose retry time has come from the scheduled registry onto the queue."""
    from rq import Queue
    from rq.job import Job
    from rq.registry import ScheduledJobRegistry

    queue = Queue(queue_name, connection=connection)
    registry = ScheduledJobRegistry(queue=queue)  # type: ignore[no-untyped-call]
    ids = registry.get_jobs_to_schedule()
    for job_id in ids:
        job = Job.fetch(job_id, connection=connection)
        registry.remove(job)
        queue.enqueue_job(job)
    return len(ids)


class RetryPromoter:
    """A daemon thread running `promote_due_retries` every `interval_s` until stopped."""

    def __init__(self, connection: Redis, queue_name: str, interval_s: float = 0.5) -> None:
        self.connection = connection
        self.queue_name = queue_name
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rq-retries", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                promote_due_retries(self.connection, self.queue_name)
            except Exception as exc:  # Redis away for a moment: try again next tick
                log.warning("reflect.retry_promotion_failed", error=repr(exc))
