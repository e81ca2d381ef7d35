"""rq jobs enqueued by the stream stages, and the rq workers that run them."""

from __future__ import annotations

import threading
from typing import Any

from hivemem.config import ReflectionSettings
from hivemem.domain.episode import Episode
from hivemem.store.episodes import Enqueue
from hivemem.store.redis import Redis

REFLECT_JOB = "hivemem.workers.reflect.reflect_episode"


def reflect_job_id(episode_id: str) -> str:
    return f"reflect-{episode_id}"


def reflect_enqueuer(connection: Redis, queue_name: str, settings: ReflectionSettings) -> Enqueue:
    """Enqueue inside the boundary commit's MULTI: the job exists iff the episode closed."""
    from rq import Queue, Retry

    queue = Queue(queue_name, connection=connection)

    def enqueue(pipe: Any, episode: Episode) -> None:
        queue.enqueue_call(
            REFLECT_JOB,
            args=(episode.episode_id, episode.session_id),
            job_id=reflect_job_id(episode.episode_id),
            pipeline=pipe,
            timeout=settings.job_timeout_s,
            failure_ttl=30 * 24 * 3600,  # failed jobs keep their input and error for replay
            retry=Retry(max=settings.retries, interval=settings.retry_intervals_s)
            if settings.retries
            else None,
            description=f"reflect episode {episode.index} of {episode.session_id}",
        )

    return enqueue


def enqueue_replay(connection: Redis, queue_name: str, episode: Episode) -> str:
    """Run an episode's reflection again (e.g. after its job failed)."""
    from rq import Queue

    job = Queue(queue_name, connection=connection).enqueue_call(
        "hivemem.workers.reflect.replay_episode",
        args=(episode.episode_id, episode.session_id),
        job_id=f"replay-{episode.episode_id}-{threading.get_ident()}",
        failure_ttl=30 * 24 * 3600,
    )
    return str(job.id)


class ThreadWorker:
    """An rq SimpleWorker that can live in a thread (embedded mode): no signal handlers,
    timer-based job timeouts, and due retries moved back onto the queue by this loop."""

    def __init__(self, connection: Redis, queue_name: str, *, poll_s: float = 0.05) -> None:
        from rq import Queue, SimpleWorker
        from rq.timeouts import TimerDeathPenalty

        class _Worker(SimpleWorker):
            death_penalty_class = TimerDeathPenalty

            def _install_signal_handlers(self) -> None:
                pass

        self.queue = Queue(queue_name, connection=connection)
        self.worker = _Worker([self.queue], connection=connection)
        self.poll_s = poll_s
        self._stop = threading.Event()

    def promote_due_retries(self) -> int:
        from rq.job import Job
        from rq.registry import ScheduledJobRegistry

        registry = ScheduledJobRegistry(queue=self.queue)  # type: ignore[no-untyped-call]
        ids = registry.get_jobs_to_schedule()
        for job_id in ids:
            job = Job.fetch(job_id, connection=self.queue.connection)
            registry.remove(job)
            self.queue.enqueue_job(job)
        return len(ids)

    def idle(self) -> bool:
        """No job queued or running (retries scheduled for later do not count)."""
        from rq.registry import StartedJobRegistry

        return self.queue.count == 0 and StartedJobRegistry(queue=self.queue).count == 0

    def run(self) -> None:
        while not self._stop.is_set():
            self.promote_due_retries()
            if self.queue.count:
                self.worker.work(burst=True, logging_level="WARNING")
            else:
                self._stop.wait(self.poll_s)

    def stop(self) -> None:
        self._stop.set()
