"""The memory-lifecycle half of `MemoryClient`: compaction, audit, sessions and timelines,
export/import/backup/restore. A mixin, so the client module stays about ingest and recall."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, cast

from hivemem.domain.fact import VISIBLE, Fact, FactStatus
from hivemem.domain.turn import check_id
from hivemem.errors import ValidationError

if TYPE_CHECKING:
    from hivemem.config import Settings
    from hivemem.domain.audit import AuditEvent
    from hivemem.domain.compaction import CompactionDiff, CompactionPolicy
    from hivemem.domain.recall.policy import RecallPolicy
    from hivemem.domain.session import RelatedSession, SessionContext, SessionInfo
    from hivemem.domain.timeline import TimelineEvent
    from hivemem.pipeline.topology import Keys
    from hivemem.producer.client import MemoryClient
    from hivemem.producer.recall import Recaller
    from hivemem.providers.embedders import Embedder
    from hivemem.runtime.wiring import Wiring
    from hivemem.store.episodes import EpisodeStore
    from hivemem.store.redis import Redis
    from hivemem.store.state import SessionState
    from hivemem.store.vectors.base import VectorStore
    from hivemem.transfer.exporter import ExportSummary
    from hivemem.transfer.importer import ImportSummary
    from hivemem.transfer.stores import Progress, Stores
    from hivemem.workers.compact import Compactor

_TITLE_MAX = 200


def lifecycle_statuses(*, include_inactive: bool = False,
                       include_archived: bool = False) -> list[str]:
    """Fact statuses to list: current ones (active, conflicted), plus what was asked for."""
    statuses = [s.value for s in VISIBLE]
    if include_inactive:
        statuses.append(FactStatus.SUPERSEDED.value)
    if include_archived:
        statuses.append(FactStatus.ARCHIVED.value)
    return statuses


class LifecycleMixin:
    if TYPE_CHECKING:
        settings: Settings
        keys: Keys
        _redis: Redis
        _state: SessionState
        _episodes: EpisodeStore
        _vectors: VectorStore | None
        _embedder: Embedder | None
        _wiring: Wiring

        def _get_recaller(self) -> Recaller: ...

    # -- plumbing --------------------------------------------------------------------------

    def _vector_store(self) -> VectorStore:
        self._get_recaller()  # opens the vector store (and the query model) on first use
        assert self._vectors is not None
        return self._vectors

    def _compactor(self) -> Compactor:
        self._vector_store()
        return self._wiring.compactor()

    def _stores(self) -> Stores:
        self._vector_store()
        return self._wiring.stores()

    def _known(self, session_id: str) -> str:
        check_id("session_id", session_id)
        from hivemem.store.sessions import SessionStore

        if not SessionStore(self._redis, self.keys).exists(session_id):
            raise ValidationError("session_id", f"unknown session {session_id!r}")
        return session_id

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
        from hivemem.workers.compact import enqueue_compaction

        self._known(session_id)
        if delay_s < 0:
            raise ValidationError("delay_s", "must be >= 0")
        tag = f"demand-{datetime.now(UTC):%Y%m%dT%H%M%S%f}"
        return enqueue_compaction(self._redis, self.settings.episodes.reflect_queue,
                                  session_id, tag=tag, trigger="on demand", delay_s=delay_s)

    # -- audit -----------------------------------------------------------------------------

    def audit(self, memory_id: str) -> list[AuditEvent]:
        """Why a fact has its status: every event about it (and naming it), oldest first."""
        from hivemem.store.audit import AuditLog

        fact = self.get_fact(memory_id)
        if fact is None:
            raise ValidationError("memory_id", f"no fact {memory_id!r}")
        return AuditLog(self._redis, self.keys).for_fact(fact.session_id, memory_id)

    def get_fact(self, fact_id: str) -> Fact | None:
        """One fact by id, whatever its status (None if there is none)."""
        check_id("memory_id", fact_id)
        hits = self._vector_store().get_facts([fact_id])
        return hits[0].fact if hits else None

    def audit_log(self, session_id: str) -> list[AuditEvent]:
        from hivemem.store.audit import AuditLog

        check_id("session_id", session_id)
        return AuditLog(self._redis, self.keys).events(session_id)

    # -- sessions --------------------------------------------------------------------------

    def set_session_metadata(
        self, session_id: str, *, title: str | None = None, agent_id: str | None = None,
    ) -> SessionInfo:
        """Name a session and its agent (a session that does not exist yet is created)."""
        from hivemem.store.sessions import SessionStore

        check_id("session_id", session_id)
        fields: dict[str, str] = {}
        if title is not None:
            if not isinstance(title, str) or not title.strip() or len(title) > _TITLE_MAX:
                raise ValidationError("title", f"must be 1-{_TITLE_MAX} characters")
            fields["title"] = title.strip()
        if agent_id is not None:
            fields["agent_id"] = check_id("agent_id", agent_id)
        SessionStore(self._redis, self.keys).set_info(session_id, fields, datetime.now(UTC))
        return self.session_info(session_id)

    def session_info(self, session_id: str) -> SessionInfo:
        """Title, agent, created, last active, and how much the session holds."""
        from hivemem.domain.session import SessionInfo, parse_time
        from hivemem.store.sessions import SessionStore
        from hivemem.store.vectors.base import FACTS

        self._known(session_id)
        info, meta = SessionStore(self._redis, self.keys).info(session_id)
        stats = self._state.stats(session_id)
        closed = self._episodes.progress(session_id)[1]
        active = self._vector_store().count(
            FACTS, {"session_id": session_id, "status": [s.value for s in VISIBLE]})
        return SessionInfo(
            session_id=session_id, title=info.get("title"), agent_id=info.get("agent_id"),
            created_at=parse_time(info.get("created_at")) or parse_time(meta.get("first_ts")),
            last_active=parse_time(meta.get("last_ts")), turns=stats.turns_enqueued,
            episodes=closed, facts_active=active,
        )

    def find_related_sessions(
        self, session_id: str, *, limit: int = 5, min_score: float = 0.05,
    ) -> list[RelatedSession]:
        """Other sessions about the same things: their centroids (the mean direction of their
        episodes, or turns) and the subjects their facts share."""
        import itertools

        from hivemem.domain.session import (
            Vector,
            centroid,
            episode_centroid,
            rank_related,
        )
        from hivemem.store.vectors.base import TURNS

        self._known(session_id)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
            raise ValidationError("limit", "must be a positive integer")
        vectors = self._vector_store()
        centroids: dict[str, Vector | None] = {}
        subjects: dict[str, set[str]] = {}
        for sid in self._state.session_ids():
            found = episode_centroid(self._episodes.episodes(sid))
            if found is None:
                hits = itertools.islice(
                    vectors.scroll(TURNS, {"session_id": sid}, with_vectors=True), 256)
                found = centroid(h.vector for h in hits if h.vector is not None)
            centroids[sid] = found
            subjects[sid] = {f.subject for f in vectors.list_facts(sid, [s.value for s in VISIBLE])
                             if f.subject}
        return rank_related(session_id, centroids, subjects, limit=limit, min_score=min_score)

    def session_context(
        self, session_id: str, query: str, token_budget: int | None = None, *,
        related: int = 0, preset: str | RecallPolicy | None = None,
    ) -> SessionContext:
        """The session's header (title, agent, activity) and recall for `query` over it and,
        with `related=n`, over its n most related sessions too."""
        from hivemem.domain.session import SessionContext

        info = self.session_info(session_id)
        others = self.find_related_sessions(session_id, limit=related) if related > 0 else []
        client = cast("MemoryClient", self)
        result = client.recall(session_id, query, token_budget, preset=preset,
                               related_sessions=[r.session_id for r in others])
        return SessionContext(info=info, related=others, result=result)

    def build_timeline(
        self, session_ids: Sequence[str], *, kinds: Sequence[str] | None = None,
        limit: int | None = None,
    ) -> list[TimelineEvent]:
        """Turns, episode closes and fact changes of these sessions, by time then sequence
        (`limit`: only the newest that many)."""
        from hivemem.domain.timeline import KINDS, merge_timeline, order
        from hivemem.store.audit import AuditLog

        if isinstance(session_ids, str):
            session_ids = [session_ids]
        if not session_ids:
            raise ValidationError("session_ids", "name at least one session")
        kinds = list(kinds or KINDS)
        for kind in kinds:
            if kind not in KINDS:
                raise ValidationError("kinds", f"unknown kind {kind!r}; one of {list(KINDS)}")
        for sid in session_ids:
            self._known(sid)
        vectors = self._vector_store()
        audit = AuditLog(self._redis, self.keys)
        events: list[TimelineEvent] = []
        for sid in dict.fromkeys(session_ids):
            events.extend(merge_timeline(
                vectors.iter_turns(sid) if "turn" in kinds else (),
                self._episodes.episodes(sid) if "episode" in kinds else (),
                audit.iter_events(sid) if "fact" in kinds else (), kinds=kinds))
        ordered = order(events)
        return ordered[-limit:] if limit else ordered

    # -- export / import -------------------------------------------------------------------

    def export(
        self, path: str | Path, session_ids: Sequence[str] | None = None, *,
        vectors: bool = False, progress: Progress | None = None,
    ) -> ExportSummary:
        """Write sessions (default: all) to a versioned JSON Lines file (.gz: compressed)."""
        from hivemem.transfer.exporter import export_to

        return export_to(self._stores(), Path(path), session_ids, vectors=vectors,
                         progress=progress)

    def import_file(
        self, path: str | Path, *, mode: str = "append", progress: Progress | None = None,
    ) -> ImportSummary:
        """Read an export: validated whole first, then written (modes: append, replace,
        skip_existing, overwrite)."""
        from hivemem.transfer.importer import check_mode, import_from

        checked = check_mode(mode)
        stores = self._stores()
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
        from hivemem.transfer.exporter import count_records

        stores = self._stores()
        return count_records(stores, session_ids if session_ids is not None
                             else stores.state.session_ids())
