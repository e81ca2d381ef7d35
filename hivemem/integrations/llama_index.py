"""LlamaIndex: `HivememMemoryBlock`, a `BaseMemoryBlock` for LlamaIndex's `Memory` whose
long-term memory is a hivemem session.

How it fits LlamaIndex's `Memory` (llama-index-core 0.14):

- ``aput`` (what `Memory` calls with the messages it flushes out of its short-term FIFO
  once that passes its token limit): each message with text is one turn of the block's
  hivemem session, of its role (``user``, ``assistant``, ``system``, ``tool``; ``developer``
  is ``system``, ``chatbot``/``model`` are ``assistant``).
- ``aget`` (what `Memory.get` calls to fill the memory part of the prompt): hivemem's
  recall for the newest user message of the chat, within `token_budget` tokens, rendered
  as prompt text (one dated line per turn or fact, oldest first); ``""`` before there is
  anything to recall.
- ``atruncate``: drops the oldest lines until the content is about the requested number
  of tokens shorter (`Memory` asks when all its blocks exceed its budget).

The block is bound to one hivemem session (`session_id`) of the handle's namespace; give
each conversation's `Memory` its block, or share one session between conversations to
let them remember each other. Messages are written once each time `Memory` flushes them.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.memory.memory import BaseMemoryBlock
from pydantic import ConfigDict, Field

from hivemem import NotFound
from hivemem.integrations.handle import MemoryHandle, in_thread

_ROLES = {MessageRole.USER: "user", MessageRole.ASSISTANT: "assistant",
          MessageRole.SYSTEM: "system", MessageRole.DEVELOPER: "system",
          MessageRole.TOOL: "tool", MessageRole.FUNCTION: "tool",
          MessageRole.CHATBOT: "assistant", MessageRole.MODEL: "assistant"}
_CHARS_PER_TOKEN = 4  # the estimate atruncate works with


class HivememMemoryBlock(BaseMemoryBlock[str]):
    """``Memory.from_defaults(memory_blocks=[HivememMemoryBlock(memory=handle,
    session_id="chat-1")])``. `memory`: a scoped handle (embedded
    ``MemoryClient.local(...).scoped(...)`` or remote ``hivemem.connect(...)``)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str = Field(default="hivemem", description="The block's name in the prompt.")
    description: str | None = Field(
        default="What hivemem recalls for the conversation: earlier turns and facts.")
    memory: Any = Field(exclude=True, description="The scoped hivemem handle.")
    session_id: str = Field(description="The hivemem session the block writes and recalls.")
    token_budget: int | None = Field(default=None, description="Recall's token budget.")
    preset: str | None = Field(default=None, description="Recall's preset.")

    @property
    def handle(self) -> MemoryHandle:
        handle: MemoryHandle = self.memory
        return handle

    def _rows(self, messages: list[ChatMessage]) -> list[dict[str, Any]]:
        rows = []
        for message in messages:
            text = (message.content or "").strip()
            if text:
                rows.append({"session_id": self.session_id, "content": text,
                             "role": _ROLES.get(message.role, "user")})
        return rows

    def remember(self, messages: list[ChatMessage]) -> None:
        rows = self._rows(messages)
        if rows:
            self.handle.ingest_many(rows)

    def recall(self, messages: list[ChatMessage] | None) -> str:
        asked = [m for m in messages or [] if m.role == MessageRole.USER and m.content]
        if not asked:
            return ""
        try:
            result = self.handle.recall(self.session_id, str(asked[-1].content),
                                        self.token_budget, preset=self.preset)
        except NotFound:
            return ""
        return result.render()

    async def _aput(self, messages: list[ChatMessage]) -> None:
        await in_thread(self.remember, list(messages))

    async def _aget(self, messages: list[ChatMessage] | None = None,
                    **block_kwargs: Any) -> str:
        return await in_thread(self.recall, messages)

    async def atruncate(self, content: str, tokens_to_truncate: int) -> str | None:
        lines = content.splitlines()
        drop = tokens_to_truncate * _CHARS_PER_TOKEN
        while lines and drop > 0:
            drop -= len(lines.pop(0)) + 1
        return "\n".join(lines) or None
