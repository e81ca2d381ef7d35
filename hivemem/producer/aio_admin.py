"""`AsyncAdmin`: `Admin` for asyncio code, method for method (each runs the synchronous
method in a worker thread). A test pins the two to the same signatures."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from hivemem.config import CompactionPolicy
from hivemem.domain.audit import AuditEvent
from hivemem.domain.compaction import CompactionDiff
from hivemem.domain.fact import Fact
from hivemem.domain.models import DeadLetter
from hivemem.domain.recall.policy import RecallPolicy
from hivemem.domain.session import RelatedSession, SessionContext, SessionInfo
from hivemem.domain.timeline import TimelineEvent
from hivemem.producer.admin import Admin
from hivemem.producer.threads import in_thread
from hivemem.store.apikeys import ApiKeyStore
from hivemem.store.redis import Redis
from hivemem.store.status import PipelineStatus
from hivemem.transfer.exporter import ExportSummary
from hivemem.transfer.importer import ImportSummary
from hivemem.transfer.stores import Progress


class AsyncAdmin:
    """Cross-scope operations, as coroutines (see `Admin`)."""

    def __init__(self, admin: Admin) -> None:
        self._sync = admin

    @property
    def sync(self) -> Admin:
        return self._sync

    @property
    def redis(self) -> Redis:
        """The deployment's (synchronous) Redis connection, for operators' tools."""
        return self._sync.redis

    async def ready(self) -> dict[str, str]:
        return await in_thread(self._sync.ready)

    async def api_keys(self) -> ApiKeyStore:
        return await in_thread(self._sync.api_keys)

    async def pipeline_status(self) -> PipelineStatus:
        return await in_thread(self._sync.pipeline_status)

    async def rebuild_state(self, session_id: str | None = None) -> int:
        return await in_thread(self._sync.rebuild_state, session_id)

    async def sessions(self) -> list[str]:
        return await in_thread(self._sync.sessions)

    async def traces(self, count: int = 20, session_id: str | None = None) -> list[dict[str, Any]]:
        return await in_thread(self._sync.traces, count, session_id)

    async def facts(
        self, session_id: str, *, include_history: bool = False,
        include_inactive: bool = False, include_archived: bool = False,
    ) -> list[Fact]:
        return await in_thread(
            self._sync.facts, session_id, include_history=include_history,
            include_inactive=include_inactive, include_archived=include_archived,
        )

    async def dead_letters(self, count: int = 100) -> list[DeadLetter]:
        return await in_thread(self._sync.dead_letters, count)

    async def replay_dead_letters(
        self, entry_ids: Sequence[str] | None = None, *, stage: str = "embed",
        count: int = 1000,
    ) -> list[str]:
        return await in_thread(self._sync.replay_dead_letters, entry_ids, stage=stage, count=count)

    async def replay_reflection(self, session_id: str, episode_id: str | None = None) -> list[str]:
        return await in_thread(self._sync.replay_reflection, session_id, episode_id)

    async def preview_compaction(
        self, session_id: str, *, policy: CompactionPolicy | None = None,
        now: datetime | None = None,
    ) -> CompactionDiff:
        return await in_thread(self._sync.preview_compaction, session_id, policy=policy, now=now)

    async def compact(
        self, session_id: str, *, policy: CompactionPolicy | None = None,
        now: datetime | None = None, expect: CompactionDiff | str | None = None,
    ) -> CompactionDiff:
        return await in_thread(
            self._sync.compact, session_id, policy=policy, now=now, expect=expect)

    async def schedule_compaction(self, session_id: str, *, delay_s: float = 0.0) -> str:
        return await in_thread(self._sync.schedule_compaction, session_id, delay_s=delay_s)

    async def audit(self, memory_id: str) -> list[AuditEvent]:
        return await in_thread(self._sync.audit, memory_id)

    async def get_fact(self, fact_id: str) -> Fact | None:
        return await in_thread(self._sync.get_fact, fact_id)

    async def audit_log(self, session_id: str) -> list[AuditEvent]:
        return await in_thread(self._sync.audit_log, session_id)

    async def set_session_metadata(
        self, session_id: str, *, title: str | None = None, agent_id: str | None = None,
    ) -> SessionInfo:
        return await in_thread(
            self._sync.set_session_metadata, session_id, title=title,
            agent_id=agent_id,
        )

    async def session_info(self, session_id: str) -> SessionInfo:
        return await in_thread(self._sync.session_info, session_id)

    async def find_related_sessions(
        self, session_id: str, *, limit: int = 5, min_score: float = 0.05,
    ) -> list[RelatedSession]:
        return await in_thread(
            self._sync.find_related_sessions, session_id, limit=limit,
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

    async def build_timeline(
        self, session_ids: Sequence[str], *, kinds: Sequence[str] | None = None,
        limit: int | None = None,
    ) -> list[TimelineEvent]:
        return await in_thread(self._sync.build_timeline, session_ids, kinds=kinds, limit=limit)

    async def export(
        self, path: str | Path, session_ids: Sequence[str] | None = None, *,
        vectors: bool = False, progress: Progress | None = None,
    ) -> ExportSummary:
        return await in_thread(
            self._sync.export, path, session_ids, vectors=vectors, progress=progress,
        )

    async def import_file(
        self, path: str | Path, *, mode: str = "append", progress: Progress | None = None,
    ) -> ImportSummary:
        return await in_thread(self._sync.import_file, path, mode=mode, progress=progress)

    async def backup(self, path: str | Path, *, progress: Progress | None = None) -> ExportSummary:
        return await in_thread(self._sync.backup, path, progress=progress)

    async def restore(
        self, path: str | Path, *, mode: str = "replace", progress: Progress | None = None,
    ) -> ImportSummary:
        return await in_thread(self._sync.restore, path, mode=mode, progress=progress)

    async def count_export_records(self, session_ids: Sequence[str] | None = None) -> int:
        return await in_thread(self._sync.count_export_records, session_ids)

