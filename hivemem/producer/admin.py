"""`Admin`: the operations that deliberately cross scopes, for operators only.

Compaction, dead letters and their replay, reflection replay, every session and trace, audit
by fact id, timelines, export/import/backup/restore, API keys, readiness. A thin facade over
the service, acting with the explicit `OperatorScope`: `memory.admin` holds one; tenants get
a `ScopedMemory` instead, which has none of these.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from hivemem.config import CompactionPolicy
from hivemem.domain.audit import AuditEvent
from hivemem.domain.compaction import CompactionDiff
from hivemem.domain.episode import Episode
from hivemem.domain.fact import Fact
from hivemem.domain.forget import ForgetReceipt, ForgetRequest
from hivemem.domain.models import DeadLetter, SessionStats, Turn
from hivemem.domain.recall.policy import RecallPolicy
from hivemem.domain.scope import OPERATOR
from hivemem.domain.session import RelatedSession, SessionContext, SessionInfo
from hivemem.domain.timeline import TimelineEvent, TimelinePage
from hivemem.service.core import Service
from hivemem.service.operator import READY
from hivemem.store.apikeys import ApiKeyStore
from hivemem.store.redis import Redis
from hivemem.store.status import PipelineStatus
from hivemem.transfer.checks import ImportScope
from hivemem.transfer.exporter import ExportSummary
from hivemem.transfer.importer import ImportSummary
from hivemem.transfer.stores import Progress

__all__ = ["READY", "Admin"]


class Admin:
    """Cross-scope operations on one deployment (every namespace, every agent)."""

    def __init__(self, service: Service) -> None:
        self._service = service

    @property
    def redis(self) -> Redis:
        """The deployment's Redis connection, for operators' tools."""
        return self._service.parts.redis

    # -- operations ------------------------------------------------------------------------

    def ready(self) -> dict[str, str]:
        """Whether Redis and the vector store answer: ``{"redis": "ok", "vectors": ...}``,
        each "ok" or "unavailable: <error type>" (never raises)."""
        return self._service.operator.ready(OPERATOR)

    def forget(
        self, session_id: str, *, turn_ids: Sequence[str] | None = None,
        fact_ids: Sequence[str] | None = None,
    ) -> ForgetReceipt:
        """Forget a session of any namespace (or these turns and facts of it)."""
        return self._service.forget.forget(OPERATOR, session_id, turn_ids=turn_ids,
                                           fact_ids=fact_ids)

    def forget_agent(self, namespace: str, agent_id: str) -> ForgetReceipt:
        """Forget what `agent_id` wrote in every session of `namespace`."""
        return self._service.forget.forget_agent(OPERATOR, namespace, agent_id)

    def forget_namespace(self, namespace: str) -> ForgetReceipt:
        """Forget every session of `namespace`."""
        return self._service.forget.forget_namespace(OPERATOR, namespace)

    def apply_retention(self, *, now: datetime | None = None) -> list[ForgetReceipt]:
        """Forget the turns and facts older than each namespace's retention
        (`lifecycle.retention_days`, `lifecycle.namespace_retention_days`) as of `now`: what
        the lifecycle sweep does every `lifecycle.retention_interval_s`. Off by default."""
        return self._service.forget.apply_retention(OPERATOR, now)

    def resume_forgets(self) -> list[ForgetReceipt]:
        """Finish the forgets a process began and did not finish (each process that opens
        a store does this by itself)."""
        return self._service.forget.resume(OPERATOR)

    def pending_forgets(self) -> list[ForgetRequest]:
        """Forgets begun and not finished (a process that starts finishes them)."""
        return self._service.forget.pending(OPERATOR)

    def erasures(self, count: int = 20) -> list[dict[str, Any]]:
        """The newest finished forgets, newest first: who, when, what kind, counts (never
        what was forgotten)."""
        return self._service.forget.erasures(OPERATOR, count)

    def api_keys(self) -> ApiKeyStore:
        """The API keys (create, revoke, list, authenticate)."""
        return self._service.operator.api_keys(OPERATOR)

    def pipeline_status(self) -> PipelineStatus:
        """Every stage's lag, pending entries, dead letters and consumers; the reflection
        jobs by state (``reflect_jobs["queued"]``: waiting in the rq queue) and rq workers,
        read from rq's own Redis (`redis.rq_url` when set)."""
        return self._service.operator.pipeline_status(OPERATOR)

    def rebuild_state(self, session_id: str | None = None) -> int:
        """Rebuild Redis session state (seqs, idempotency ids, recent windows, progress) from
        the vector store, for one session or all; returns the sessions rebuilt."""
        return self._service.operator.rebuild_state(OPERATOR, session_id)

    def sessions(self) -> list[str]:
        """Every session of every namespace."""
        return self._service.sessions.session_ids(OPERATOR)

    def traces(self, count: int = 20, session_id: str | None = None) -> list[dict[str, Any]]:
        """The newest reflection traces of any session (secrets redacted)."""
        return self._service.sessions.traces(OPERATOR, count, session_id)

    def facts(
        self, session_id: str, *, include_history: bool = False,
        include_inactive: bool = False, include_archived: bool = False,
    ) -> list[Fact]:
        """Every fact of the session, whoever may see it (oldest first)."""
        return self._service.reads.facts(
            OPERATOR, session_id, include_history=include_history,
            include_inactive=include_inactive, include_archived=include_archived)

    def session_stats(self, session_id: str) -> SessionStats:
        """The session's stats, every agent's markers counted (any namespace)."""
        return self._service.turns.stats(OPERATOR, session_id)

    def episodes(self, session_id: str) -> list[Episode]:
        """Every closed episode of the session, oldest first."""
        return self._service.turns.episodes(OPERATOR, session_id)

    def recent_turns(self, session_id: str, limit: int = 10) -> list[Turn]:
        """The session's newest `limit` turns, every agent's, newest first."""
        return self._service.turns.recent_turns(OPERATOR, session_id, limit)

    # -- dead letters and replays ----------------------------------------------------------

    def dead_letters(self, count: int = 100, *, stage: str = "embed") -> list[DeadLetter]:
        """The dead letters of `stage` ("embed": the turns stream, "boundary": the embedded
        stream), oldest first, up to `count`."""
        return self._service.operator.dead_letters(OPERATOR, count, stage=stage)

    def replay_dead_letters(
        self, entry_ids: Sequence[str] | None = None, *, stage: str = "embed",
        count: int = 1000,
    ) -> list[str]:
        """Put dead letters of `stage` ("embed": the turns stream, "boundary": the embedded
        stream) back on their stream, all or only these original entry ids; returns the
        original ids replayed. See `hivemem.store.dlq`."""
        return self._service.operator.replay_dead_letters(OPERATOR, entry_ids, stage=stage,
                                                          count=count)

    def replay_reflection(self, session_id: str, episode_id: str | None = None) -> list[str]:
        """Enqueue the reflection of one episode again, or of every episode of the session."""
        return self._service.operator.replay_reflection(OPERATOR, session_id, episode_id)

    # -- compaction ------------------------------------------------------------------------

    def preview_compaction(
        self, session_id: str, *, policy: CompactionPolicy | None = None,
        now: datetime | None = None,
    ) -> CompactionDiff:
        """What `compact` would do now, with every reason and id; changes nothing."""
        return self._service.operator.preview_compaction(OPERATOR, session_id, policy=policy,
                                                         now=now)

    def compact(
        self, session_id: str, *, policy: CompactionPolicy | None = None,
        now: datetime | None = None, expect: CompactionDiff | str | None = None,
    ) -> CompactionDiff:
        """Compact the session's facts and return the diff that was applied.

        Runs under the session's reflection lock (it never interleaves with reflection), in
        one Qdrant write and one Redis transaction for the audit events. `expect` (a preview,
        or its `fingerprint`) makes it refuse with `ValidationError` if the facts changed
        since that preview, so what is applied is exactly what was previewed."""
        return self._service.operator.compact(OPERATOR, session_id, policy=policy, now=now,
                                              expect=expect)

    def schedule_compaction(self, session_id: str, *, delay_s: float = 0.0) -> str:
        """Enqueue a compaction job (a reflect worker runs it); returns the rq job id."""
        return self._service.operator.schedule_compaction(OPERATOR, session_id,
                                                          delay_s=delay_s)

    # -- audit -----------------------------------------------------------------------------

    def audit(self, fact_id: str) -> list[AuditEvent]:
        """Why a fact has its status: every event about it (and naming it), oldest first."""
        return self._service.sessions.fact_audit(OPERATOR, fact_id)

    def get_fact(self, fact_id: str) -> Fact | None:
        """One fact by id, whatever its status (None if there is none)."""
        return self._service.operator.get_fact(OPERATOR, fact_id)

    def audit_log(self, session_id: str) -> list[AuditEvent]:
        return self._service.operator.audit_log(OPERATOR, session_id)

    # -- sessions --------------------------------------------------------------------------

    def set_session_info(
        self, session_id: str, *, title: str | None = None, agent_id: str | None = None,
    ) -> SessionInfo:
        """Name a session and its agent (a session that does not exist yet is created)."""
        return self._service.sessions.set_info(OPERATOR, session_id, title=title,
                                               agent_id=agent_id)

    def session_info(self, session_id: str) -> SessionInfo:
        """Title, agent, created, last active, and how much the session holds."""
        return self._service.sessions.info(OPERATOR, session_id)

    def related_sessions(
        self, session_id: str, *, limit: int = 5, min_score: float = 0.05,
    ) -> list[RelatedSession]:
        """Other sessions of the session's namespace about the same things (as its shared
        memory sees them)."""
        return self._service.operator.related_sessions(OPERATOR, session_id, limit=limit,
                                                       min_score=min_score)

    def session_context(
        self, session_id: str, query: str, token_budget: int | None = None, *,
        related: int = 0, preset: str | RecallPolicy | None = None,
    ) -> SessionContext:
        """The session's header and recall for `query` over it and, with `related=n`, over
        its n most related sessions of its namespace too (that namespace's shared
        memories)."""
        return self._service.operator.session_context(
            OPERATOR, session_id, query, token_budget, related=related, preset=preset)

    def timeline(
        self, session_ids: Sequence[str], *, kinds: Sequence[str] | None = None,
        limit: int | None = None,
    ) -> list[TimelineEvent]:
        """Turns, episode closes and fact changes of these sessions, by time then sequence
        (`limit`: only the newest that many)."""
        return self._service.sessions.timeline(OPERATOR, session_ids, kinds=kinds, limit=limit)

    def timeline_page(
        self, session_ids: Sequence[str], *, kinds: Sequence[str] | None = None,
        limit: int = 100, cursor: str | None = None,
    ) -> TimelinePage:
        """The `limit` newest events of these sessions older than `cursor` (the
        `next_cursor` of the page before; none: the newest), oldest first. Reads only what
        the page shows, however long the sessions are."""
        return self._service.sessions.timeline_page(OPERATOR, session_ids, kinds=kinds,
                                                    limit=limit, cursor=cursor)

    # -- export / import -------------------------------------------------------------------

    def export(
        self, path: str | Path, session_ids: Sequence[str] | None = None, *,
        vectors: bool = False, progress: Progress | None = None,
    ) -> ExportSummary:
        """Write sessions (default: all) to a versioned JSON Lines file (.gz: compressed)."""
        return self._service.transfer.export(OPERATOR, path, session_ids, vectors=vectors,
                                             progress=progress)

    def import_file(
        self, path: str | Path, *, mode: str = "append", progress: Progress | None = None,
        scope: ImportScope | None = None,
    ) -> ImportSummary:
        """Read an export: validated whole first (every record as ingest checks it), then
        written (modes: append, replace, skip_existing, overwrite). `scope`: import as a
        namespace (or one of its agents) only; a record outside it refuses the file."""
        return self._service.transfer.import_file(OPERATOR, path, mode=mode, progress=progress,
                                                  scope=scope)

    def backup(self, path: str | Path, *, progress: Progress | None = None) -> ExportSummary:
        """Every session, with vectors (a restore needs no model)."""
        return self.export(path, None, vectors=True, progress=progress)

    def restore(
        self, path: str | Path, *, mode: str = "replace", progress: Progress | None = None,
    ) -> ImportSummary:
        """Put a backup back: by default each of its sessions replaces the store's."""
        return self.import_file(path, mode=mode, progress=progress)

    def count_export_records(self, session_ids: Sequence[str] | None = None) -> int:
        """About how many records `export` would write (for a progress bar)."""
        return self._service.transfer.count_records(OPERATOR, session_ids)
