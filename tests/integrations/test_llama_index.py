"""The LlamaIndex adapter with the real llama-index-core: a `Memory` with the hivemem block
under a chat engine (LlamaIndex's MockLLM, which echoes its prompt: no network), so what
the block recalls is seen in what the model was given."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.llms import MockLLM
from llama_index.core.memory import Memory

from hivemem import ScopedMemory
from hivemem.integrations.llama_index import HivememMemoryBlock


def test_flushed_messages_become_turns_and_come_back_as_recall(memory: ScopedMemory) -> None:
    block = HivememMemoryBlock(memory=memory, session_id="li-1", token_budget=400)

    async def run() -> None:
        assert await block.aget([ChatMessage(role="user", content="anything?")]) == ""
        await block.aput([
            ChatMessage(role=MessageRole.USER, content="Our staging database is Postgres 16"),
            ChatMessage(role=MessageRole.ASSISTANT, content="Noted, Postgres 16 on staging."),
            ChatMessage(role=MessageRole.USER, content="   "),
        ])
        memory.wait_until_processed("li-1", 10)
        got = await block.aget([ChatMessage(role="user", content="Which database on staging?")])
        assert "Postgres 16" in got
        shorter = await block.atruncate(got, 10)
        assert shorter is None or len(shorter) < len(got)

    asyncio.run(run())
    turns = memory.timeline("li-1", kinds=["turn"])
    assert [(t.detail["role"], t.summary) for t in turns] == [
        ("user", "Our staging database is Postgres 16"),
        ("assistant", "Noted, Postgres 16 on staging.")]


def _chat(blocks: list[HivememMemoryBlock]) -> SimpleChatEngine:
    chat_memory = Memory.from_defaults(
        session_id="li-2", token_limit=60, chat_history_token_ratio=0.5,
        token_flush_size=20, memory_blocks=blocks)
    engine = SimpleChatEngine.from_defaults(llm=MockLLM(), memory=chat_memory)
    engine.chat("Remember this: the office wifi password is blue-otter-42.")
    for i in range(4):  # push the first exchange out of the short-term window
        engine.chat(f"Filler message number {i} about nothing in particular at all.")
    return engine


def test_a_chat_engine_remembers_beyond_its_short_term_window(memory: ScopedMemory) -> None:
    # Without the block, the first exchange has left the short-term window: forgotten.
    assert "blue-otter-42" not in str(_chat([]).chat("What is the office wifi password?"))
    engine = _chat([HivememMemoryBlock(memory=memory, session_id="li-2")])
    memory.wait_until_processed("li-2", 10)
    flushed = memory.timeline("li-2", kinds=["turn"])
    assert any("blue-otter-42" in t.summary for t in flushed), "flushed into hivemem"
    answer = engine.chat("What is the office wifi password?")
    # MockLLM echoes its prompt: the memory block's recall was in it.
    assert "blue-otter-42" in str(answer)
