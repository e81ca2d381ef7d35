"""Google ADK: `HivememMemoryService`, a `BaseMemoryService` over a scoped hivemem handle.

How ADK's memory maps onto hivemem (the handle fixes hivemem's namespace and agent):

- An ADK session ``(app_name, user_id, session.id)`` is the hivemem session
  ``adk.<app>.<user>.<session>`` (each label escaped: ``[A-Za-z0-9_-]`` kept, any other
  character ``:xxxx``, its code in hex).
- ``add_session_to_memory`` / ``add_events_to_memory``: each event with text is one turn
  (the user's events are ``user`` turns, an agent's are ``assistant`` turns with the
  author in the metadata), with the event's id as the turn id: a session added again
  (ADK allows it, and does it after every turn with ``after_agent_callback``) writes only
  the events not yet remembered. ``add_memory``: each entry a turn of the user's
  ``adk.<app>.<user>.:memory`` session.
- ``search_memory``: hivemem's recall over each of the user's sessions, merged by score,
  the best `max_results`: turns *and* the facts hivemem reflected from them (a fact comes
  back with ``author="hivemem"`` and ``custom_metadata["source_type"] == "fact"``).
  ``MemoryEntry.id`` is the turn or fact id. Which sessions the user has is the hivemem
  namespace's session listing, reused for `list_cache` seconds (1 by default; this
  service's own additions show at once, another process's within that time).
- ``delete_memory``: hivemem's memory is append-only for a tenant (a scoped handle erases
  nothing; an operator's forget does), so the id is remembered as deleted (a turn of the
  user's ``adk.<app>.<user>.:deleted`` session) and searches leave it out; adding its
  session again does not bring it back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from google.adk.events.event import Event
from google.adk.memory import BaseMemoryService
from google.adk.memory.base_memory_service import SearchMemoryResponse
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.sessions.session import Session
from google.genai import types

from hivemem import ContextItem, NotFound, ValidationError
from hivemem.integrations.handle import (
    ListingCached,
    MemoryHandle,
    SessionListing,
    encode_label,
    in_thread,
    session_turns,
    wrote,
)

_MEMORY = ":memory"  # never an escaped label: ':' there is always followed by 4 hex digits
_DELETED = ":deleted"


def user_prefix(app_name: str, user_id: str) -> str:
    """The start of the hivemem session ids of one ADK app's user."""
    if not app_name or not user_id:
        raise ValidationError("app_name" if not app_name else "user_id", "must not be empty")
    return f"adk.{encode_label(app_name)}.{encode_label(user_id)}."


def adk_session(app_name: str, user_id: str, session_id: str) -> str:
    """The hivemem session id of an ADK session."""
    found = user_prefix(app_name, user_id) + encode_label(session_id)
    if len(found) > 128:
        raise ValidationError("session_id", "app, user and session encode to more than 128"
                                            " characters")
    return found


def _text(content: types.Content | None) -> str:
    if content is None or not content.parts:
        return ""
    return "\n".join(p.text for p in content.parts if p.text and not p.thought).strip()


