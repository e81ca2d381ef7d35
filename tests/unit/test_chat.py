"""`hivemem chat`: the REPL driven through stdin against a scripted OpenAI-compatible server."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hivemem.cli.main import cli
from tests.support.scripted_llm import Reply, ScriptedLLM

REFLECTED = {"actions": [{
    "op": "add", "target": None, "content": "The team uses PostgreSQL as the database.",
    "kind": "decision", "subject": "database", "confidence": 0.9, "reason": None,
    "source_turn_ids": [], "agent_id": None,
}]}


def _answer(request: Any) -> Reply:
    """Reflection requests get a fact; chat requests get an answer naming what they saw."""
    system = request["messages"][0]["content"]
    if system.startswith("You are the long-term memory"):
        return Reply(text=json.dumps(REFLECTED))
    question = request["messages"][-1]["content"]
    return Reply(text=f"Answer to: {question}")


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM(default=Reply(body=_answer)) as server:
        yield server


@pytest.fixture
def workspace(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in list(os.environ):
        if name.startswith("HIVEMEM_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HIVEMEM_EMBEDDING__PROVIDER", "hashing")
    monkeypatch.setenv("HIVEMEM_EMBEDDING__DIM", "1024")
    monkeypatch.setenv("HIVEMEM_WORKER__BLOCK_MS", "50")
    monkeypatch.chdir(tmp_path)
    assert CliRunner().invoke(cli, ["init"]).exit_code == 0
    return tmp_path


def _configure(monkeypatch: pytest.MonkeyPatch, llm: ScriptedLLM) -> None:
    monkeypatch.setenv("HIVEMEM_LLM__PROVIDER", "openai")
    monkeypatch.setenv("HIVEMEM_LLM__BASE_URL", llm.url)
    monkeypatch.setenv("HIVEMEM_LLM__MODEL", "scripted-chat")
    monkeypatch.setenv("HIVEMEM_LLM__MAX_RETRIES", "0")


def _chat_requests(llm: ScriptedLLM) -> list[Any]:
    return [r.json for r in llm.requests
            if not r.json["messages"][0]["content"].startswith("You are the long-term memory")]


def test_without_an_llm_it_explains_and_exits_cleanly(workspace: Path) -> None:
    result = CliRunner().invoke(cli, ["chat"], input="hello\n")
    assert result.exit_code == 0
    assert "HIVEMEM_LLM__BASE_URL" in result.stdout
    status = json.loads(CliRunner().invoke(cli, ["status", "--json"]).stdout)
    assert status["sessions"] == {}  # nothing was stored


def test_repl_answers_with_memory_and_runs_slash_commands(
    workspace: Path, llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    _configure(monkeypatch, llm)
    script = "\n".join([
        "We decided to use PostgreSQL for the database.",
        "/debug",
        "Which database do we use?",
        "/recall database",
        "/recall",
        "/stats",
        "/episode",
        "/facts",
        "/help",
        "/bogus",
        "/quit",
        "never read",
    ]) + "\n"
    result = CliRunner().invoke(cli, ["chat", "--session", "proj"], input=script,
                                catch_exceptions=False)
    out = result.stdout
    assert result.exit_code == 0, out
    assert "New session proj" in out
    assert "Answer to: We decided to use PostgreSQL for the database." in out
    assert "debug on" in out and "recalled for this answer" in out
    chats = _chat_requests(llm)
    assert len(chats) == 2  # "never read" came after /quit
    assert chats[0]["model"] == "scripted-chat" and "response_format" not in chats[0]
    # The conversation so far goes as messages, then the new question; the recalled memory
    # (in the system prompt) leaves out what those messages already hold, and the question
    # itself is not in its own context.
    assert chats[0]["messages"][1:] == [
        {"role": "user", "content": "We decided to use PostgreSQL for the database."}]
    assert chats[1]["messages"][1:] == [
        {"role": "user", "content": "We decided to use PostgreSQL for the database."},
        {"role": "assistant", "content": "Answer to: We decided to use PostgreSQL for the"
                                         " database."},
        {"role": "user", "content": "Which database do we use?"},
    ]
    second_system = chats[1]["messages"][0]["content"]
    assert "PostgreSQL" not in second_system
    assert "Which database do we use?" not in second_system
    assert "usage: /recall <query>" in out
    assert "session proj: 4 turns" in out
    assert "episode closed and reflected" in out
    # /facts: the decision, as the change rules keep it (an LLM copy of it is dropped)
    assert "│ active │ decision │ database │" in out
    assert "/episode" in out and "unknown command /bogus" in out
    assert "bye: session proj is remembered." in out


def test_resuming_a_session_keeps_its_memory(
    workspace: Path, llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    _configure(monkeypatch, llm)
    first = CliRunner().invoke(cli, ["chat", "--session", "proj"],
                               input="The staging server is called falcon.\n")
    assert first.exit_code == 0, first.stdout  # end of input leaves too
    again = CliRunner().invoke(cli, ["chat", "--session", "proj"],
                               input="What is the staging server called?\n/quit\n")
    assert again.exit_code == 0, again.stdout
    assert "Resuming session proj: 2 turns" in again.stdout
    # The resumed conversation is sent as it was, then the new question.
    assert _chat_requests(llm)[-1]["messages"][1:] == [
        {"role": "user", "content": "The staging server is called falcon."},
        {"role": "assistant", "content": "Answer to: The staging server is called falcon."},
        {"role": "user", "content": "What is the staging server called?"},
    ]


def test_the_history_stays_within_its_budget_and_recall_brings_back_the_rest(
    workspace: Path, llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    _configure(monkeypatch, llm)
    lines = ["The staging server is called falcon and runs Debian twelve.",
             "Lunch today is pasta with tomatoes and basil, as usual.",
             "The release train leaves every second Tuesday at noon.",
             "What is the staging server called?"]
    result = CliRunner().invoke(cli, ["chat", "--session", "tight", "--history", "40"],
                                input="\n".join(lines) + "\n/quit\n", catch_exceptions=False)
    assert result.exit_code == 0, result.stdout
    last = _chat_requests(llm)[-1]["messages"]
    sent = [m["content"] for m in last[1:]]
    # Only the newest exchange fits 40 tokens (and the question is always sent) ...
    assert sent == [lines[2], f"Answer to: {lines[2]}", lines[3]]
    assert [m["role"] for m in last[1:]] == ["user", "assistant", "user"]
    # ... and the falcon turn that fell out of the window comes back through recall.
    assert "falcon" in last[0]["content"]


def test_a_conversation_window_starts_with_the_user_and_joins_one_roles_messages() -> None:
    from hivemem.cli.chat_history import Conversation

    talk = Conversation(budget=1000)
    talk.add("assistant", "hello, how can I help?", "a0")
    talk.add("user", "first question", "u1")
    talk.add("user", "asked again (no answer came)", "u2")
    talk.add("assistant", "the answer", "a2")
    messages, ids = talk.window(then="next question")
    assert messages == [
        {"role": "user", "content": "first question\n\nasked again (no answer came)"},
        {"role": "assistant", "content": "the answer"},
        {"role": "user", "content": "next question"},
    ]
    assert ids == {"u1", "u2", "a2"}
    assert Conversation(budget=0, said=talk.said).window(then="q") == (
        [{"role": "user", "content": "q"}], set())
