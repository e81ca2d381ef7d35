"""`AsyncScopedMemory`: `ScopedMemory` for asyncio code, method for method (each runs the
synchronous handle's method in a worker thread, see `twin`). A test pins the two to the same
methods."""

from __future__ import annotations

from hivemem.domain.scope import Scope
from hivemem.producer.scoped import ScopedMemory
from hivemem.producer.threads import AsyncHandle, twin


class AsyncScopedMemory(AsyncHandle[ScopedMemory]):
    """What one agent of one namespace may do, as coroutines (see `ScopedMemory`)."""

    @property
    def scope(self) -> Scope:
        return self._sync.scope

    @property
    def pinned(self) -> bool:
        return self._sync.pinned

    def pin(self) -> AsyncScopedMemory:
        """This handle, unable to become another agent (see `ScopedMemory.pin`)."""
        return AsyncScopedMemory(self._sync.pin())

    def for_agent(self, agent_id: str | None) -> AsyncScopedMemory:
        """The same namespace as another agent (or none)."""
        return AsyncScopedMemory(self._sync.for_agent(agent_id))

    ingest = twin(ScopedMemory.ingest)
    ingest_many = twin(ScopedMemory.ingest_many)
    close_episode = twin(ScopedMemory.close_episode)
    close_session = twin(ScopedMemory.close_session)
    set_session_info = twin(ScopedMemory.set_session_info)
    recall = twin(ScopedMemory.recall)
    facts = twin(ScopedMemory.facts)
    episodes = twin(ScopedMemory.episodes)
    get_session_stats = twin(ScopedMemory.get_session_stats)
    wait_until_processed = twin(ScopedMemory.wait_until_processed)
    wait_until_reflected = twin(ScopedMemory.wait_until_reflected)
    sessions = twin(ScopedMemory.sessions)
    traces = twin(ScopedMemory.traces)
    timeline = twin(ScopedMemory.timeline)
    timeline_page = twin(ScopedMemory.timeline_page)
    latest = twin(ScopedMemory.latest)
    recall_latest = twin(ScopedMemory.recall_latest)
    audit = twin(ScopedMemory.audit)
    session_info = twin(ScopedMemory.session_info)
    related_sessions = twin(ScopedMemory.related_sessions)
    session_context = twin(ScopedMemory.session_context)
    export = twin(ScopedMemory.export)
    forget = twin(ScopedMemory.forget)
    forget_fact = twin(ScopedMemory.forget_fact)
    forget_agent = twin(ScopedMemory.forget_agent)
