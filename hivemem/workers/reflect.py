"""Reflection: rq jobs that turn closed episodes into current, versioned facts.

Per session, episodes are reflected one at a time and in order: a job takes the session's
lock (renewed while it runs, checked right before each write), then reflects every episode
from the last reflected one up to its own, so a job that runs early catches up and a job
that runs late finds nothing left. Fact ids derive from the episode, so a retried job
overwrites what a crashed attempt wrote.
"""

from __future__ import annotations

import functools
import time
from datetime import UTC, datetime
from typing import Any

import numpy as np
import structlog

from hivemem.domain.audit import reflection_events
from hivemem.domain.augment import plan_with_additions
from hivemem.domain.consolidation import History, Plan, PlanContext, plan_actions
from hivemem.domain.episode import Episode
from hivemem.domain.fact import VISIBLE, Fact, FactAction, FactStatus
from hivemem.domain.models import Turn
from hivemem.domain.names import SessionName, session_name
from hivemem.domain.redact import redact
from hivemem.domain.scope import Scope, owner_of
from hivemem.domain.slots import canonical_slot
from hivemem.errors import NotFound, ProviderError, RetryLater
from hivemem.pipeline.vectors import decode_vector
from hivemem.providers.llm.augmented import AugmentedResult
from hivemem.providers.reflector import ReflectionRequest, ReflectionResult
from hivemem.store.reflection import SessionLock
from hivemem.store.vectors.base import FactHit, Vector
from hivemem.workers.compact import schedule_after_reflection
from hivemem.workers.jobs import JobContext

log = structlog.get_logger(__name__)


def reflect_episode(context: JobContext, episode_id: str, session_id: str) -> dict[str, Any]:
    """The rq job (its worker passes `context`). Returns a summary (kept by rq as the job result).
    `session_id`: the session's internal name (`hivemem.domain.names`, as the outbox has it).

    Transient failures (`RetryLater`) use the job's retries; a permanent one (bad output
    after the repair attempt, a 4xx) fails at once into rq's failed registry.
    """
    try:
        return Reflection(context, last_attempt=_last_attempt()).reflect_up_to(
            SessionName(session_id), episode_id)
    except (ProviderError, NotFound):  # permanent: a retry would fail the same way
        _no_retries()
        raise


def _last_attempt() -> bool:
    """No rq retry is left for the running job: a transient failure now is final."""
    from rq import get_current_job

    job = get_current_job()
    return job is not None and not job.retries_left


def _no_retries() -> None:
    from rq import get_current_job

    job = get_current_job()
    if job is not None:
        job.retries_left = 0


