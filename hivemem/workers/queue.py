"""`JobQueue`: the reflect queue, on rq's own Redis.

Every job that leaves a stream stage goes through here: reflections (queued by the outbox
dispatcher inside its MULTI), replays and compactions; and every count an operator or a
gauge reads of it (jobs by state, workers, the backlog the window stage waits on) comes
from rq's own API, never from rq keys spelled by hand. Its connection is `redis.rq_url`'s
when one is set (a Redis Cluster needs that: rq cannot run on a cluster), else the main
Redis; `hivemem.runtime.wiring` builds the one queue of a process.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Any

from hivemem.config import ReflectionSettings
from hivemem.domain.episode import Episode
from hivemem.domain.names import SessionName, session_name
from hivemem.pipeline.messages import OutboxEntry
from hivemem.store.redis import Redis, redis_errors

REFLECT_JOB = "hivemem.workers.reflect.reflect_episode"
REPLAY_JOB = "hivemem.workers.reflect.replay_episode"
COMPACT_JOB = "hivemem.workers.compact.compact_session"
# Job states as `PipelineStatus.reflect_jobs` names them.
JOB_STATES = ("queued", "started", "scheduled", "failed", "finished", "deferred")
_FAILED_TTL_S = 30 * 24 * 3600  # failed reflections keep their input and error for replay
_COMPACT_FAILED_TTL_S = 7 * 24 * 3600


# Put an outbox entry's job into a MULTI pipeline on rq's Redis.
Enqueue = Callable[[Any, OutboxEntry], None]


def _job_sessions(job: Any) -> tuple[str, ...]:
    """The session ids a job's arguments name (reflect and replay: (episode, session);
    compaction: (session, trigger))."""
    try:
        args = tuple(job.args or ())
    except Exception:  # an unreadable job names no session
        return ()
    return tuple(a for a in args if isinstance(a, str))


def reflect_job_id(episode_id: str) -> str:
    return f"reflect-{episode_id}"


_JOB_ID_PART = re.compile(r"[A-Za-z0-9_-]+")  # what rq accepts in a job id
_JOB_ID_NAMESPACE = uuid.UUID("5f0f3c1e-2b7a-4d8e-9c61-0e4b8a7d2f13")


def compact_job_id(name: SessionName, tag: str) -> str:
    """`name`: the session's internal name. rq takes only [A-Za-z0-9_-] in a job id: a
    name with other characters (``/`` of a namespace, ``.`` or ``:`` of an id) is stood
    for by a hash of it."""
    part = name if _JOB_ID_PART.fullmatch(name) else uuid.uuid5(_JOB_ID_NAMESPACE, name).hex
    return f"compact-{part}-{tag}"


class JobQueue:
    """The reflect queue (`episodes.reflect_queue`) on rq's Redis."""

    def __init__(
        self, connection: Redis, name: str, reflection: ReflectionSettings, *,
        maintenance_lock: str | None = None,
    ) -> None:
        self.connection = connection
        self.name = name
        self.reflection = reflection
        # Held by the one worker process that looks for abandoned jobs in a round (None:
        # no lock; every caller looks).
        self.maintenance_lock = maintenance_lock

    @cached_property
    def rq_queue(self) -> Any:
        """rq's `Queue` (rq loads on first use: an ingest-only producer never imports it)."""
        from rq import Queue

        return Queue(self.name, connection=self.connection)

    # -- enqueueing ------------------------------------------------------------------------

    def reflect_enqueuer(self) -> Enqueue:
        """Put an episode's reflect job into `pipe` (a MULTI on rq's Redis, the outbox
        dispatcher's: the job and the outbox entry's removal commit together)."""
        from rq import Retry

        queue = self.rq_queue
        settings = self.reflection

        def enqueue(pipe: Any, episode: OutboxEntry) -> None:
            queue.enqueue_call(
                REFLECT_JOB,
                args=(episode.episode_id, episode.session_id),
                job_id=reflect_job_id(episode.episode_id),
                pipeline=pipe,
                timeout=settings.job_timeout_s,
                failure_ttl=_FAILED_TTL_S,
                retry=Retry(max=settings.retries, interval=settings.retry_intervals_s)
                if settings.retries
                else None,
                description=f"reflect episode {episode.index} of {episode.session_id}",
            )

        return enqueue

    def enqueue_replay(self, episode: Episode) -> str:
        """Run an episode's reflection again (e.g. after its job failed)."""
        with redis_errors("enqueue a reflection replay"):
            job = self.rq_queue.enqueue_call(
                REPLAY_JOB,
                args=(episode.episode_id, session_name(episode.namespace, episode.session_id)),
                job_id=f"replay-{episode.episode_id}-{threading.get_ident()}",
                failure_ttl=_FAILED_TTL_S,
            )
        return str(job.id)

    def enqueue_compaction(
        self, session_id: SessionName, *, tag: str, trigger: str, delay_s: float = 0.0,
    ) -> str:
        """A compaction job (after `delay_s`, via rq's scheduler); the job id names the
        session and `tag`, so the same tag never enqueues twice."""
        kwargs: dict[str, Any] = {
            "args": (session_id, trigger), "job_id": compact_job_id(session_id, tag),
            "failure_ttl": _COMPACT_FAILED_TTL_S,
            "description": f"compact {session_id} ({trigger})",
        }
        with redis_errors("enqueue a compaction"):
            if delay_s > 0:
                job = self.rq_queue.enqueue_in(timedelta(seconds=delay_s), COMPACT_JOB,
                                               **kwargs)
            else:
                job = self.rq_queue.enqueue_call(COMPACT_JOB, **kwargs)
        return str(job.id)

    # -- forgetting -----------------------------------------------------------------------

    def forget_jobs(self, session_id: str, markers: Sequence[str] = ()) -> int:
        """Delete every job of the session that is not running (queued, scheduled,
        deferred, finished, failed: reflections, replays, compactions), with its results,
        and these keys (the episodes' dispatch markers, on rq's Redis). A running job is
        left to finish (the forget holds the session's reflect lock, so it waits, and the
        forget's second pass deletes it once it is done). Returns how many jobs."""
        from rq.job import Job

        queue = self.rq_queue
        with redis_errors("forget reflect jobs"):
            ids = set(queue.get_job_ids())
            for registry in (queue.scheduled_job_registry, queue.deferred_job_registry,
                             queue.finished_job_registry, queue.failed_job_registry):
                ids.update(registry.get_job_ids(cleanup=False))
            running = set(queue.started_job_registry.get_job_ids(cleanup=False))
            removed = 0
            for job in Job.fetch_many(sorted(ids - running), connection=self.connection):
                if job is None or session_id not in _job_sessions(job):
                    continue
                job.delete(remove_from_queue=True)
                removed += 1
            if markers:
                self.connection.delete(*markers)
        return removed

    # -- counts ----------------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        """Jobs by state (`JOB_STATES`), read without cleaning rq's registries up (a status
        read changes nothing)."""
        queue = self.rq_queue
        with redis_errors("read the reflect queue"):
            return {
                "queued": int(queue.count),
                "started": queue.started_job_registry.get_job_count(cleanup=False),
                "scheduled": queue.scheduled_job_registry.get_job_count(cleanup=False),
                "failed": queue.failed_job_registry.get_job_count(cleanup=False),
                "finished": queue.finished_job_registry.get_job_count(cleanup=False),
                "deferred": queue.deferred_job_registry.get_job_count(cleanup=False),
            }

    def workers(self) -> int:
        """rq workers listening on the queue."""
        from rq import Worker

        with redis_errors("count reflect workers"):
            return int(Worker.count(connection=self.connection, queue=self.rq_queue))

    def worker_liveness(self) -> tuple[int, int]:
        """(live, stale) rq workers of the queue: a stale one has not renewed its
        registration in 3x `reflection.maintenance_interval_s` (killed, or cut off from
        Redis and backing off); rq keeps a dead worker registered for minutes."""
        from rq import Worker

        stale_after = timedelta(seconds=3 * self.reflection.maintenance_interval_s)
        with redis_errors("read reflect workers"):
            workers = Worker.all(connection=self.connection, queue=self.rq_queue)
        now = datetime.now(UTC)
        stale = sum(1 for w in workers
                    if w.last_heartbeat is None or now - w.last_heartbeat > stale_after)
        return len(workers) - stale, stale

    # -- abandoned jobs --------------------------------------------------------------------

    def recover_abandoned(self, worker: Any) -> list[str]:
        """Hand back the jobs whose heartbeat lapsed (their worker was killed or lost its
        Redis mid-job): through their retries, to the failed registry when none are left
        (rq's `StartedJobRegistry.cleanup`); and jobs a worker died holding between dequeue
        and start (rq's intermediate list: handed on once seen there a minute apart, rq's
        own rule). `worker`: the rq worker whose failure handling runs. One process a
        round, under `maintenance_lock`. Returns the ids of the jobs handed back."""
        queue = self.rq_queue
        lock_ms = max(1, int(self.reflection.maintenance_interval_s * 1000) - 50)
        with redis_errors("recover abandoned reflect jobs"):
            if self.maintenance_lock is not None and not self.connection.set(
                    self.maintenance_lock, str(worker.name), nx=True, px=lock_ms):
                return []
            registry = queue.started_job_registry
            expired = [str(j) for j in registry.get_expired_job_ids()]
            if expired:
                registry.cleanup()
            queue.intermediate_queue.cleanup(worker, queue)
        return expired

    def backlog(self) -> int:
        """Reflect jobs waiting or running (what the window stage yields to)."""
        queue = self.rq_queue
        with redis_errors("read the reflect backlog"):
            return int(queue.count) + int(
                queue.started_job_registry.get_job_count(cleanup=False))