class HivememMemoryService(ListingCached, BaseMemoryService):
    """An ADK memory service kept in hivemem: ``Runner(..., memory_service=
    HivememMemoryService(memory))``. `memory` is a scoped handle (embedded
    ``MemoryClient.local(...).scoped(...)`` or remote ``hivemem.connect(...)``);
    `max_results`: memories a search returns; `token_budget`: each recall's budget.
    `list_cache`: seconds a search reuses the listing of the hivemem namespace's sessions
    (which sessions a user has) before listing again: a session another process adds
    shows in searches within that time (this service's own additions at once; 0: list
    on every search)."""

    def __init__(self, memory: MemoryHandle, *, max_results: int = 10,
                 token_budget: int | None = None, read_wait: float = 10.0,
                 list_cache: float = 1.0) -> None:
        self.memory = memory
        self.max_results = max_results
        self.token_budget = token_budget
        self.read_wait = read_wait
        self._listing = SessionListing(memory, list_cache)

    # -- writes ------------------------------------------------------------------------------

    def _rows(self, session_id: str, events: Sequence[Event],
              extra: Mapping[str, object] | None = None) -> list[dict[str, Any]]:
        rows = []
        for event in events:
            text = _text(event.content)
            if not text:
                continue
            row: dict[str, Any] = {
                "session_id": session_id, "content": text,
                "role": "user" if event.author == "user" else "assistant",
                "metadata": {"adk_author": event.author, **(extra or {})}}
            if event.id and len(event.id) <= 128 and event.id.replace("-", "").isalnum():
                row["turn_id"] = event.id
            rows.append(row)
        return rows

    def _ingest(self, rows: list[dict[str, Any]]) -> None:
        if rows:
            self.memory.ingest_many(rows)
            self._listing.add(str(row["session_id"]) for row in rows)

    async def add_session_to_memory(self, session: Session) -> None:
        sid = adk_session(session.app_name, session.user_id, session.id)
        await in_thread(self._ingest, self._rows(sid, session.events))

    async def add_events_to_memory(
        self, *, app_name: str, user_id: str, events: Sequence[Event],
        session_id: str | None = None, custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        sid = adk_session(app_name, user_id, session_id or _MEMORY)
        await in_thread(self._ingest, self._rows(sid, events, custom_metadata))

    async def add_memory(
        self, *, app_name: str, user_id: str, memories: Sequence[MemoryEntry],
        custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        sid = user_prefix(app_name, user_id) + _MEMORY
        rows = []
        for entry in memories:
            text = _text(entry.content)
            if text:
                rows.append({"session_id": sid, "content": text,
                             "role": "user" if entry.author in (None, "user") else "assistant",
                             "metadata": {**entry.custom_metadata, **(custom_metadata or {}),
                                          "adk_author": entry.author}})
        await in_thread(self._ingest, rows)

    async def delete_memory(self, *, app_name: str, user_id: str,
                            memory_id: str | None = None) -> None:
        if memory_id:
            sid = user_prefix(app_name, user_id) + _DELETED
            await in_thread(self.memory.ingest, sid, "system",
                            json.dumps({"deleted": memory_id}))
            wrote(self.memory, [sid])
            self._listing.add([sid])

    # -- search ------------------------------------------------------------------------------

    async def search_memory(self, *, app_name: str, user_id: str,
                            query: str) -> SearchMemoryResponse:
        return await in_thread(self.search, app_name, user_id, query)

    def deleted(self, app_name: str, user_id: str) -> set[str]:
        """The memory ids deleted for the user."""
        sid = user_prefix(app_name, user_id) + _DELETED
        found = set()
        for event in session_turns(self.memory, sid, wait=self.read_wait):
            try:
                found.add(str(json.loads(event.summary)["deleted"]))
            except (ValueError, KeyError, TypeError):
                continue
        return found

    def search(self, app_name: str, user_id: str, query: str) -> SearchMemoryResponse:
        prefix = user_prefix(app_name, user_id)
        sessions = self._listing.get()
        # The deletions session exists once something was deleted: read it only then.
        gone = self.deleted(app_name, user_id) if prefix + _DELETED in sessions else set()
        best: dict[str, ContextItem] = {}
        for sid in sorted(s for s in sessions if s.startswith(prefix)):
            if sid == prefix + _DELETED:
                continue
            try:
                result = self.memory.recall(sid, query, self.token_budget)
            except NotFound:
                continue
            for item in result:
                if item.source_id in gone:
                    continue
                if item.source_id not in best or best[item.source_id].score < item.score:
                    best[item.source_id] = item
        ranked = sorted(best.values(), key=lambda i: -i.score)[:self.max_results]
        return SearchMemoryResponse(memories=[_entry(i) for i in ranked])


def _entry(item: ContextItem) -> MemoryEntry:
    if item.source_type == "fact":
        author = "hivemem"
        role = "model"
    else:
        author = str(item.metadata.get("adk_author") or (
            "user" if item.role and item.role.value == "user" else item.agent_id or "agent"))
        role = "user" if item.role and item.role.value == "user" else "model"
    # Built without validation (`model_construct`): every value is of the field's type
    # already, and validating ten nested models per search cost ~5% of it.
    part = types.Part.model_construct(text=item.content)
    return MemoryEntry.model_construct(
        id=item.source_id, author=author,
        content=types.Content.model_construct(role=role, parts=[part]),
        timestamp=item.timestamp.isoformat() if item.timestamp else None,
        custom_metadata={"source_type": item.source_type, "session_id": item.session_id,
                         "score": item.score})