class Reflection:
    def __init__(self, context: JobContext, *, last_attempt: bool = False) -> None:
        self.ctx = context
        self.settings = context.settings.reflection
        # On the job's last attempt a transient failure is recorded like a permanent one,
        # so the session's later episodes are not blocked behind it forever.
        self.last_attempt = last_attempt

    def reflect_up_to(self, name: SessionName, episode_id: str) -> dict[str, Any]:
        ctx = self.ctx
        episode = ctx.episodes.episode(episode_id, name)
        if episode is None:
            raise NotFound("episode_id", f"unknown episode {episode_id}")
        lock = ctx.state.lock(name, self.settings.lock_lease_ms)
        lock.acquire(self.settings.lock_wait_s)
        try:
            done = ctx.state.reflected(name)
            if episode.index <= done:
                return {"episode_id": episode_id, "skipped": "already reflected"}
            summary: dict[str, Any] = {"episode_id": episode_id, "reflected": []}
            for pending in ctx.episodes.episodes(name, done, episode.index - 1):
                summary["reflected"].append(self._reflect_one(pending, lock))
            schedule_after_reflection(
                ctx.jobs, ctx.settings, name, done, episode.index)
            return summary
        finally:
            lock.release()

    def replay(self, name: SessionName, episode: Episode) -> dict[str, Any]:
        """Reflect one episode again (after a failure), whatever the pointer says."""
        lock = self.ctx.state.lock(name, self.settings.lock_lease_ms)
        lock.acquire(self.settings.lock_wait_s)
        try:
            return self._reflect_one(episode, lock)
        finally:
            lock.release()

    def _prior_facts(self, episode: Episode, scope: Scope) -> list[FactHit]:
        """The current facts the episode's scope may see: what the reflector is shown (with
        their vectors, which consolidation compares)."""
        ctx = self.ctx
        name = session_name(episode.namespace, episode.session_id)
        visible = [s.value for s in VISIBLE]
        limit = self.settings.max_unscoped_facts
        # A session past the limit is shown a search, not its listing: count it first
        # rather than list every fact to throw the list away (O(facts) per episode, and
        # each fact crosses the owner's socket in the reflection process). Which sessions
        # are large is a hint kept from their last episode: either way the facts shown
        # are the same; a small session is listed at once (one call, not two).
        if name in ctx.large_sessions and episode.centroid is not None:
            if ctx.vectors.count_facts(name, visible, scope) > limit:
                return self._nearest_facts(episode, scope, name)
            ctx.large_sessions.discard(name)
        facts = _seen(ctx.vectors.list_fact_hits(name, visible), scope)
        if len(facts) <= limit or episode.centroid is None:
            return facts
        if len(ctx.large_sessions) >= _LARGE_SESSIONS_KEPT:
            ctx.large_sessions.clear()
        ctx.large_sessions.add(name)
        return self._nearest_facts(episode, scope, name)

    def _nearest_facts(self, episode: Episode, scope: Scope, name: SessionName
                       ) -> list[FactHit]:
        """The `max_unscoped_facts` current facts nearest the episode's centroid."""
        assert episode.centroid is not None
        ctx = self.ctx
        hits = ctx.vectors.search_facts(
            name, decode_vector(episode.centroid),
            # Over-fetch: the hits of other scopes are filtered out after the search.
            self.settings.max_unscoped_facts * 2, [s.value for s in VISIBLE],
        )
        return _seen(hits, scope)[:self.settings.max_unscoped_facts]

    def _reflect_one(self, episode: Episode, lock: SessionLock) -> dict[str, Any]:
        ctx = self.ctx
        started = time.perf_counter()
        session_id = episode.session_id
        name = session_name(episode.namespace, session_id)
        turns = sorted(
            (h.turn for h in ctx.vectors.get_turns(name, list(episode.turn_ids))),
            key=lambda t: t.seq,
        )
        namespace = turns[0].namespace if turns else episode.namespace
        scope = _episode_scope(turns, namespace)
        prior_hits = self._prior_facts(episode, scope)
        prior = [h.fact for h in prior_hits]
        request = ReflectionRequest(
            session_id=session_id, episode=episode, turns=turns, prior_facts=prior,
            max_facts=self.settings.max_facts_per_episode,
        )
        trace: dict[str, Any] = {
            "episode_id": episode.episode_id,
            "session_id": session_id,
            "namespace": episode.namespace,
            "index": episode.index,
            "mode": request.mode,
            "reflector": ctx.reflector.name,
            "input_turns": [{"turn_id": t.turn_id, "content": t.content} for t in turns],
            "prior_facts": [{"fact_id": f.fact_id, "content": f.content} for f in prior],
            "at": datetime.now(UTC).isoformat(),
        }
        try:
            result = ctx.reflector.reflect(request)
        except RetryLater as exc:
            if not self.last_attempt:
                ctx.outcome("retry")
                raise  # transient: the job retries; the pointer stays on this episode
            self._failed(trace, exc, started, lock, episode, retries_exhausted=True)
            raise
        except ProviderError as exc:
            self._failed(trace, exc, started, lock, episode, retries_exhausted=False)
            raise
        plan = self._plan(episode, prior, result, turns, namespace,
                          {h.fact.fact_id: h.vector for h in prior_hits if h.vector is not None},
                          self._history(name, scope))
        writes = list(plan.writes.values())
        if writes:
            vectors = ctx.embedder.embed_documents([f.content for f in writes])
            lock.check()
            sparse = ctx.lexical.documents([f.content for f in writes])
            ctx.vectors.upsert_facts(writes, vectors, sparse)
            _audit(ctx, plan, prior, episode)
        elapsed = round((time.perf_counter() - started) * 1000, 1)
        trace.update(
            raw_output=result.raw_output,
            actions=[a.model_dump(mode="json") for a in result.actions],
            rule_actions=[a.model_dump(mode="json") for a in _rule_actions(result)],
            saved=plan.added, superseded=plan.superseded, conflicted=plan.conflicted,
            archived=plan.archived, merged=plan.merged, kept=plan.kept,
            retracted=plan.retracted, dropped=[*result.dropped, *plan.dropped],
            elapsed_ms=elapsed,
        )
        # The trace first: whoever sees the pointer move can read the trace.
        ctx.state.add_trace(redact(trace))
        ctx.state.advance(name, lock, episode.index)
        ctx.outcome("reflected")
        log.info(
            "episode.reflected", session_id=session_id, episode_id=episode.episode_id,
            added=len(plan.added), superseded=len(plan.superseded),
            conflicted=len(plan.conflicted), ms=elapsed,
        )
        return {"episode_id": episode.episode_id, "added": plan.added,
                "superseded": plan.superseded, "conflicted": plan.conflicted}

    def _failed(self, trace: dict[str, Any], exc: Exception, started: float,
                lock: SessionLock, episode: Episode, *, retries_exhausted: bool) -> None:
        """The session moves on (later episodes must not wait behind a bad one): a trace
        with the error, the pointer past the episode, a `reflection.failed` event; the job
        then fails with the raw output kept, and `replay` can redo it."""
        ctx = self.ctx
        trace.update(error=str(exc), failed=True, retries_exhausted=retries_exhausted,
                     raw_output=getattr(exc, "raw_output", None),
                     elapsed_ms=round((time.perf_counter() - started) * 1000, 1))
        ctx.state.add_trace(redact(trace))
        ctx.state.advance(session_name(episode.namespace, episode.session_id), lock,
                          episode.index)
        ctx.outcome("failed")
        log.error("reflection.failed", session_id=episode.session_id,
                  episode_id=episode.episode_id, index=episode.index,
                  retries_exhausted=retries_exhausted, error=str(exc)[:300])

    def _history(self, name: SessionName, scope: Scope) -> History:
        """The session's superseded facts `scope` sees, by creation, read when the plan
        first needs them (and once: `plan_with_additions` plans several times).

        Superseded versions let consolidation see a revert ("back to Jenkins" names the
        value Jenkins held before); only the current facts go to the reflector. They come
        from the worker's copy of the session's facts (`KnownFacts`: a read costs what was
        written since the last one), not a listing per episode: the history grows with the
        session, and most episodes never look at it. Their vectors are not read: the plan
        compares new statements with current facts only."""
        known = self.ctx.known_facts

        @functools.cache
        def history() -> tuple[Fact, ...]:
            facts = known.get(name)
            with facts.lock:
                retired = [f for f in facts.index.by_id.values()
                           if f.status == FactStatus.SUPERSEDED
                           and scope.admits(f.namespace, f.visibility, f.agent_id)]
            return tuple(sorted(retired, key=lambda f: (f.created_at, f.fact_id)))

        return history

    def _plan(self, episode: Episode, prior: list[Fact], result: ReflectionResult,
              turns: list[Turn], namespace: str, prior_vectors: dict[str, Vector],
              history: History) -> Plan:
        """`prior_vectors`: the stored vectors of `prior`, read with them. `prior`: the
        current facts; `history`: the superseded ones (`_history`)."""
        ctx = self.ctx
        actions = [*_rule_actions(result), *result.actions]
        contents = list(dict.fromkeys(a.content for a in actions if a.content))
        content_vectors = dict(
            zip(contents, ctx.embedder.embed_documents(contents), strict=True)
        ) if contents else {}

        def similarity(content: str, fact: Fact) -> float:
            a = content_vectors.get(content)
            b = prior_vectors.get(fact.fact_id)
            if b is None:  # a fact written earlier in this batch
                b = content_vectors.get(fact.content)
            return float(np.dot(a, b)) if a is not None and b is not None else 0.0

        # Subject phrases are embedded too: "the database" and "our datastore" are one slot
        # (a slot is compared with current facts' subjects only: the history's are not read).
        subjects = sorted({canonical_slot(x) for x in [
            *(a.subject for a in actions if a.subject), *(f.subject for f in prior if f.subject)
        ]} - {""})
        subject_vectors = dict(
            zip(subjects, ctx.embedder.embed_documents(subjects), strict=True)
        ) if len(subjects) > 1 else {}

        def slot_similarity(a: str, b: str) -> float:
            va, vb = subject_vectors.get(a), subject_vectors.get(b)
            return float(np.dot(va, vb)) if va is not None and vb is not None else 0.0

        where = PlanContext(
            session_id=episode.session_id, episode_id=episode.episode_id,
            namespace=namespace, now=datetime.now(UTC), turns=turns,
            valid_from=episode.ended_at, similarity=similarity,
            dedup_threshold=self.settings.dedup_threshold,
            min_confidence=self.settings.min_confidence, slot_similarity=slot_similarity,
        )
        if isinstance(result, AugmentedResult):
            # The LLM's actions on top of the rules': they may add, never undo.
            return plan_with_additions(prior, result.rule_actions, result.actions, where,
                                       history)
        return plan_actions(prior, result.actions, where, history)


