"""The CrewAI adapter with the real crewai (installed in an environment of its own: crewai
1.15 pins mcp<2 and openai<3, see docs/integrations/crewai.md): a crew whose agent (a
scripted BaseLLM, no network) saves a task's result to hivemem, and a later crew's agent
gets it back in its prompt through the crew's memory."""

from __future__ import annotations

import os
from typing import Any

import pytest

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("OTEL_SDK_DISABLED", "true")
pytest.importorskip("crewai")

from crewai import Agent, Crew, Task
from crewai.llms.base_llm import BaseLLM

from hivemem import ScopedMemory
from hivemem.integrations.crewai import HivememCrewMemory


class ScriptedLLM(BaseLLM):
    """Answers from a script (a final answer each call); keeps every prompt it got."""

    def __init__(self, answers: list[str]) -> None:
        super().__init__(model="scripted")
        self._answers = list(answers)
        self.prompts: list[str] = []

    def call(self, messages: Any, *args: Any, **kwargs: Any) -> str:
        text = messages if isinstance(messages, str) else "\n".join(
            str(m.get("content", "")) for m in messages)
        self.prompts.append(text)
        return f"Thought: I know it.\nFinal Answer: {self._answers.pop(0)}"

    def supports_function_calling(self) -> bool:
        return False

    def get_context_window_size(self) -> int:
        return 8192


def _crew(llm: ScriptedLLM, memory: HivememCrewMemory, question: str) -> Crew:
    agent = Agent(role="Architect", goal="Decide and remember the architecture",
                  backstory="A careful architect.", llm=llm, allow_delegation=False)
    task = Task(description=question, expected_output="One sentence.", agent=agent)
    return Crew(agents=[agent], tasks=[task], memory=memory)


def test_a_crew_remembers_a_decision_for_a_later_crew(memory: ScopedMemory) -> None:
    crew_memory = HivememCrewMemory(memory=memory, session_id="crew-1")
    llm = ScriptedLLM(["We will use Postgres 16 for the orders service.",
                       "The orders service uses Postgres 16."])
    _crew(llm, crew_memory, "Choose the database for the orders service.").kickoff()
    memory.wait_until_processed("crew-1", 10)
    stored = memory.timeline("crew-1", kinds=["turn"])
    assert any("Postgres 16" in t.summary for t in stored), "the result went to hivemem"
    _crew(llm, crew_memory, "Which database does the orders service use?").kickoff()
    assert "Postgres 16" not in llm.prompts[0]
    assert "Relevant memories" in llm.prompts[1] and "Postgres 16" in llm.prompts[1]


def test_remember_recall_and_what_is_refused(memory: ScopedMemory) -> None:
    crew_memory = HivememCrewMemory(memory=memory, session_id="crew-2")
    assert crew_memory.recall("anything") == []
    record = crew_memory.remember("The staging cluster runs in Frankfurt",
                                  scope="/infra", categories=["location"], importance=0.9,
                                  agent_role="Ops")
    assert record is not None and record.scope == "/infra"
    crew_memory.remember_many(["Deploys happen on Tuesdays", "  "], scope="/process")
    memory.wait_until_processed("crew-2", 10)
    found = crew_memory.recall("where does staging run?", limit=3)
    assert found and found[0].record.content == "The staging cluster runs in Frankfurt"
    assert found[0].record.id == record.id
    assert found[0].record.categories == ["location"]
    assert found[0].record.importance == 0.9
    assert crew_memory.recall("where does staging run?", scope="/process") == [] or all(
        m.record.scope.startswith("/process") for m in crew_memory.recall(
            "where does staging run?", scope="/process"))
    assert crew_memory.extract_memories("  raw text ") == ["raw text"]
    with pytest.raises(NotImplementedError, match="append-only"):
        crew_memory.forget(record_ids=[record.id])
