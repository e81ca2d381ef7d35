"""Compaction: the rq job (on a schedule and on demand) and the code that runs it.

A run loads the session's facts with their stored vectors, plans with
`hivemem.domain.compaction.plan_compaction`, and applies exactly that plan: every changed fact
in one Qdrant upsert, then every audit event in one Redis MULTI. It holds the session's
reflection lock the whole time (plan and write), so it never interleaves with a reflection;
the lease is checked right before the writes. A preview plans the same way and writes nothing.

Jobs run on the reflect queue, so every `hivemem worker reflect` (and embedded mode) runs them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import structlog

from hivemem.config import CompactionPolicy, Settings
from hivemem.domain.audit import compaction_events
from hivemem.domain.compaction import (
    CompactionDiff,
    CompactionPlan,
    plan_compaction,
)
from hivemem.domain.fact import Fact
from hivemem.domain.names import SessionName, split_session_name
from hivemem.errors import ValidationError
from hivemem.providers.lexical import LexicalEncoder
from hivemem.store.audit import AuditLog
from hivemem.store.reflection import ReflectionState
from hivemem.store.sessions import SessionStore
from hivemem.store.vectors.base import FACTS, Vector, VectorStore, session_where
from hivemem.workers.jobs import JobContext
from hivemem.workers.queue import JobQueue

log = structlog.get_logger(__name__)


@dataclass
class Loaded:
    facts: list[Fact]
    vectors: Vector
    clock: datetime


@dataclass
class Compactor:
    sessions: SessionStore
    locks: ReflectionState  # the session's reflection lock: never interleaves with it
    audit: AuditLog
    vectors: VectorStore
    settings: Settings
    lexical: LexicalEncoder = field(default_factory=LexicalEncoder)

    def load(self, name: SessionName) -> Loaded:
        facts: list[Fact] = []
        rows: list[Vector] = []
        dim = self.vectors.dim
        for hit in self.vectors.scroll(FACTS, session_where(name), with_vectors=True):
            facts.append(Fact.model_validate(hit.payload))
            rows.append(hit.vector if hit.vector is not None
                        else np.zeros(dim, dtype=np.float32))
        order = sorted(range(len(facts)), key=lambda i: (facts[i].created_at, facts[i].fact_id))
        facts = [facts[i] for i in order]
        matrix = (np.stack([rows[i] for i in order]).astype(np.float32) if rows
                  else np.zeros((0, dim), dtype=np.float32))
        return Loaded(facts, matrix, self._clock(name, facts))

    def _clock(self, name: SessionName, facts: list[Fact]) -> datetime:
        """The session's now: its newest activity (a turn or a fact becoming valid)."""
        _info, meta = self.sessions.info(name)
        times = [f.valid_from for f in facts]
        if meta.get("last_ts"):
            times.append(datetime.fromisoformat(meta["last_ts"]))
        return max(times) if times else datetime.now(UTC)

    def plan(
        self, name: SessionName, policy: CompactionPolicy | None = None,
        now: datetime | None = None,
    ) -> tuple[CompactionPlan, Loaded]:
        loaded = self.load(name)
        plan = plan_compaction(
            loaded.facts, loaded.vectors, session_id=split_session_name(name)[1],
            clock=now or loaded.clock,
            policy=policy or self.settings.compaction.policy(),
        )
        return plan, loaded

    def preview(
        self, name: SessionName, policy: CompactionPolicy | None = None,
        now: datetime | None = None,
    ) -> CompactionDiff:
        return self.plan(name, policy, now)[0].diff

    def compact(
        self,
        name: SessionName,
        policy: CompactionPolicy | None = None,
        now: datetime | None = None,
        *,
        trigger: str = "on demand",
        expect: str | None = None,
    ) -> CompactionDiff:
        """Plan under the session's lock and apply that plan. With `expect` (a preview's
        fingerprint), refuse when the facts changed since that preview."""
        started = time.perf_counter()
        lease = self.settings.reflection.lock_lease_ms
        lock = self.locks.lock(name, lease)
        lock.acquire(self.settings.reflection.lock_wait_s)
        try:
            plan, loaded = self.plan(name, policy, now)
            diff = plan.diff
            if expect is not None and diff.fingerprint != expect:
                raise ValidationError(
                    "expect", "the session's facts changed since that preview; preview again"
                )
            if plan.writes:
                index = {f.fact_id: i for i, f in enumerate(loaded.facts)}
                facts = list(plan.writes.values())
                vectors = loaded.vectors[[index[f.fact_id] for f in facts]]
                sparse = self.lexical.documents([f.content for f in facts])
                events = compaction_events(plan, loaded.facts, at=datetime.now(UTC),
                                           trigger=trigger)
                lock.check()
                self.vectors.upsert_facts(facts, vectors, sparse)
                self.audit.append(events)
        finally:
            lock.release()
        log.info("session.compacted", session_id=name, run_id=diff.run_id,
                 trigger=trigger, ms=round((time.perf_counter() - started) * 1000, 1),
                 **diff.summary())
        return diff


def compact_session(
    context: JobContext, name: SessionName, trigger: str = "schedule"
) -> dict[str, Any]:
    """The rq job (its worker passes `context`): compact one session with the configured
    policy. Returns the summary. `name`: the session's internal name (as enqueued)."""
    compactor = Compactor(context.sessions, context.state, context.audit, context.vectors,
                          context.settings, context.lexical)
    diff = compactor.compact(name, trigger=trigger)
    return {"session_id": name, "run_id": diff.run_id, **diff.summary()}


def schedule_after_reflection(
    jobs: JobQueue, settings: Settings, name: SessionName, before: int, after: int
) -> str | None:
    """Called once a reflection moved the session from episode `before` to `after`: every
    `compaction.every_episodes` reflected episodes, a compaction is enqueued (one per step:
    the job id names it, so a retried reflection does not enqueue it twice)."""
    every = settings.compaction.every_episodes
    if every <= 0 or after // every <= before // every:
        return None
    step = after // every
    return jobs.enqueue_compaction(
        name, tag=f"ep{step * every}", trigger="schedule",
    )
