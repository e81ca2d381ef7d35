"""The Google ADK adapter with the real google-adk: an agent (a scripted BaseLlm, no
network) whose Runner uses HivememMemoryService: one conversation is added to memory, and
a later session's PreloadMemoryTool brings the decision back into the model's request."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import pytest

pytest.importorskip("google.adk")

from google.adk.agents import LlmAgent
from google.adk.events.event import Event
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.tools.preload_memory_tool import PreloadMemoryTool
from google.genai import types

from hivemem import MemoryClient, ScopedMemory
from hivemem.integrations.google_adk import HivememMemoryService, adk_session


class ScriptedLlm(BaseLlm):
    """Answers from a script; keeps the text of every request it got."""

    answers: list[str]
    requests: list[str] = []

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False,
    ) -> AsyncGenerator[LlmResponse, None]:
        seen = [p.text for c in llm_request.contents for p in (c.parts or []) if p.text]
        self.requests.append("\n".join(seen))
        yield LlmResponse(content=types.Content(
            role="model", parts=[types.Part.from_text(text=self.answers.pop(0))]))


def _text(text: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part.from_text(text=text)])


def test_an_agent_remembers_a_decision_across_sessions(memory: ScopedMemory) -> None:
    llm = ScriptedLlm(model="scripted", answers=[
        "Agreed: the release train leaves every second Thursday.", "Every second Thursday."],
        requests=[])
    agent = LlmAgent(name="planner", model=llm, instruction="You plan releases.",
                     tools=[PreloadMemoryTool()])
    service = HivememMemoryService(memory)
    sessions = InMemorySessionService()
    runner = Runner(app_name="releases", agent=agent, session_service=sessions,
                    memory_service=service)

    async def run() -> None:
        first = await sessions.create_session(app_name="releases", user_id="maria")
        async for _ in runner.run_async(user_id="maria", session_id=first.id, new_message=_text(
                "Decision: we ship the release train every second Thursday.")):
            pass
        done = await sessions.get_session(app_name="releases", user_id="maria",
                                          session_id=first.id)
        assert done is not None
        await service.add_session_to_memory(done)
        await service.add_session_to_memory(done)  # again: nothing is written twice
        second = await sessions.create_session(app_name="releases", user_id="maria")
        async for _ in runner.run_async(user_id="maria", session_id=second.id,
                                        new_message=_text("When do we ship the release?")):
            pass
        # The timeline shows stored turns: the first session's must be through the pipeline.
        memory.wait_until_processed(adk_session("releases", "maria", first.id), timeout=30)
        turns = memory.timeline(adk_session("releases", "maria", first.id), kinds=["turn"])
        assert [(t.detail["role"], t.summary) for t in turns] == [
            ("user", "Decision: we ship the release train every second Thursday."),
            ("assistant", "Agreed: the release train leaves every second Thursday.")]

    asyncio.run(run())
    assert "<PAST_CONVERSATIONS>" not in llm.requests[0]  # nothing remembered yet
    assert "<PAST_CONVERSATIONS>" in llm.requests[1]
    assert "we ship the release train every second Thursday" in llm.requests[1]


def test_search_events_memories_delete_and_users(embedded: MemoryClient,
                                                 namespace: str) -> None:
    service = HivememMemoryService(embedded.scoped(namespace=namespace, agent_id="a"))
    stranger = HivememMemoryService(embedded.scoped(namespace=namespace + "-x"))

    async def run() -> None:
        await service.add_events_to_memory(
            app_name="app", user_id="u1", session_id="s1",
            events=[Event(author="user", content=_text("My cat is called Miso")),
                    Event(author="bot", content=types.Content(role="model", parts=[
                        types.Part.from_text(text="Miso is a lovely name")])),
                    Event(author="user")])  # no content: nothing to remember
        await service.add_memory(app_name="app", user_id="u1", memories=[
            MemoryEntry(content=_text("Allergic to peanuts"), custom_metadata={"k": 1})])
        await service.add_events_to_memory(app_name="app", user_id="u2", session_id="s9",
                                           events=[Event(author="user",
                                                         content=_text("My cat is Tom"))])
        found = await service.search_memory(app_name="app", user_id="u1",
                                            query="what is my cat called?")
        texts = [m.content.parts[0].text for m in found.memories if m.content.parts]
        assert "My cat is called Miso" in texts
        assert "My cat is Tom" not in texts  # another user's memory
        authors = {m.content.parts[0].text: m.author for m in found.memories
                   if m.content.parts}
        assert authors["Miso is a lovely name"] == "bot"
        peanuts = await service.search_memory(app_name="app", user_id="u1",
                                              query="peanuts allergy")
        assert any("peanuts" in (m.content.parts[0].text or "") for m in peanuts.memories
                   if m.content.parts)
        miso = next(m for m in found.memories if m.content.parts
                    and m.content.parts[0].text == "My cat is called Miso")
        await service.delete_memory(app_name="app", user_id="u1", memory_id=miso.id)
        after = await service.search_memory(app_name="app", user_id="u1",
                                            query="what is my cat called?")
        assert miso.id not in {m.id for m in after.memories}
        other = await stranger.search_memory(app_name="app", user_id="u1",
                                             query="what is my cat called?")
        assert other.memories == []

    asyncio.run(run())


def test_a_search_reuses_the_session_listing_for_list_cache_seconds(
        memory: ScopedMemory, monkeypatch: pytest.MonkeyPatch) -> None:
    """A search learns the user's sessions from the namespace's listing, listed again
    once `list_cache` seconds old: this service's own additions show at once, another
    process's (here another service) within that time."""
    from hivemem.integrations import handle

    clock = [100.0]
    monkeypatch.setattr(handle.time, "monotonic", lambda: clock[0])
    mine, theirs = HivememMemoryService(memory), HivememMemoryService(memory)
    listed: list[int] = []
    sessions = memory.sessions
    monkeypatch.setattr(memory, "sessions", lambda: listed.append(1) or sessions())

    def add(service: HivememMemoryService, session_id: str, text: str) -> None:
        asyncio.run(service.add_events_to_memory(
            app_name="app", user_id="u", session_id=session_id,
            events=[Event(author="user", content=_text(text))]))

    def found() -> set[str]:
        answer = asyncio.run(mine.search_memory(app_name="app", user_id="u",
                                                query="which colour is the kite?"))
        return {m.content.parts[0].text or "" for m in answer.memories if m.content.parts}

    add(mine, "s1", "The kite is red")
    assert "The kite is red" in found()
    add(theirs, "s2", "The kite is green")  # another service: not listed yet
    add(mine, "s3", "The kite is blue")  # this service: at once
    assert {"The kite is red", "The kite is blue"} <= found()
    assert "The kite is green" not in found()
    assert len(listed) == 1
    clock[0] += 1.0
    assert "The kite is green" in found()
    assert len(listed) == 2
    mine.list_cache = 0
    add(theirs, "s4", "The kite is yellow")
    assert "The kite is yellow" in found()


def test_session_ids_are_escaped() -> None:
    assert adk_session("my app", "u@x", "s1") == "adk.my:0020app.u:0040x.s1"
    with pytest.raises(Exception, match="user_id"):
        adk_session("app", "", "s1")


