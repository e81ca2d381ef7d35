"""`AsyncMemoryClient`: the same SDK for asyncio code.

Each call runs the synchronous client in a worker thread (`asyncio.to_thread`), so the
event loop never blocks on Redis, Qdrant or the embedding model.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Self

from hivemem.config import Settings
from hivemem.domain.episode import Episode
from hivemem.domain.models import RecallResult, Role, SessionStats, Turn
from hivemem.domain.recall.policy import RecallPolicy
from hivemem.producer.aio_admin import AsyncLifecycleMixin
from hivemem.producer.client import MemoryClient, TurnInput


class AsyncMemoryClient(AsyncLifecycleMixin):
    def __init__(self, settings: Settings | None = None, *, client: MemoryClient | None = None):
        self._client = client or MemoryClient(settings)

    @classmethod
    def local(cls, path: str | Path, settings: Settings | None = None, **kwargs: Any) -> Self:
        return cls(client=MemoryClient.local(path, settings, **kwargs))

    @property
    def sync(self) -> MemoryClient:
        return self._client

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
        return await asyncio.to_thread(
            self._client.ingest,
            session_id,
            role,
            content,
            agent_id=agent_id,
            markers=markers,
            metadata=metadata,
            timestamp=timestamp,
            turn_id=turn_id,
            namespace=namespace,
            visibility=visibility,
            durable=durable,
        )

    async def ingest_many(
        self, turns: Iterable[TurnInput | Mapping[str, Any]], *, durable: bool | None = None
    ) -> list[Turn]:
        return await asyncio.to_thread(
            functools.partial(self._client.ingest_many, list(turns), durable=durable)
        )

    async def recall(
        self,
        session_id: str,
        query: str,
        token_budget: int | None = None,
        *,
        preset: str | RecallPolicy | None = None,
        limit: int | None = None,
        include_history: bool = False,
        explain: bool = False,
        related_sessions: Sequence[str] = (),
        agent_id: str | None = None,
        namespace: str | None = None,
    ) -> RecallResult:
        return await asyncio.to_thread(
            functools.partial(
                self._client.recall, session_id, query, token_budget, preset=preset,
                limit=limit, include_history=include_history, explain=explain,
                related_sessions=related_sessions, agent_id=agent_id, namespace=namespace,
            )
        )

    async def get_session_stats(
        self, session_id: str, *, namespace: str | None = None
    ) -> SessionStats:
        return await asyncio.to_thread(
            functools.partial(self._client.get_session_stats, session_id, namespace=namespace)
        )

    async def wait_until_processed(
        self, session_id: str, timeout: float = 30.0, *, stage: str = "embed"
    ) -> SessionStats:
        return await asyncio.to_thread(
            self._client.wait_until_processed, session_id, timeout, stage=stage
        )

    async def close_episode(self, session_id: str, *, namespace: str | None = None) -> int:
        return await asyncio.to_thread(
            functools.partial(self._client.close_episode, session_id, namespace=namespace)
        )

    async def close_session(self, session_id: str, *, namespace: str | None = None) -> int:
        return await asyncio.to_thread(
            functools.partial(self._client.close_session, session_id, namespace=namespace)
        )

    async def episodes(self, session_id: str) -> list[Episode]:
        return await asyncio.to_thread(self._client.episodes, session_id)

    async def close(self) -> None:
        await asyncio.to_thread(self._client.close)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()
