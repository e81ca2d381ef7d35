"""`AsyncMemoryClient`: the same SDK for asyncio code.

Each call runs the synchronous client in a worker thread (`asyncio.to_thread`), so the
event loop never blocks on Redis, Qdrant or the embedding model. `scoped()` and `admin` give
the async twins of `ScopedMemory` and `Admin`; a test pins every method of the three to the
synchronous one's signature.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from hivemem.config import CompactionPolicy, Settings
from hivemem.domain.audit import AuditEvent
from hivemem.domain.compaction import CompactionDiff
from hivemem.domain.episode import Episode
from hivemem.domain.fact import Fact
from hivemem.domain.models import DeadLetter, RecallResult, Role, SessionStats, Turn
from hivemem.domain.recall.policy import RecallPolicy
from hivemem.domain.scope import DEFAULT_NAMESPACE
from hivemem.domain.session import RelatedSession, SessionContext, SessionInfo
from hivemem.domain.timeline import TimelineEvent
from hivemem.producer.aio_admin import AsyncAdmin
from hivemem.producer.aio_scoped import AsyncScopedMemory
from hivemem.producer.client import MemoryClient, TurnInput
from hivemem.producer.threads import in_thread
from hivemem.transfer.exporter import ExportSummary
from hivemem.transfer.importer import ImportSummary
from hivemem.transfer.stores import Progress

if TYPE_CHECKING:
    from hivemem.providers.embedders import Embedder
    from hivemem.providers.reflector import Reflector
    from hivemem.store.vectors.base import VectorStore


class AsyncMemoryClient:
    """Shared memory for agents, as coroutines (see `MemoryClient`)."""

    def __init__(self, settings: Settings | None = None, *, client: MemoryClient | None = None):
        self._sync = client or MemoryClient(settings)
        self._admin = AsyncAdmin(self._sync.admin)

    @classmethod
    def local(
        cls,
        path: str | Path,
        settings: Settings | None = None,
        *,
        embedder: Embedder | None = None,
        reflector: Reflector | None = None,
        workers: int | None = None,
    ) -> Self:
        """Embedded mode (see `MemoryClient.local`)."""
        return cls(client=MemoryClient.local(path, settings, embedder=embedder,
                                             reflector=reflector, workers=workers))

    @property
    def sync(self) -> MemoryClient:
        return self._sync

    def scoped(
        self, *, namespace: str = DEFAULT_NAMESPACE, agent_id: str | None = None
    ) -> AsyncScopedMemory:
        """A handle bound to one namespace and (optionally) one agent."""
        return AsyncScopedMemory(self._sync.scoped(namespace=namespace, agent_id=agent_id))

    @property
    def admin(self) -> AsyncAdmin:
        """The cross-scope operations, for operators only."""
        return self._admin

    async def ingest(
        self,
        session_id: str,
        role: str | Role,
        content: str,
        *,
        agent_id: str | None = None,
        markers: Iterable[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        timestamp: datetime | None = None,
        turn_id: str | None = None,
        namespace: str | None = None,
        visibility: str = "shared",
        durable: bool | None = None,
    ) -> Turn:
        return await in_thread(
            self._sync.ingest, session_id, role, content, agent_id=agent_id,
            markers=markers, metadata=metadata, timestamp=timestamp,
            turn_id=turn_id, namespace=namespace, visibility=visibility,
            durable=durable,
        )

    async def ingest_many(
        self, turns: Iterable[TurnInput | Mapping[str, Any]], *, durable: bool | None = None
    ) -> list[Turn]:
        return await in_thread(self._sync.ingest_many, turns, durable=durable)

    async def get_session_stats(
        self, session_id: str, *, namespace: str | None = None
    ) -> SessionStats:
        return await in_thread(self._sync.get_session_stats, session_id, namespace=namespace)

    async def close_episode(self, session_id: str, *, namespace: str | None = None) -> int:
        return await in_thread(self._sync.close_episode, session_id, namespace=namespace)

    async def close_session(self, session_id: str, *, namespace: str | None = None) -> int:
        return await in_thread(self._sync.close_session, session_id, namespace=namespace)

    async def recent_turns(self, session_id: str, limit: int = 10) -> list[Turn]:
        return await in_thread(self._sync.recent_turns, session_id, limit)

    async def episodes(self, session_id: str, *, namespace: str | None = None) -> list[Episode]:
        return await in_thread(self._sync.episodes, session_id, namespace=namespace)

    async def wait_until_processed(
        self, session_id: str, timeout: float = 30.0, *, stage: str = "embed"
    ) -> SessionStats:
        return await in_thread(self._sync.wait_until_processed, session_id, timeout, stage=stage)

    async def dead_letters(self, count: int = 100) -> list[DeadLetter]:
        return await in_thread(self._sync.dead_letters, count)

    async def replay_dead_letters(
        self, entry_ids: Sequence[str] | None = None, *, stage: str = "embed",
        count: int = 1000,
    ) -> list[str]:
        return await in_thread(self._sync.replay_dead_letters, entry_ids, stage=stage, count=count)

    async def sessions(self) -> list[str]:
        return await in_thread(self._sync.sessions)

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
        agent_id: str | None = None,
        namespace: str | None = None,
    ) -> RecallResult:
        return await in_thread(
            self._sync.recall, session_id, query, token_budget, preset=preset,
            limit=limit, include_history=include_history,
            include_archived=include_archived, explain=explain,
            related_sessions=related_sessions, agent_id=agent_id,
            namespace=namespace,
        )

    async def facts(
        self, session_id: str, *, include_history: bool = False,
        agent_id: str | None = None, namespace: str | None = None,
        include_inactive: bool = False, include_archived: bool = False,
    ) -> list[Fact]:
        return await in_thread(
            self._sync.facts, session_id, include_history=include_history,
            agent_id=agent_id, namespace=namespace,
            include_inactive=include_inactive, include_archived=include_archived,
        )

    async def traces(
        self, count: int = 20, session_id: str | None = None, *, namespace: str | None = None
    ) -> list[dict[str, Any]]:
        return await in_thread(self._sync.traces, count, session_id, namespace=namespace)

    async def replay_reflection(self, session_id: str, episode_id: str | None = None) -> list[str]:
        return await in_thread(self._sync.replay_reflection, session_id, episode_id)

    async def wait_until_reflected(self, session_id: str, timeout: float = 30.0) -> int:
        return await in_thread(self._sync.wait_until_reflected, session_id, timeout)

    async def vector_store(self) -> VectorStore:
        return await in_thread(self._sync.vector_store)

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

    async def close(self) -> None:
        await in_thread(self._sync.close)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()
