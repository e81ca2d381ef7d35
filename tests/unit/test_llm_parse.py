"""The LLM path with small local models: the outputs they were seen to produce, replayed by
a scripted LLM over HTTP (placeholders, aliases, wrapped ids, prompt copies, echoes)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from support.scripted_llm import Reply, ScriptedLLM

from hivemem.config import LLMConfig
from hivemem.domain.episode import Episode
from hivemem.domain.fact import Fact, FactKind
from hivemem.domain.models import Role, Turn
from hivemem.providers.llm import OpenAICompatibleReflector, build_prompt
from hivemem.providers.reflector import ReflectionRequest

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
TURN_IDS = ["9a1f0c3e5b7d4e2f8a6c0b1d3e5f7a9c", "3f9a2b7c1d0e4f5a6b8c9d0e1f2a3b4c"]
FACT_ID = "c0ffee00c0ffee00c0ffee00c0ffee00"
TEXTS = ["Let's go with Jenkins for CI.", "Actually, switch CI to GitHub Actions instead."]


def request(prior: bool = False, turns: int = 2) -> ReflectionRequest:
    rows = [(TURN_IDS[i % 2] if i < 2 else f"{i:032x}", TEXTS[i % 2]) for i in range(turns)]
    built = [Turn(turn_id=tid, session_id="s", role=Role.USER, content=text, seq=i + 1,
                  timestamp=T0 + timedelta(minutes=i), token_count=8)
             for i, (tid, text) in enumerate(rows)]
    episode = Episode(episode_id="ep", session_id="s", index=1,
                      turn_ids=tuple(t.turn_id for t in built), seq_start=1,
                      seq_end=len(built), started_at=T0, ended_at=built[-1].timestamp,
                      close_reason="manual")
    facts = [Fact(fact_id=FACT_ID, session_id="s", content="CI runs on Jenkins.",
                  kind=FactKind.DECISION, subject="ci", created_at=T0, valid_from=T0)]
    return ReflectionRequest(session_id="s", episode=episode, turns=built,
                             prior_facts=facts if prior else [])


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        yield server


def reflector(llm: ScriptedLLM, **overrides: Any) -> OpenAICompatibleReflector:
    values: dict[str, Any] = {"provider": "openai", "base_url": llm.url, "model": "qwen",
                              "timeout_s": 2.0, "max_retries": 0}
    values.update(overrides)
    return OpenAICompatibleReflector(LLMConfig(**values))


def reply(*actions: dict[str, Any]) -> Reply:
    return Reply(text=json.dumps({"actions": list(actions)}))


def test_the_prompt_shows_placeholders_and_short_aliases() -> None:
    prompt = build_prompt(request(prior=True))
    for example in ("PostgreSQL", "Use ", "Docker", "Ship the", "short answers"):
        assert example not in prompt.system
    assert '"<turn id>"' in prompt.system and "<slot>" in prompt.system
    assert "[t1]" in prompt.user and "[t2]" in prompt.user and "[f1]" in prompt.user
    assert TURN_IDS[0] not in prompt.user and FACT_ID not in prompt.user


@pytest.mark.parametrize("target", ["f1", "<f1>", "[f1]", '"f1"', f"<{FACT_ID}>",
                                    f"<{FACT_ID[:10]}...>"])
@pytest.mark.parametrize("source", ["t2", "<t2>", "[t2]", f"<{TURN_IDS[1]}>"])
def test_wrapped_ids_and_aliases_map_back(llm: ScriptedLLM, target: str, source: str) -> None:
    llm.push(reply({"op": "update", "target": target, "subject": "ci",
                    "content": "CI runs on GitHub Actions.", "source_turn_ids": [source]}))
    with reflector(llm) as r:
        result = r.reflect(request(prior=True))
    [action] = result.actions
    assert (action.op, action.target, action.source_turn_ids) == (
        "update", FACT_ID, [TURN_IDS[1]])


def test_an_unresolvable_update_becomes_an_add_on_its_slot(llm: ScriptedLLM) -> None:
    llm.push(reply({"op": "update", "target": "<turn id>", "subject": "ci",
                    "content": "CI runs on GitHub Actions.", "source_turn_ids": ["t2"]}))
    with reflector(llm) as r:
        result = r.reflect(request(prior=True))
    [action] = result.actions
    assert (action.op, action.target, action.subject) == ("add", None, "ci")
    assert result.dropped and "<turn id>" in result.dropped[0]


def test_a_copy_of_the_prompt_is_rejected(llm: ScriptedLLM) -> None:
    llm.push(reply(
        {"op": "add", "content": "Use PostgreSQL as the database.", "kind": "decision",
         "subject": "database", "source_turn_ids": ["<turn id>"]},
        {"op": "add", "content": "<the fact, one sentence>", "source_turn_ids": ["t1"]},
        {"op": "add", "content": "CI runs on GitHub Actions instead of Jenkins.",
         "subject": "ci", "source_turn_ids": ["t2"]},
    ))
    with reflector(llm) as r:
        result = r.reflect(request())
    assert [a.content for a in result.actions] == [
        "CI runs on GitHub Actions instead of Jenkins."]
    assert len([d for d in result.dropped if "not stated" in d]) == 2


def test_an_empty_list_in_prose_is_malformed_but_a_bare_one_is_fine(llm: ScriptedLLM) -> None:
    echo = 'If nothing is worth remembering, reply with exactly {"actions": []}.'
    llm.push(Reply(text=echo), reply({"op": "add", "content": "CI runs on GitHub Actions.",
                                      "source_turn_ids": ["t2"]}))
    with reflector(llm) as r:
        result = r.reflect(request())
    assert len(llm.requests) == 2  # the echo was sent back for repair
    assert [a.content for a in result.actions] == ["CI runs on GitHub Actions."]
    llm.push(Reply(text='```json\n{"actions": []}\n```'))
    with reflector(llm) as r:
        assert r.reflect(request()).actions == []
    assert len(llm.requests) == 3


def test_the_timeout_scales_with_the_expected_output(llm: ScriptedLLM) -> None:
    with reflector(llm, timeout_s=0.5) as r:
        assert r.timeout_for(request(turns=2)) == 0.5
        assert r.timeout_for(request(turns=12)) > 1.0
        # A long episode's answer may take longer than timeout_s: it is not cut off.
        llm.push(Reply(text='{"actions": []}', delay_s=0.8))
        assert r.reflect(request(turns=12)).actions == []
        # A short one's is.
        llm.push(Reply(text='{"actions": []}', delay_s=0.8))
        from hivemem.errors import RetryLater

        with pytest.raises(RetryLater):
            r.reflect(request(turns=2))
