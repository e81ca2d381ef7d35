"""`Admin`: the operations that deliberately cross scopes, for operators only.

Compaction, dead letters and their replay, reflection replay, every session and trace, audit
by fact id, timelines, export/import/backup/restore, API keys, readiness. `MemoryClient`
composes one (`memory.admin`) from the same stores; tenants get a `ScopedMemory` instead,
which has none of these.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hivemem.config import CompactionPolicy
from hivemem.domain.audit import AuditEvent
from hivemem.domain.compaction import CompactionDiff
from hivemem.domain.fact import Fact
from hivemem.domain.ids import check_id
from hivemem.domain.models import DeadLetter
from hivemem.domain.recall.policy import RecallPolicy
from hivemem.domain.session import RelatedSession, SessionContext, SessionInfo
from hivemem.domain.timeline import TimelineEvent
from hivemem.errors import HivememError, NotFound, ValidationError
from hivemem.pipeline.topology import Topology
from hivemem.producer import views
from hivemem.store.apikeys import ApiKeyStore
from hivemem.store.audit import AuditLog
from hivemem.store.dlq import replay_dead_letters
from hivemem.store.rebuild import rebuild_state
from hivemem.store.redis import Redis, redis_errors
from hivemem.store.reflection import ReflectionState
from hivemem.store.sessions import SessionStore
from hivemem.store.status import PipelineStatus, pipeline_status
from hivemem.transfer.exporter import ExportSummary, count_records, export_to
from hivemem.transfer.importer import ImportSummary, check_mode, import_from
from hivemem.transfer.stores import Progress, Stores
from hivemem.workers.compact import enqueue_compaction
from hivemem.workers.jobs import enqueue_replay

if TYPE_CHECKING:
    from hivemem.producer.client import MemoryClient
    from hivemem.workers.compact import Compactor

READY = "ok"


def transfer_stores(client: MemoryClient) -> Stores:
    """The stores export and import read and write (opens the vector store on first use)."""
    client.vector_store()
    return client._wiring.stores()


class Admin:
    """Cross-scope operations on one deployment (every namespace, every agent)."""

    def __init__(self, client: MemoryClient) -> None:
        self._client = client

    @property
    def redis(self) -> Redis:
        """The deployment's Redis connection, for operators' tools (metrics, rq queues)."""
        return self._client._redis

    # -- plumbing --------------------------------------------------------------------------

    def _compactor(self) -> Compactor:
        c = self._client
        c.vector_store()  # opens the vector store (and the query model) on first use
        return c._wiring.compactor()

    def _known(self, session_id: str) -> str:
        check_id("session_id", session_id)
        if not SessionStore(self._client._redis, self._client.keys).exists(session_id):
            raise NotFound("session_id", f"unknown session {session_id!r}")
        return session_id

    # -- operations ------------------------------------------------------------------------

    def ready(self) -> dict[str, str]:
        """Whether Redis and the vector store answer: ``{"redis": "ok", "vectors": ...}``,
        each "ok" or "unavailable: <error type>" (never raises)."""
        checks: dict[str, str] = {}
        try:
            with redis_errors("ping"):
                self._client._redis.ping()
            checks["redis"] = READY
        except Exception as exc:
            checks["redis"] = _unready(exc)
        try:
            self._client.vector_store().count("turns", {"session_id": "__readyz__"})
            checks["vectors"] = READY
        except Exception as exc:
            checks["vectors"] = _unready(exc)
        return checks

    def api_keys(self) -> ApiKeyStore:
        """The API keys (create, revoke, list, authenticate)."""
        return ApiKeyStore(self._client._redis, self._client.keys)

    def pipeline_status(self) -> PipelineStatus:
        """Every stage's lag, pending entries, dead letters and consumers; the reflection
        jobs by state (``reflect_jobs["queued"]``: waiting in the rq queue) and rq workers."""
        c = self._client
        return pipeline_status(c._redis, c.keys, c.settings.episodes.reflect_queue)

    def rebuild_state(self, session_id: str | None = None) -> int:
        """Rebuild Redis session state (seqs, idempotency ids, recent windows, progress) from
        the vector store, for one session or all; returns the sessions rebuilt."""
        if session_id is not None:
            check_id("session_id", session_id)
        return rebuild_state(self._client._state, self._client.vector_store(), session_id)

    def sessions(self) -> list[str]:
        """Every session of every namespace."""
        return self._client._state.session_ids()

    def traces(self, count: int = 20, session_id: str | None = None) -> list[dict[str, Any]]:
        """The newest reflection traces of any session (secrets redacted)."""
        if session_id is not None:
            check_id("session_id", session_id)
        return ReflectionState(self._client._redis, self._client.keys).traces(count, session_id)

    def facts(
        self, session_id: str, *, include_history: bool = False,
        include_inactive: bool = False, include_archived: bool = False,
    ) -> list[Fact]:
        """Every fact of the session, whoever may see it (oldest first)."""
        check_id("session_id", session_id)
        return views.facts(self._client, session_id, None, include_history=include_history,
                           include_inactive=include_inactive, include_archived=include_archived)

    # -- dead letters and replays ----------------------------------------------------------

    def dead_letters(self, count: int = 100) -> list[DeadLetter]:
        c = self._client
        return c._streams.stage_dead_letters(Topology(c.keys).embed, count)

    def replay_dead_letters(
        self, entry_ids: Sequence[str] | None = None, *, stage: str = "embed",
        count: int = 1000,
    ) -> list[str]:
        """Put dead letters of `stage` ("embed": the turns stream, "boundary": the embedded
        stream) back on their stream, all or only these original entry ids; returns the
        original ids replayed. See `hivemem.store.dlq`."""
        c = self._client
        done = replay_dead_letters(
            c._redis, c.keys, Topology(c.keys).stage(stage),
            entry_ids=None if entry_ids is None else set(entry_ids), count=count,
        )
        return [r.original_entry_id for r in done]

    def replay_reflection(self, session_id: str, episode_id: str | None = None) -> list[str]:
        """Enqueue the reflection of one episode again, or of every episode of the session."""
        check_id("session_id", session_id)
        c = self._client
        episodes = c._episodes.episodes(session_id)
        if episode_id is not None:
            episodes = [e for e in episodes if e.episode_id == episode_id]
            if not episodes:
                raise NotFound("episode_id", f"no closed episode {episode_id!r}")
        queue = c.settings.episodes.reflect_queue
        return [enqueue_replay(c._redis, queue, e) for e in episodes]

    # -- compaction ------------------------------------------------------------------------

    def preview_compaction(
        self, session_id: str, *, policy: CompactionPolicy | None = None,
        now: datetime | None = None,
    ) -> CompactionDiff:
        """What `compact` would do now, with every reason and id; changes nothing."""
        self._known(session_id)
        return self._compactor().preview(session_id, policy, now)

    def compact(
        self, session_id: str, *, policy: CompactionPolicy | None = None,
        now: datetime | None = None, expect: CompactionDiff | str | None = None,
    ) -> CompactionDiff:
        """Compact the session's facts and return the diff that was applied.

        Runs under the session's reflection lock (it never interleaves with reflection), in
        one Qdrant write and one Redis transaction for the audit events. `expect` (a preview,
        or its `fingerprint`) makes it refuse with `ValidationError` if the facts changed
        since that preview, so what is applied is exactly what was previewed."""
        self._known(session_id)
        fingerprint = expect if isinstance(expect, str) or expect is None else expect.fingerprint
        return self._compactor().compact(session_id, policy, now, expect=fingerprint)

    def schedule_compaction(self, session_id: str, *, delay_s: float = 0.0) -> str:
        """Enqueue a compaction job (a reflect worker runs it); returns the rq job id."""
        self._known(session_id)
        if delay_s < 0:
            raise ValidationError("delay_s", "must be >= 0")
        tag = f"demand-{datetime.now(UTC):%Y%m%dT%H%M%S%f}"
        c = self._client
        return enqueue_compaction(c._redis, c.settings.episodes.reflect_queue,
                                  session_id, tag=tag, trigger="on demand", delay_s=delay_s)

    # -- audit -----------------------------------------------------------------------------

    def audit(self, memory_id: str) -> list[AuditEvent]:
        """Why a fact has its status: every event about it (and naming it), oldest first."""
        check_id("memory_id", memory_id)
        return views.fact_audit(self._client, memory_id, None)

    def get_fact(self, fact_id: str) -> Fact | None:
        """One fact by id, whatever its status (None if there is none)."""
        check_id("memory_id", fact_id)
        hits = self._client.vector_store().get_facts([fact_id])
        return hits[0].fact if hits else None

    def audit_log(self, session_id: str) -> list[AuditEvent]:
        check_id("session_id", session_id)
        return AuditLog(self._client._redis, self._client.keys).events(session_id)

    # -- sessions --------------------------------------------------------------------------

    def set_session_metadata(
        self, session_id: str, *, title: str | None = None, agent_id: str | None = None,
    ) -> SessionInfo:
        """Name a session and its agent (a session that does not exist yet is created)."""
        check_id("session_id", session_id)
        views.set_session_info(self._client, session_id, title=title, agent_id=agent_id)
        return self.session_info(session_id)

    def session_info(self, session_id: str) -> SessionInfo:
        """Title, agent, created, last active, and how much the session holds."""
        self._known(session_id)
        return views.session_info(self._client, session_id, None)

    def find_related_sessions(
        self, session_id: str, *, limit: int = 5, min_score: float = 0.05,
    ) -> list[RelatedSession]:
        """Other sessions (of any namespace) about the same things."""
        self._known(session_id)
        return views.related_sessions(self._client, session_id, None, limit=limit,
                                      min_score=min_score)

    def session_context(
        self, session_id: str, query: str, token_budget: int | None = None, *,
        related: int = 0, preset: str | RecallPolicy | None = None,
    ) -> SessionContext:
        """The session's header and recall for `query` over it and, with `related=n`, over
        its n most related sessions too (shared memories of the default namespace)."""
        info = self.session_info(session_id)
        others = self.find_related_sessions(session_id, limit=related) if related > 0 else []
        result = self._client.recall(session_id, query, token_budget, preset=preset,
                                     related_sessions=[r.session_id for r in others])
        return SessionContext(info=info, related=others, result=result)

    def build_timeline(
        self, session_ids: Sequence[str], *, kinds: Sequence[str] | None = None,
        limit: int | None = None,
    ) -> list[TimelineEvent]:
        """Turns, episode closes and fact changes of these sessions, by time then sequence
        (`limit`: only the newest that many)."""
        if isinstance(session_ids, str):
            session_ids = [session_ids]
        if not session_ids:
            raise ValidationError("session_ids", "name at least one session")
        views.check_kinds(kinds)
        for sid in session_ids:
            self._known(sid)
        return views.timeline(self._client, session_ids, None, kinds=kinds, limit=limit)

    # -- export / import -------------------------------------------------------------------

    def export(
        self, path: str | Path, session_ids: Sequence[str] | None = None, *,
        vectors: bool = False, progress: Progress | None = None,
    ) -> ExportSummary:
        """Write sessions (default: all) to a versioned JSON Lines file (.gz: compressed)."""
        return export_to(transfer_stores(self._client), Path(path), session_ids,
                         vectors=vectors, progress=progress)

    def import_file(
        self, path: str | Path, *, mode: str = "append", progress: Progress | None = None,
    ) -> ImportSummary:
        """Read an export: validated whole first, then written (modes: append, replace,
        skip_existing, overwrite)."""
        checked = check_mode(mode)
        stores = transfer_stores(self._client)
        return import_from(stores, Path(path), checked, progress=progress)

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
        stores = transfer_stores(self._client)
        return count_records(stores, session_ids if session_ids is not None
                             else stores.state.session_ids())


def _unready(exc: Exception) -> str:
    """Why a store is not ready: our own errors say it (redacted, one line); anything
    else only by its type (a raw driver message may carry addresses or credentials)."""
    if isinstance(exc, HivememError):
        return f"unavailable: {str(exc).splitlines()[0][:200]}"
    return f"unavailable: {type(exc).__name__}"
