"""rq jobs enqueued by the stream stages (the per-episode work runs on rq workers)."""

from __future__ import annotations

from typing import Any

from hivemem.memory.episodes import Episode
from hivemem.store.episodes import Enqueue
from hivemem.store.redis import Redis

# The reflection stage gives this job its work; until it lands, the queue holds the jobs.
REFLECT_JOB = "hivemem.workers.reflect.reflect_episode"


def reflect_job_id(episode_id: str) -> str:
    return f"reflect-{episode_id}"


def reflect_enqueuer(connection: Redis, queue_name: str) -> Enqueue:
    """Enqueue inside the boundary commit's MULTI: the job exists iff the episode closed."""
    from rq import Queue

    queue = Queue(queue_name, connection=connection)

    def enqueue(pipe: Any, episode: Episode) -> None:
        queue.enqueue_call(
            REFLECT_JOB,
            args=(episode.episode_id, episode.session_id),
            job_id=reflect_job_id(episode.episode_id),
            pipeline=pipe,
            description=f"reflect episode {episode.index} of {episode.session_id}",
        )

    return enqueue
