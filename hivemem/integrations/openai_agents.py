"""OpenAI Agents SDK: `HivememSession`, a `Session` whose conversation is a hivemem session,
and `memory_instructions`, an agent's instructions with hivemem's budgeted recall in them.

How the SDK's session maps onto hivemem (the handle fixes hivemem's namespace and agent):

- ``session_id`` is the hivemem session id (``[A-Za-z0-9._:-]{1,128}``).
- ``add_items``: each item is one turn. A message with text is a turn of its role
  (``developer`` is ``system``) whose content is its text, so recall embeds and ranks what
  was said; any other item (a tool call, its output, a reasoning item, a message without
  text) is a ``tool`` turn holding the item as JSON.
- ``get_items`` reads the turns back, oldest first: a text message comes back as
  ``{"role": ..., "content": text}`` (what the model saw, without the output message's id
  and annotations), any other item exactly as it was added.
- ``pop_item`` and ``clear_session``: hivemem's memory is append-only for a tenant (a
  scoped handle erases nothing; an operator's forget does). So ``pop_item`` remembers a
  control turn saying the newest item was taken back, and ``clear_session`` one saying the
  history starts again: ``get_items`` then leaves those items out, and so does
  `memory_instructions`' recall for popped ones. What was said before a clear stays
  recallable: a cleared conversation is still remembered, which is what memory is for.
  A pop's control turn names the popped turn in its metadata (``agents_popped``), so the
  recall for a given query learns the popped turns from hivemem's key index
  (`ScopedMemory.latest`) instead of reading the history.
- A read of a session this process wrote to waits (at most `read_wait` seconds) until
  those turns are stored, so the next run sees the previous one; another process's writes
  show once stored (milliseconds later).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from agents import Agent, RunContextWrapper, TResponseInputItem
from agents.memory import SessionSettings

from hivemem import ContextItem, TimelineEvent
from hivemem.integrations.handle import (
    MemoryHandle,
    in_thread,
    session_latest,
    session_turns,
    settle,
    wrote,
)

_CONTROL = "hivemem_session"  # the key of a control turn's JSON (pop, clear)
POPPED = "agents_popped"  # a pop control's metadata field: the turn it took back
_ROLES = {"user": "user", "assistant": "assistant", "system": "system",
          "developer": "system"}


def _text(item: dict[str, Any]) -> str | None:
    """The text of a message item (string content or its text parts); None for an item
    that is not a message of a known role, or a message without text."""
    if item.get("type", "message") != "message" or item.get("role") not in _ROLES:
        return None
    content = item.get("content")
    if isinstance(content, str):
        return content or None
    if not isinstance(content, list):
        return None
    parts = [p.get("text") for p in content if isinstance(p, dict)
             and p.get("type") in ("input_text", "output_text", "text")]
    if len(parts) != len(content) or not all(isinstance(p, str) for p in parts):
        return None  # images, files, refusals: kept whole as JSON
    return "\n".join(str(p) for p in parts) or None


def _row(session_id: str, item: Any) -> dict[str, Any]:
    data = item if isinstance(item, dict) else dict(item)  # read only: no copy of a dict
    text = _text(data)
    if text is not None:
        return {"session_id": session_id, "role": _ROLES[data["role"]], "content": text}
    return {"session_id": session_id, "role": "tool",
            "content": json.dumps(data, ensure_ascii=False, default=str)}


def _json(content: str) -> dict[str, Any] | None:
    if not content.startswith("{"):
        return None
    try:
        found = json.loads(content)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def _control(role: str, content: str) -> dict[str, Any] | None:
    found = _json(content) if role == "system" else None
    return found if found is not None and _CONTROL in found else None


def _item(event: TimelineEvent) -> dict[str, Any]:
    role = str(event.detail.get("role", "user"))
    if role == "tool":
        found = _json(event.summary)
        if found is not None and "type" in found:
            return found
    return {"role": role, "content": event.summary}


class HivememSession:
    """An Agents SDK `Session` kept in hivemem: ``Runner.run(agent, text,
    session=HivememSession("chat-1", memory))``. `memory` is a scoped handle (embedded
    ``MemoryClient.local(...).scoped(...)`` or remote ``hivemem.connect(...)``);
    `read_wait`: seconds a read waits for the writes before it (0: no wait)."""

    session_settings: SessionSettings | None = None

    def __init__(self, session_id: str, memory: MemoryHandle, *,
                 read_wait: float = 10.0) -> None:
        self.session_id = session_id
        self.memory = memory
        self.read_wait = read_wait

    # -- what the history is -------------------------------------------------------------------

    def history(self) -> tuple[list[TimelineEvent], set[str]]:
        """The turns of the session's current history, oldest first, and the ids of the
        turns taken back by `pop_item` (control turns and what a clear ended left out)."""
        kept: list[TimelineEvent] = []
        popped: set[str] = set()
        for event in session_turns(self.memory, self.session_id, wait=self.read_wait):
            control = _control(str(event.detail.get("role")), event.summary)
            if control is None:
                kept.append(event)
            elif control[_CONTROL] == "clear":
                kept.clear()
            elif control[_CONTROL] == "pop":
                gone = [e for e in kept if e.ref_id == control.get("turn_id")]
                for taken in gone:
                    kept.remove(taken)
                    popped.add(taken.ref_id)
        return kept, popped

    def items(self, limit: int | None = None) -> list[dict[str, Any]]:
        kept, _ = self.history()
        if limit is not None:
            kept = kept[-limit:] if limit > 0 else []
        return [_item(e) for e in kept]

    def add(self, items: list[Any]) -> None:
        if items:
            self.memory.ingest_many([_row(self.session_id, i) for i in items])
            wrote(self.memory, [self.session_id])

    def pop(self) -> dict[str, Any] | None:
        kept, _ = self.history()
        if not kept:
            return None
        last = kept[-1]
        self._note({_CONTROL: "pop", "turn_id": last.ref_id})
        return _item(last)

    def clear(self) -> None:
        if session_turns(self.memory, self.session_id, wait=0, limit=1):
            self._note({_CONTROL: "clear"})

    def _note(self, control: dict[str, Any]) -> None:
        # A pop's metadata names the turn it took back: hivemem's key index then lists the
        # popped turns (`popped`) without reading the history.
        meta = {POPPED: control["turn_id"]} if control[_CONTROL] == "pop" else None
        self.memory.ingest(self.session_id, "system", json.dumps(control), metadata=meta)
        wrote(self.memory, [self.session_id])

    def popped(self) -> set[str] | None:
        """The ids of the turns `pop_item` took back, through the key index; None when
        the handle has none (a remote handle): `history` says."""
        found = session_latest(self.memory, self.session_id, POPPED, wait=self.read_wait,
                               with_turns=False)
        return None if found is None else set(found)

    # -- the Session protocol ------------------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        return await in_thread(self.items, limit)  # type: ignore[arg-type]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        await in_thread(self.add, list(items))

    async def pop_item(self) -> TResponseInputItem | None:
        return await in_thread(self.pop)  # type: ignore[arg-type]

    async def clear_session(self) -> None:
        await in_thread(self.clear)

    # -- recall ------------------------------------------------------------------------------

    def context(self, query: str | None = None, token_budget: int | None = None, *,
                preset: str | None = None) -> str:
        """hivemem's recall for `query` (default: the newest user message) as prompt text,
        without control turns or popped items; ``""`` when there is nothing yet."""
        both = getattr(self.memory, "recall_latest", None)
        if query is not None and both is not None:
            # Recall and the popped turns (the key index) in one call: the session's scope
            # is checked once, not once per read.
            settle(self.memory, self.session_id, self.read_wait)
            result, found = both(self.session_id, query, POPPED, token_budget,
                                 preset=preset)
            popped: set[str] = set(found)
        else:
            known = self.popped() if query is not None else None
            if known is None:
                kept, known = self.history()
            popped = known
            if query is None:
                said = [e.summary for e in kept if e.detail.get("role") == "user"]
                if not said:
                    return ""
                query = said[-1]
            result = self.memory.recall(self.session_id, query, token_budget, preset=preset)
        chosen = [i for i in result if not _hidden(i, popped)]
        return "\n".join(i.render() for i in sorted(chosen, key=_when))


def _hidden(item: ContextItem, popped: set[str]) -> bool:
    if item.source_type != "turn":
        return False
    role = item.role.value if item.role else ""
    return item.source_id in popped or _control(role, item.content) is not None


_EPOCH = datetime.min.replace(tzinfo=UTC)


def _when(item: ContextItem) -> tuple[datetime, int]:
    # As `RecallResult.chronological` orders (no string per item: it ran per call).
    return (item.timestamp or _EPOCH, item.seq or 0)


def memory_instructions(
    session: HivememSession, instructions: str, *, token_budget: int | None = None,
    preset: str | None = None,
    heading: str = "What you remember (from earlier turns and facts, oldest first):",
) -> Callable[[RunContextWrapper[Any], Agent[Any]], Awaitable[str]]:
    """Dynamic instructions for ``Agent(instructions=...)``: `instructions`, then hivemem's
    recall for the run's newest user message within `token_budget` tokens (the most
    relevant turns and facts of the whole session, not only its last items). The Runner
    saves the input to the session before it asks for instructions, so the newest user
    message is the run's."""

    async def build(_context: RunContextWrapper[Any], _agent: Agent[Any]) -> str:
        remembered = await in_thread(session.context, None, token_budget, preset=preset)
        return f"{instructions}\n\n{heading}\n{remembered}" if remembered else instructions

    return build