# How many large sessions' names a worker keeps (`JobContext.large_sessions`).
_LARGE_SESSIONS_KEPT = 10_000


def _rule_actions(result: ReflectionResult) -> list[FactAction]:
    return result.rule_actions if isinstance(result, AugmentedResult) else []


def _episode_scope(turns: list[Turn], namespace: str) -> Scope:
    """Who the episode speaks for: an agent's private turns let it see that agent's private
    facts; an episode of shared turns (or of several agents' private ones) sees shared facts
    only."""
    owner = owner_of({"visibility": t.visibility, "agent_id": t.agent_id} for t in turns)
    return Scope(namespace, owner.agent_id if owner.visibility == "private" else None)


def _seen(hits: list[FactHit], scope: Scope) -> list[FactHit]:
    return [h for h in hits
            if scope.admits(h.fact.namespace, h.fact.visibility, h.fact.agent_id)]


def _audit(ctx: JobContext, plan: Plan, prior: list[Fact], episode: Episode) -> None:
    """Every status change the plan made goes to the session's audit log."""
    events = reflection_events(plan, prior, episode_id=episode.episode_id, at=datetime.now(UTC))
    ctx.audit.append(events)


def replay_episode(context: JobContext, episode_id: str, session_id: str) -> dict[str, Any]:
    """rq job: reflect one episode again, out of order (see `Reflection.replay`).
    `session_id`: the session's internal name (`hivemem.domain.names`)."""
    name = SessionName(session_id)
    episode = context.episodes.episode(episode_id, name)
    if episode is None or session_name(episode.namespace, episode.session_id) != name:
        _no_retries()
        raise NotFound("episode_id", f"unknown episode {episode_id} in session {session_id}")
    try:
        return Reflection(context).replay(name, episode)
    except ProviderError:
        _no_retries()
        raise
