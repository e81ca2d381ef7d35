"""The memory-lifecycle methods of `AsyncMemoryClient`: each runs the synchronous client's
method in a worker thread, so the event loop never blocks on the stores."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hivemem.domain.audit import AuditEvent
    from hivemem.domain.compaction import CompactionDiff, CompactionPolicy
    from hivemem.domain.session import RelatedSession, SessionInfo
    from hivemem.domain.timeline import TimelineEvent
    from hivemem.producer.client import MemoryClient
    from hivemem.transfer.exporter import ExportSummary
    from hivemem.transfer.importer import ImportSummary


class AsyncLifecycleMixin:
    if TYPE_CHECKING:
        _client: MemoryClient

    async def preview_compaction(
        self, session_id: str, *, policy: CompactionPolicy | None = None,
        now: datetime | None = None,
    ) -> CompactionDiff:
        return await asyncio.to_thread(functools.partial(
            self._client.preview_compaction, session_id, policy=policy, now=now))

    async def compact(
        self, session_id: str, *, policy: CompactionPolicy | None = None,
        now: datetime | None = None, expect: CompactionDiff | str | None = None,
    ) -> CompactionDiff:
        return await asyncio.to_thread(functools.partial(
            self._client.compact, session_id, policy=policy, now=now, expect=expect))

    async def audit(self, memory_id: str) -> list[AuditEvent]:
        return await asyncio.to_thread(self._client.audit, memory_id)

    async def set_session_metadata(
        self, session_id: str, *, title: str | None = None, agent_id: str | None = None,
    ) -> SessionInfo:
        return await asyncio.to_thread(functools.partial(
            self._client.set_session_metadata, session_id, title=title, agent_id=agent_id))

    async def session_info(self, session_id: str) -> SessionInfo:
        return await asyncio.to_thread(self._client.session_info, session_id)

    async def find_related_sessions(
        self, session_id: str, *, limit: int = 5
    ) -> list[RelatedSession]:
        return await asyncio.to_thread(functools.partial(
            self._client.find_related_sessions, session_id, limit=limit))

    async def build_timeline(
        self, session_ids: Sequence[str], *, kinds: Sequence[str] | None = None,
        limit: int | None = None,
    ) -> list[TimelineEvent]:
        return await asyncio.to_thread(functools.partial(
            self._client.build_timeline, session_ids, kinds=kinds, limit=limit))

    async def export(
        self, path: str | Path, session_ids: Sequence[str] | None = None, *,
        vectors: bool = False,
    ) -> ExportSummary:
        return await asyncio.to_thread(functools.partial(
            self._client.export, path, session_ids, vectors=vectors))

    async def import_file(self, path: str | Path, *, mode: str = "append") -> ImportSummary:
        return await asyncio.to_thread(functools.partial(
            self._client.import_file, path, mode=mode))

    async def backup(self, path: str | Path) -> ExportSummary:
        return await asyncio.to_thread(self._client.backup, path)

    async def restore(self, path: str | Path, *, mode: str = "replace") -> ImportSummary:
        return await asyncio.to_thread(functools.partial(
            self._client.restore, path, mode=mode))
