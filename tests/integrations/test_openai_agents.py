"""The OpenAI Agents SDK adapter with the real SDK: a Runner with a HivememSession (a
scripted Model, no network), the session protocol (get/add/pop/clear), and the budgeted
recall given to the agent as its instructions."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import (
    Agent,
    Model,
    ModelResponse,
    RunConfig,
    Runner,
    Usage,
    function_tool,
    set_tracing_disabled,
)
from agents.memory import Session
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from hivemem import ScopedMemory
from hivemem.integrations.openai_agents import HivememSession, memory_instructions

set_tracing_disabled(True)


def _say(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id="msg_1", type="message", role="assistant", status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])])


class ScriptedModel(Model):
    """Answers from a script and records what it was given (instructions and input)."""

    def __init__(self, script: list[list[Any]]) -> None:
        self.script = list(script)
        self.calls: list[tuple[str | None, Any]] = []

    async def get_response(self, system_instructions: str | None, input: Any,
                           *args: Any, **kwargs: Any) -> ModelResponse:
        self.calls.append((system_instructions, input))
        return ModelResponse(output=self.script.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError


def test_it_is_a_session() -> None:
    assert isinstance(HivememSession("s", object()), Session)  # type: ignore[arg-type]


def test_add_get_pop_clear(memory: ScopedMemory) -> None:
    session = HivememSession("conv-1", memory)

    async def run() -> None:
        assert await session.get_items() == []
        assert await session.pop_item() is None
        call = {"type": "function_call", "call_id": "c1", "name": "weather",
                "arguments": '{"city": "Lyon"}'}
        await session.add_items([
            {"role": "user", "content": "What is the weather in Lyon?"},
            call,
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
            {"type": "message", "role": "assistant", "id": "m1", "status": "completed",
             "content": [{"type": "output_text", "text": "Sunny.", "annotations": []}]},
        ])
        items = await session.get_items()
        assert items == [
            {"role": "user", "content": "What is the weather in Lyon?"}, call,
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
            {"role": "assistant", "content": "Sunny."}]
        assert await session.get_items(limit=2) == items[2:]
        assert await session.pop_item() == {"role": "assistant", "content": "Sunny."}
        assert await session.get_items() == items[:3]
        await session.clear_session()
        assert await session.get_items() == []
        await session.add_items([{"role": "user", "content": "Fresh start"}])
        assert await session.get_items() == [{"role": "user", "content": "Fresh start"}]

    asyncio.run(run())
    # The turns are hivemem's: the text messages as turns of their role.
    roles = [t.detail["role"] for t in memory.timeline("conv-1", kinds=["turn"])]
    assert roles[:4] == ["user", "tool", "tool", "assistant"]


def test_the_recall_leaves_popped_items_out(memory: ScopedMemory) -> None:
    session = HivememSession("conv-pop", memory)
    asyncio.run(session.add_items([
        {"role": "user", "content": "We deploy the billing service on Fridays"},
        {"role": "assistant", "content": "Noted: the billing team likes teal dashboards"}]))
    asyncio.run(session.pop_item())
    assert session.popped() is not None and len(session.popped() or ()) == 1
    for query in ("billing service deploy dashboards", None):
        text = session.context(query)
        assert "Fridays" in text and "teal" not in text and "hivemem_session" not in text


def test_the_context_checks_the_scope_once_and_keeps_to_it(
        writer: ScopedMemory, agent_key: ScopedMemory, scope_checks: list[str]) -> None:
    """The context for a query is recall plus the popped turns (the key index), made as
    one call that checks the session against the scope once; an agent key does not read
    another agent's private turns through it."""
    writer.ingest("conv-private", "user", "a's secret: the vault code is 4711",
                  visibility="private")
    session = HivememSession("conv-private", writer)
    asyncio.run(session.add_items([{"role": "user", "content": "the vault is in the cellar"},
                                   {"role": "assistant", "content": "noted, a blue vault"}]))
    asyncio.run(session.pop_item())
    assert "4711" in session.context("the vault code")  # its own private turn
    scope_checks.clear()
    text = HivememSession("conv-private", agent_key).context("the vault code")
    assert "cellar" in text and "4711" not in text and "blue" not in text
    assert scope_checks == ["conv-private"]


def test_a_runner_keeps_the_conversation_and_recalls_it_as_instructions(
    memory: ScopedMemory,
) -> None:
    @function_tool
    def lookup_budget(project: str) -> str:
        """The budget of a project."""
        return f"{project}: 40k euros"

    model = ScriptedModel([
        [ResponseFunctionToolCall(type="function_call", call_id="call-1",
                                  name="lookup_budget", arguments=json.dumps(
                                      {"project": "apollo"}), id="fc-1")],
        [_say("Apollo's budget is 40k euros; we agreed to cap it there.")],
        [_say("Noted, the launch is in March.")],
        [_say("The cap is 40k euros.")],
    ])
    session = HivememSession("run-1", memory)
    agent = Agent(name="planner", model=model, tools=[lookup_budget],
                  instructions=memory_instructions(session, "You plan projects."))

    async def run() -> None:
        first = await Runner.run(agent, "What is the budget of apollo? Let's cap it.",
                                 session=session, run_config=RunConfig())
        assert "40k" in first.final_output
        await Runner.run(agent, "The launch is in March.", session=session)
        await Runner.run(agent, "What budget cap did we agree for apollo?", session=session)

    asyncio.run(run())
    # Run 2 saw run 1's history (the tool call and its output too) from the session.
    second_input = model.calls[2][1]
    assert {"role": "user", "content": "What is the budget of apollo? Let's cap it."} in (
        second_input)
    assert any(i.get("type") == "function_call_output" and "40k" in i.get("output", "")
               for i in second_input)
    # Run 3's instructions carry what hivemem recalled for its question.
    instructions = model.calls[3][0] or ""
    assert instructions.startswith("You plan projects.")
    assert "cap it there" in instructions
    stored = asyncio.run(session.get_items())
    assert stored[-1] == {"role": "assistant", "content": "The cap is 40k euros."}
    assert len(stored) == 8  # 3 questions, 3 answers, the tool call and its output


def test_it_answers_what_the_sdks_sqlite_session_answers(memory: ScopedMemory) -> None:
    """The SDK publishes no session conformance suite; its own SQLiteSession is the
    reference: the same calls, the same answers (for items in the input format, which
    is what the session stores messages as)."""
    from agents import SQLiteSession

    reference, session = SQLiteSession("ref"), HivememSession("differential", memory)
    call = {"type": "function_call", "call_id": "c9", "name": "f", "arguments": "{}"}
    script: list[tuple[str, tuple[Any, ...]]] = [
        ("get_items", ()), ("pop_item", ()),
        ("add_items", ([{"role": "user", "content": "one"}, call],)),
        ("add_items", ([{"type": "function_call_output", "call_id": "c9", "output": "ok"},
                        {"role": "assistant", "content": "two"}],)),
        ("get_items", ()), ("get_items", (1,)), ("get_items", (3,)),
        ("pop_item", ()), ("get_items", ()),
        ("clear_session", ()), ("get_items", ()), ("pop_item", ()),
        ("add_items", ([{"role": "user", "content": "three"}],)), ("get_items", ()),
    ]

    async def run() -> None:
        for name, args in script:
            expected = await getattr(reference, name)(*args)
            assert await getattr(session, name)(*args) == expected, (name, args)

    asyncio.run(run())
