"""Due rq retries back onto their queue, from a thread of the worker process.

rq's own scheduler runs in a forked child. A child forked from a reflect worker inherits its
open files, the embedded Qdrant shard's lock among them, and outlives a SIGKILLed parent: the
restarted worker then finds the folder "open in another process". A thread of the worker
process (`hivemem.workers.rqworker.QueueCare`) calls this instead: the one thing hivemem
needs from the scheduler (retry back-off), without a second process.
"""

from __future__ import annotations

from hivemem.store.redis import Redis


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
