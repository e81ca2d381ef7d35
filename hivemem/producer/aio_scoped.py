"""`AsyncScopedMemory`: `ScopedMemory` for asyncio code, method for method (each runs the
synchronous handle's method in a worker thread). A test pins the two to the same signatures."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from hivemem.domain.audit import AuditEvent
from hivemem.domain.episode import Episode
from hivemem.domain.fact import Fact
from hivemem.domain.models import RecallResult, Role, SessionStats, Turn
from hivemem.domain.recall.policy import RecallPolicy
from hivemem.domain.scope import Scope
from hivemem.domain.session import RelatedSession, SessionContext, SessionInfo
from hivemem.domain.timeline import TimelineEvent
from hivemem.producer.scoped import ScopedMemory
from hivemem.producer.threads import in_thread
from hivemem.transfer.exporter import ExportSummary
from hivemem.transfer.stores import Progress


class AsyncScopedMemory:
    """What one agent of one namespace may do, as coroutines (see `ScopedMemory`)."""

    def __init__(self, scoped: ScopedMemory) -> None:
        self._sync = scoped

    @property
    def sync(self) -> ScopedMemory:
        return self._sync

    @property
    def scope(self) -> Scope:
        return self._sync.scope

    def for_agent(self, agent_id: str | None) -> AsyncScopedMemory:
        """The same namespace as another agent (or none)."""
        return AsyncScopedMemory(self._sync.for_agent(agent_id))

    async def ingest(
        self,
        session_id: str,
        role: str | Role,
        content: str,
        *,
        markers: Iterable[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        timestamp: datetime | None = None,
        turn_id: str | None = None,
        visibility: str = "shared",
        durable: bool | None = None,
    ) -> Turn:
        return await in_thread(
            self._sync.ingest, session_id, role, content, markers=markers,
            metadata=metadata, timestamp=timestamp, turn_id=turn_id,
            visibility=visibility, durable=durable,
        )

    async def ingest_many(
        self, turns: Iterable[Mapping[str, Any]], *, durable: bool | None = None,
        validate_only: bool = False,
    ) -> list[Turn]:
        return await in_thread(
            self._sync.ingest_many, turns, durable=durable,
            validate_only=validate_only,
        )

    async def close_episode(self, session_id: str) -> int:
        return await in_thread(self._sync.close_episode, session_id)

    async def close_session(self, session_id: str) -> int:
        return await in_thread(self._sync.close_session, session_id)

    async def set_session_info(self, session_id: str, *, title: str | None = None) -> SessionInfo:
        return await in_thread(self._sync.set_session_info, session_id, title=title)

    async def recall(
        self,
        session_id: str,
        query: str,
        token_budget: int | None = None,
        *,
        preset: str | RecallPolicy | None = None,
        limit: int | None = None,
        include_history: bool = False,
        include_archived: bool = False,
        explain: bool = False,
        related_sessions: Sequence[str] = (),
    ) -> RecallResult:
        return await in_thread(
            self._sync.recall, session_id, query, token_budget, preset=preset,
            limit=limit, include_history=include_history,
            include_archived=include_archived, explain=explain,
            related_sessions=related_sessions,
        )

    async def facts(
        self, session_id: str, *, include_history: bool = False,
        include_inactive: bool = False, include_archived: bool = False,
    ) -> list[Fact]:
        return await in_thread(
            self._sync.facts, session_id, include_history=include_history,
            include_inactive=include_inactive, include_archived=include_archived,
        )

    async def episodes(self, session_id: str) -> list[Episode]:
        return await in_thread(self._sync.episodes, session_id)

    async def get_session_stats(self, session_id: str) -> SessionStats:
        return await in_thread(self._sync.get_session_stats, session_id)

    async def wait_until_processed(
        self, session_id: str, timeout: float = 30.0, *, stage: str = "embed"
    ) -> SessionStats:
        return await in_thread(self._sync.wait_until_processed, session_id, timeout, stage=stage)

    async def wait_until_reflected(self, session_id: str, timeout: float = 30.0) -> int:
        return await in_thread(self._sync.wait_until_reflected, session_id, timeout)

    async def sessions(self) -> list[str]:
        return await in_thread(self._sync.sessions)

    async def traces(self, count: int = 20, session_id: str | None = None) -> list[dict[str, Any]]:
        return await in_thread(self._sync.traces, count, session_id)

    async def timeline(
        self, session_id: str, *, kinds: Sequence[str] | None = None,
        limit: int | None = None,
    ) -> list[TimelineEvent]:
        return await in_thread(self._sync.timeline, session_id, kinds=kinds, limit=limit)

    async def audit(self, fact_id: str) -> list[AuditEvent]:
        return await in_thread(self._sync.audit, fact_id)

    async def session_info(self, session_id: str) -> SessionInfo:
        return await in_thread(self._sync.session_info, session_id)

    async def related_sessions(
        self, session_id: str, *, limit: int = 5, min_score: float = 0.05,
    ) -> list[RelatedSession]:
        return await in_thread(
            self._sync.related_sessions, session_id, limit=limit,
            min_score=min_score,
        )

    async def session_context(
        self, session_id: str, query: str, token_budget: int | None = None, *,
        related: int = 0, preset: str | RecallPolicy | None = None,
    ) -> SessionContext:
        return await in_thread(
            self._sync.session_context, session_id, query, token_budget,
            related=related, preset=preset,
        )

    async def export(
        self, path: str | Path, session_ids: Sequence[str] | None = None, *,
        vectors: bool = False, progress: Progress | None = None,
    ) -> ExportSummary:
        return await in_thread(
            self._sync.export, path, session_ids, vectors=vectors, progress=progress,
        )

