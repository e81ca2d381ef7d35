"""CrewAI: `HivememCrewMemory`, a CrewAI `Memory` kept in hivemem, for ``Crew(memory=...)``
or ``Agent(memory=...)``.

Why a `Memory` and not a storage backend: CrewAI 1.15's `StorageBackend` receives only a
query *embedding* (CrewAI embeds with its own model), while hivemem's recall works from the
query's text (dense and lexical, with its currency, facts and budget). So the adapter is the
`Memory` object the crew talks to, and hivemem does what CrewAI's unified memory would ask an
LLM for (distilling memories, scoping, importance) in its own pipeline.

How it maps onto hivemem (the handle fixes hivemem's namespace and agent):

- Every memory is a turn of one hivemem session (`session_id`, default ``"crew"``), role
  ``assistant``, with CrewAI's scope, categories, importance, source and agent role in its
  metadata (``private=True`` writes a turn private to the handle's agent).
- ``extract_memories(raw)`` returns the raw text as one memory, without an LLM call:
  hivemem's reflection distils facts from the turns it stores.
- ``recall(query, limit=...)`` is hivemem's recall (turns and facts), as CrewAI
  `MemoryMatch` records; ``score`` is recall's score, ``match_reasons`` says whether a turn
  or a fact matched.
- ``forget`` / ``reset``: hivemem's memory is append-only for a tenant (an operator's
  forget erases), so they raise `NotImplementedError` rather than pretend.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from crewai.memory.types import MemoryMatch, MemoryRecord
from crewai.memory.unified_memory import Memory
from pydantic import ConfigDict, Field

from hivemem import ContextItem, NotFound
from hivemem.integrations.handle import MemoryHandle, in_thread

_APPEND_ONLY = ("hivemem keeps a tenant's memory append-only: nothing a scoped handle does "
                "erases it (an operator's `hivemem forget` does)")


class _NoVectorStorage:
    """The storage CrewAI's own recall would search by embedding; this memory never uses
    it (recall goes to hivemem), and says so if something else does."""

    def __getattr__(self, name: str) -> Any:
        raise NotImplementedError(f"HivememCrewMemory has no CrewAI vector storage ({name})")


class HivememCrewMemory(Memory):
    """``Crew(agents=..., tasks=..., memory=HivememCrewMemory(memory=handle))``.
    `memory`: a scoped handle (embedded ``MemoryClient.local(...).scoped(...)`` or remote
    ``hivemem.connect(...)``); `session_id`: the hivemem session of the crew's memories;
    `token_budget`: recall's budget."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    memory: Any = Field(exclude=True, description="The scoped hivemem handle.")
    session_id: str = Field(default="crew", description="The hivemem session.")
    token_budget: int | None = Field(default=None, description="Recall's token budget.")
    storage: Any = Field(default_factory=_NoVectorStorage, exclude=True)

    @property
    def handle(self) -> MemoryHandle:
        handle: MemoryHandle = self.memory
        return handle

    # -- writes ------------------------------------------------------------------------------

    def _row(self, content: str, scope: str | None, categories: list[str] | None,
             metadata: dict[str, Any] | None, importance: float | None, source: str | None,
             private: bool, agent_role: str | None) -> dict[str, Any]:
        extra = {"crewai_scope": scope or "/", "crewai_categories": list(categories or []),
                 "crewai_importance": (self.default_importance if importance is None
                                       else importance),
                 "crewai_source": source, "crewai_agent_role": agent_role}
        return {"session_id": self.session_id, "role": "assistant", "content": content,
                "metadata": {**(metadata or {}), **extra},
                "visibility": "private" if private else "shared"}

    def _record(self, row: dict[str, Any], turn_id: str) -> MemoryRecord:
        meta = row["metadata"]
        return MemoryRecord(id=turn_id, content=row["content"], scope=meta["crewai_scope"],
                            categories=meta["crewai_categories"], metadata=dict(meta),
                            importance=meta["crewai_importance"], source=meta["crewai_source"],
                            private=row["visibility"] == "private")

    def remember(self, content: str, scope: str | None = None,
                 categories: list[str] | None = None, metadata: dict[str, Any] | None = None,
                 importance: float | None = None, source: str | None = None,
                 private: bool = False, agent_role: str | None = None,
                 root_scope: str | None = None) -> MemoryRecord | None:
        records = self.remember_many([content], scope, categories, metadata, importance,
                                     source, private, agent_role, root_scope)
        return records[0] if records else None

    def remember_many(self, contents: list[str], scope: str | None = None,
                      categories: list[str] | None = None,
                      metadata: dict[str, Any] | None = None, importance: float | None = None,
                      source: str | None = None, private: bool = False,
                      agent_role: str | None = None,
                      root_scope: str | None = None) -> list[MemoryRecord]:
        if self.read_only:
            return []
        rows = [self._row(c.strip(), scope or root_scope, categories, metadata, importance,
                          source, private, agent_role) for c in contents if c and c.strip()]
        if not rows:
            return []
        turns = self.handle.ingest_many(rows)
        return [self._record(r, t.turn_id) for r, t in zip(rows, turns, strict=True)]

    def extract_memories(self, content: str) -> list[str]:
        return [content.strip()] if content and content.strip() else []

    # -- recall ------------------------------------------------------------------------------

    def recall(self, query: str, scope: str | None = None,
               categories: list[str] | None = None, limit: int = 10,
               depth: str = "deep", source: str | None = None,
               include_private: bool = False) -> list[MemoryMatch]:
        try:
            result = self.handle.recall(self.session_id, query, self.token_budget,
                                        limit=limit)
        except NotFound:
            return []
        matches = []
        for item in result:
            meta = item.metadata
            if scope and not str(meta.get("crewai_scope", "/")).startswith(scope):
                continue
            if categories and not set(categories) & set(meta.get("crewai_categories", [])):
                continue
            matches.append(MemoryMatch(record=_recalled(item), score=item.score,
                                       match_reasons=[f"hivemem {item.source_type}"]))
        return matches[:limit]

    # -- async twins -------------------------------------------------------------------------

    async def aremember(self, content: str, **kwargs: Any) -> MemoryRecord | None:
        return await in_thread(self.remember, content, **kwargs)

    async def aremember_many(self, contents: list[str], **kwargs: Any) -> list[MemoryRecord]:
        return await in_thread(self.remember_many, contents, **kwargs)

    async def arecall(self, query: str, **kwargs: Any) -> list[MemoryMatch]:
        return await in_thread(self.recall, query, **kwargs)

    async def aextract_memories(self, content: str) -> list[str]:
        return self.extract_memories(content)

    # -- what hivemem does not do for a tenant -------------------------------------------------

    def forget(self, *args: Any, **kwargs: Any) -> int:
        raise NotImplementedError(_APPEND_ONLY)

    def reset(self, scope: str | None = None) -> None:
        raise NotImplementedError(_APPEND_ONLY)

    def drain_writes(self) -> None:
        """Writes are synchronous here: nothing is pending."""

    def close(self) -> None:
        """The handle belongs to the caller, who closes it."""


def _recalled(item: ContextItem) -> MemoryRecord:
    meta = item.metadata
    when = item.timestamp or datetime.now(UTC)
    return MemoryRecord(
        id=item.source_id, content=item.content,
        scope=str(meta.get("crewai_scope", "/")),
        categories=list(meta.get("crewai_categories", [])) or (
            [str(meta["kind"])] if item.source_type == "fact" and "kind" in meta else []),
        metadata={k: v for k, v in meta.items() if not k.startswith("crewai_")},
        importance=float(meta.get("crewai_importance", 0.5)),
        created_at=when, last_accessed=when,
        source=meta.get("crewai_source") or item.agent_id,
        private=item.visibility == "private")
