"""What the jobs of the reflect queue run with (`JobContext`); the queue is `JobQueue`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from hivemem.config import Settings
from hivemem.domain.names import SessionName
from hivemem.pipeline.topology import Keys
from hivemem.providers.embedders import Embedder
from hivemem.providers.lexical import LexicalEncoder
from hivemem.providers.reflector import Reflector
from hivemem.recall.known_facts import KnownFacts
from hivemem.store.audit import AuditLog
from hivemem.store.episodes import EpisodeStore
from hivemem.store.redis import Redis
from hivemem.store.reflection import ReflectionState
from hivemem.store.sessions import SessionStore
from hivemem.store.vectors.base import VectorStore
from hivemem.workers.queue import JobQueue

# How many sessions' facts a worker keeps (least recently reflected first out): a worker
# reflects one session at a time, and one it no longer keeps is read whole when next needed.
_SESSIONS_KNOWN = 64


@dataclass
class JobContext:
    """What a job of the reflect queue (reflection, replay, compaction) runs with; built by
    `hivemem.runtime.wiring` for the worker that runs the job, passed as its first argument."""

    settings: Settings
    redis: Redis
    keys: Keys
    episodes: EpisodeStore
    state: ReflectionState
    audit: AuditLog
    sessions: SessionStore
    vectors: VectorStore
    embedder: Embedder
    reflector: Reflector
    # The reflect queue (on rq's Redis), where follow-up jobs (compactions) are enqueued.
    jobs: JobQueue
    lexical: LexicalEncoder = field(default_factory=LexicalEncoder)
    # Called with "reflected", "retry" or "failed" per episode (metrics).
    on_outcome: Callable[[str], None] | None = None
    # Sessions whose facts outnumbered `reflection.max_unscoped_facts` at their last
    # episode: reflection counts them before listing (a hint only; `Reflection._prior_facts`).
    large_sessions: set[SessionName] = field(default_factory=set)
    # The sessions' facts as this worker last read them (reflection's view of their
    # history: `Reflection._history`), kept up to date by reading what was written since.
    known_facts: KnownFacts = field(init=False)

    def __post_init__(self) -> None:
        self.known_facts = KnownFacts(self.vectors, size=_SESSIONS_KNOWN)

    def outcome(self, name: str) -> None:
        if self.on_outcome is not None:
            self.on_outcome(name)


