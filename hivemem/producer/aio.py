"""`AsyncMemoryClient`: the same SDK for asyncio code.

Each call runs the synchronous client in a worker thread (`twin`), so the event loop never
blocks on Redis, Qdrant or the embedding model. `scoped()` and `admin` give the async twins
of `ScopedMemory` and `Admin`; a test pins the three to the synchronous ones' methods.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Self

from hivemem.config import Settings
from hivemem.domain.scope import DEFAULT_NAMESPACE
from hivemem.producer.aio_admin import AsyncAdmin
from hivemem.producer.aio_scoped import AsyncScopedMemory
from hivemem.producer.client import MemoryClient
from hivemem.producer.threads import AsyncHandle, twin, twin_classmethod

if TYPE_CHECKING:
    pass


def _adopt(cls: type[AsyncMemoryClient], sync: MemoryClient) -> AsyncMemoryClient:
    return cls(client=sync)


class AsyncMemoryClient(AsyncHandle[MemoryClient]):
    """Shared memory for agents, as coroutines (see `MemoryClient`)."""

    def __init__(self, settings: Settings | None = None, *, client: MemoryClient | None = None):
        super().__init__(client or MemoryClient(settings))
        self._admin = AsyncAdmin(self._sync.admin)

    local = twin_classmethod(MemoryClient.local, _adopt)

    def scoped(
        self, *, namespace: str = DEFAULT_NAMESPACE, agent_id: str | None = None
    ) -> AsyncScopedMemory:
        """A handle bound to one namespace and (optionally) one agent."""
        return AsyncScopedMemory(self._sync.scoped(namespace=namespace, agent_id=agent_id))

    @property
    def admin(self) -> AsyncAdmin:
        """The cross-scope operations, for operators only."""
        return self._admin

    ingest = twin(MemoryClient.ingest)
    ingest_many = twin(MemoryClient.ingest_many)
    get_session_stats = twin(MemoryClient.get_session_stats)
    close_episode = twin(MemoryClient.close_episode)
    close_session = twin(MemoryClient.close_session)
    recent_turns = twin(MemoryClient.recent_turns)
    episodes = twin(MemoryClient.episodes)
    wait_until_processed = twin(MemoryClient.wait_until_processed)
    recall = twin(MemoryClient.recall)
    facts = twin(MemoryClient.facts)
    traces = twin(MemoryClient.traces)
    wait_until_reflected = twin(MemoryClient.wait_until_reflected)
    vector_store = twin(MemoryClient.vector_store)
    close = twin(MemoryClient.close)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()
