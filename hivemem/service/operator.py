"""What only an operator does (`OperatorScope`): readiness, pipeline status, dead letters
and replays, compaction, state rebuilds, raw audit logs and facts by id, API keys.

Job operations go through the reflect queue (`JobQueue`), on rq's own Redis: on a Redis
Cluster that is `redis.rq_url`'s server, never the cluster.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from hivemem.config import CompactionPolicy
from hivemem.domain.audit import AuditEvent
from hivemem.domain.compaction import CompactionDiff
from hivemem.domain.fact import Fact
from hivemem.domain.ids import check_id
from hivemem.domain.models import DeadLetter
from hivemem.domain.names import split_session_name
from hivemem.domain.recall.policy import RecallPolicy
from hivemem.domain.scope import OperatorScope, Scope
from hivemem.domain.session import RelatedSession, SessionContext
from hivemem.errors import HivememError, NotFound, ValidationError
from hivemem.pipeline.topology import Topology
from hivemem.service.access import SessionAccess, name_for
from hivemem.service.parts import Parts
from hivemem.service.reads import Reads
from hivemem.service.sessions import Sessions
from hivemem.store.apikeys import ApiKeyStore
from hivemem.store.dlq import replay_dead_letters
from hivemem.store.rebuild import rebuild_state
from hivemem.store.redis import redis_errors
from hivemem.store.status import PipelineStatus, stage_statuses

READY = "ok"


class Operator:
    """Cross-scope operations; each takes the `OperatorScope` it acts with."""

    def __init__(
        self, parts: Parts, access: SessionAccess, reads: Reads, sessions: Sessions,
    ) -> None:
        self.parts = parts
        self.access = access
        self.reads = reads
        self.sessions = sessions

    # -- health and status -----------------------------------------------------------------

    def ready(self, _operator: OperatorScope) -> dict[str, str]:
        """Whether Redis and the vector store answer: each "ok" or "unavailable: <why>"
        (never raises)."""
        checks: dict[str, str] = {}
        try:
            with redis_errors("ping"):
                self.parts.redis.ping()
            checks["redis"] = READY
        except Exception as exc:
            checks["redis"] = _unready(exc)
        try:
            self.reads.vectors().count("turns", {"session_id": "__readyz__"})
            checks["vectors"] = READY
        except Exception as exc:
            checks["vectors"] = _unready(exc)
        return checks

    def pipeline_status(self, _operator: OperatorScope) -> PipelineStatus:
        """Every stage's lag, pending entries, dead letters and consumers (the data
        Redis); the reflection jobs by state and the rq workers (rq's Redis)."""
        parts = self.parts
        jobs = parts.jobs
        live, stale = jobs.worker_liveness()
        waits = [parts.episodes.waiting_since(p) for p in range(parts.keys.partitions)]
        oldest = [ms for _, ms in waits if ms is not None]
        return PipelineStatus(
            stages=stage_statuses(parts.redis, parts.keys), reflect_queue=jobs.name,
            reflect_jobs=jobs.counts(), reflect_workers=live + stale,
            reflect_workers_stale=stale, boundary_waiting=sum(n for n, _ in waits),
            boundary_waiting_oldest_ms=max(oldest) if oldest else None,
        )

    def api_keys(self, _operator: OperatorScope) -> ApiKeyStore:
        return self.parts.api_keys

    def rebuild_state(self, _operator: OperatorScope, session_id: str | None = None) -> int:
        """Rebuild Redis session state from the vector store (one session, by its internal
        name, or all)."""
        name = None if session_id is None else name_for(_operator, session_id)
        return rebuild_state(self.parts.state, self.reads.vectors(), name)

    # -- dead letters and replays ----------------------------------------------------------

    def dead_letters(self, _operator: OperatorScope, count: int = 100, *,
                     stage: str = "embed") -> list[DeadLetter]:
        parts = self.parts
        return parts.streams.stage_dead_letters(Topology(parts.keys).stage(stage), count)

    def replay_dead_letters(
        self, _operator: OperatorScope, entry_ids: Sequence[str] | None = None, *,
        stage: str = "embed", count: int = 1000,
    ) -> list[str]:
        parts = self.parts
        done = replay_dead_letters(
            parts.redis, parts.keys, Topology(parts.keys).stage(stage),
            entry_ids=None if entry_ids is None else set(entry_ids), count=count,
        )
        return [r.original_entry_id for r in done]

    def replay_reflection(
        self, operator: OperatorScope, session_id: str, episode_id: str | None = None,
    ) -> list[str]:
        """Enqueue the reflection of one episode again, or of every episode of the session;
        returns the rq job ids."""
        name = self.access.require(operator, session_id)
        episodes = self.parts.episodes.episodes(name)
        if episode_id is not None:
            episodes = [e for e in episodes if e.episode_id == episode_id]
            if not episodes:
                raise NotFound("episode_id", f"no closed episode {episode_id!r}")
        jobs = self.parts.jobs
        return [jobs.enqueue_replay(e) for e in episodes]

    # -- compaction ------------------------------------------------------------------------

    def preview_compaction(
        self, operator: OperatorScope, session_id: str, *,
        policy: CompactionPolicy | None = None, now: datetime | None = None,
    ) -> CompactionDiff:
        name = self.access.require(operator, session_id)
        self.reads.vectors()
        return self.parts.compactor().preview(name, policy, now)

    def compact(
        self, operator: OperatorScope, session_id: str, *,
        policy: CompactionPolicy | None = None, now: datetime | None = None,
        expect: CompactionDiff | str | None = None,
    ) -> CompactionDiff:
        name = self.access.require(operator, session_id)
        self.reads.vectors()
        fingerprint = expect if isinstance(expect, str) or expect is None else expect.fingerprint
        return self.parts.compactor().compact(name, policy, now, expect=fingerprint)

    def schedule_compaction(
        self, operator: OperatorScope, session_id: str, *, delay_s: float = 0.0,
    ) -> str:
        """Enqueue a compaction job (a reflect worker runs it); returns the rq job id."""
        name = self.access.require(operator, session_id)
        if delay_s < 0:
            raise ValidationError("delay_s", "must be >= 0")
        tag = f"demand-{datetime.now(UTC):%Y%m%dT%H%M%S%f}"
        return self.parts.jobs.enqueue_compaction(
            name, tag=tag, trigger="on demand", delay_s=delay_s)

    # -- facts, audit, sessions ------------------------------------------------------------

    def get_fact(self, _operator: OperatorScope, fact_id: str) -> Fact | None:
        """One fact by id, whatever its status (None if there is none)."""
        check_id("fact_id", fact_id)
        hits = self.reads.vectors().get_facts([fact_id])
        return hits[0].fact if hits else None

    def audit_log(self, _operator: OperatorScope, session_id: str) -> list[AuditEvent]:
        return self.parts.audit.events(name_for(_operator, session_id))

    def _home(self, operator: OperatorScope, session_id: str) -> tuple[Scope, str]:
        """The session's own namespace, as its shared memory (what the operator reads a
        session's neighbourhood as: related sessions are never another namespace's, so
        whatever is found can be recalled together), and its id there."""
        name = self.access.require(operator, session_id)
        namespace, bare = split_session_name(name)
        return Scope(namespace), bare

    def related_sessions(
        self, operator: OperatorScope, session_id: str, *, limit: int = 5,
        min_score: float = 0.05,
    ) -> list[RelatedSession]:
        """`Sessions.related` in the session's own namespace."""
        scope, bare = self._home(operator, session_id)
        return self.sessions.related(scope, bare, limit=limit, min_score=min_score)

    def session_context(
        self, operator: OperatorScope, session_id: str, query: str,
        token_budget: int | None = None, *, related: int = 0,
        preset: str | RecallPolicy | None = None,
    ) -> SessionContext:
        """`Sessions.context` in the session's own namespace."""
        scope, bare = self._home(operator, session_id)
        return self.sessions.context(scope, bare, query, token_budget, related=related,
                                     preset=preset)


def _unready(exc: Exception) -> str:
    """Why a store is not ready: our own errors say it (redacted, one line); anything
    else only by its type (a raw driver message may carry addresses or credentials)."""
    if isinstance(exc, HivememError):
        return f"unavailable: {str(exc).splitlines()[0][:200]}"
    return f"unavailable: {type(exc).__name__}"
