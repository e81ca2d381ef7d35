"""rq jobs enqueued by the stream stages, what they run with, and the embedded-mode worker."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hivemem.config import ReflectionSettings, Settings
from hivemem.domain.episode import Episode
from hivemem.pipeline.messages import OutboxEntry
from hivemem.pipeline.topology import Keys
from hivemem.providers.embedders import Embedder
from hivemem.providers.lexical import LexicalEncoder
from hivemem.providers.reflector import Reflector
from hivemem.store.episodes import EpisodeStore
from hivemem.store.redis import Redis
from hivemem.store.reflection import ReflectionState
from hivemem.store.vectors.base import VectorStore

REFLECT_JOB = "hivemem.workers.reflect.reflect_episode"
# Put an outbox entry's job into a MULTI pipeline on rq's Redis.
Enqueue = Callable[[Any, OutboxEntry], None]
REPLAY_JOB = "hivemem.workers.reflect.replay_episode"


@dataclass
class JobContext:
    """What a job of the reflect queue (reflection, replay, compaction) runs with; built by
    `hivemem.runtime.wiring` for the worker that runs the job, passed as its first argument."""

    settings: Settings
    redis: Redis
    keys: Keys
    episodes: EpisodeStore
    state: ReflectionState
    vectors: VectorStore
    embedder: Embedder
    reflector: Reflector
    lexical: LexicalEncoder = field(default_factory=LexicalEncoder)
    # Called with "reflected", "retry" or "failed" per episode (metrics).
    on_outcome: Callable[[str], None] | None = None
    # rq's Redis, where follow-up jobs are enqueued (None: `redis`; a cluster needs its own).
    queue_redis: Redis | None = None

    @property
    def queue_connection(self) -> Redis:
        return self.queue_redis if self.queue_redis is not None else self.redis

    def outcome(self, name: str) -> None:
        if self.on_outcome is not None:
            self.on_outcome(name)


def reflect_job_id(episode_id: str) -> str:
    return f"reflect-{episode_id}"


def reflect_enqueuer(connection: Redis, queue_name: str, settings: ReflectionSettings) -> Enqueue:
    """Enqueue an episode's reflect job into `pipe` (a MULTI on rq's Redis)."""
    from rq import Queue, Retry

    queue = Queue(queue_name, connection=connection)

    def enqueue(pipe: Any, episode: OutboxEntry) -> None:
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
        REPLAY_JOB,
        args=(episode.episode_id, episode.session_id),
        job_id=f"replay-{episode.episode_id}-{threading.get_ident()}",
        failure_ttl=30 * 24 * 3600,
    )
    return str(job.id)
