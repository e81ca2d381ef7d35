"""LLM reflectors against a real local HTTP server that plays the model from a script."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import structlog
from pydantic import SecretStr
from support.scripted_llm import Reply, ScriptedLLM, error_body

from hivemem.domain.episode import Episode
from hivemem.domain.fact import Fact, FactKind
from hivemem.domain.models import Role, Turn
from hivemem.errors import HivememError, ProviderError, RetryLater
from hivemem.providers.llm import (
    AnthropicReflector,
    LLMConfig,
    LLMHTTPError,
    LLMOutputError,
    OpenAICompatibleReflector,
    build_prompt,
    build_reflector,
    parse_actions,
)
from hivemem.providers.reflector import ReflectionRequest

KEY = "sk-test-SECRET-0123456789abcdef"
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
PRIOR_DB = "a1b2c3d4e5f60718293a4b5c6d7e8f90"
PRIOR_STYLE = "0f9e8d7c6b5a49382716a5b4c3d2e1f0"


def make_turns() -> list[Turn]:
    rows = [
        ("t1", "planner", Role.ASSISTANT, "We will use MySQL for the database."),
        ("t2", None, Role.USER, "Actually, switch to PostgreSQL instead; we need JSONB."),
        ("t3", "coder", Role.ASSISTANT, "Done. The API stays REST, no GraphQL."),
    ]
    return [
        Turn(turn_id=tid, session_id="s1", agent_id=agent, role=role, content=text,
             timestamp=T0 + timedelta(minutes=i), seq=i + 1, token_count=len(text.split()))
        for i, (tid, agent, role, text) in enumerate(rows)
    ]


def make_request(prior: list[Fact] | None = None, max_facts: int = 10) -> ReflectionRequest:
    turns = make_turns()
    episode = Episode(episode_id="ep1", session_id="s1", index=1,
                      turn_ids=tuple(t.turn_id for t in turns), seq_start=1,
                      seq_end=len(turns), started_at=turns[0].timestamp,
                      ended_at=turns[-1].timestamp, close_reason="manual",
                      agent_ids=("planner", "coder"))
    return ReflectionRequest(session_id="s1", episode=episode, turns=turns,
                             prior_facts=prior or [], max_facts=max_facts)


def prior_facts() -> list[Fact]:
    return [
        Fact(fact_id=PRIOR_DB, session_id="s1", content="Use MySQL as the database.",
             kind=FactKind.DECISION, subject="database", created_at=T0, valid_from=T0),
        Fact(fact_id=PRIOR_STYLE, session_id="s1", content="The API is REST.",
             kind=FactKind.DECISION, subject="api style", created_at=T0, valid_from=T0),
    ]


def actions_json(*actions: dict[str, Any]) -> str:
    return json.dumps({"actions": list(actions)})


ADD_PG = {
    "op": "add", "target": None, "content": "Use PostgreSQL as the database.",
    "kind": "decision", "subject": "Database", "confidence": 0.9, "reason": None,
    "source_turn_ids": ["t2"], "agent_id": None,
}


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)
        time.sleep(seconds)


_SHARED: list[httpx.Client] = []


@pytest.fixture(scope="module", autouse=True)
def shared_client() -> Iterator[httpx.Client]:
    """One client for the module: building one (its TLS context) costs ~50-200 ms."""
    with httpx.Client() as client:
        _SHARED.append(client)
        yield client
        _SHARED.clear()


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        yield server


def config(llm: ScriptedLLM, provider: str = "openai", **overrides: Any) -> LLMConfig:
    values: dict[str, Any] = {
        "provider": provider, "base_url": llm.url, "model": "test-model",
        "api_key": SecretStr(KEY), "timeout_s": 2.0, "max_retries": 2,
        "backoff_initial_s": 0.01, "backoff_max_s": 0.05, "max_tokens": 512,
    }
    values.update(overrides)
    return LLMConfig(**values)


def reflector(llm: ScriptedLLM, provider: str = "openai", sleeps: Sleeps | None = None,
              **overrides: Any) -> Any:
    cfg = config(llm, provider, **overrides)
    cls = AnthropicReflector if provider == "anthropic" else OpenAICompatibleReflector
    return cls(cfg, _SHARED[0], sleep=sleeps if sleeps is not None else time.sleep)


# -- happy paths ---------------------------------------------------------------------------


def test_openai_request_shape_and_result(llm: ScriptedLLM) -> None:
    llm.push(Reply(text=actions_json(ADD_PG)))
    with reflector(llm) as r:
        result = r.reflect(make_request())
    [req] = llm.requests
    assert req.path == "/chat/completions"
    assert req.headers["authorization"] == f"Bearer {KEY}"
    body = req.json
    assert body["model"] == "test-model"
    assert body["response_format"] == {"type": "json_object"}
    assert body["temperature"] == 0.0 and body["max_tokens"] == 512
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert "decision" in body["messages"][0]["content"]
    user = body["messages"][1]["content"]
    assert "[t1] (planner, 2026-03-01T09:00:00+00:00) We will use MySQL" in user
    assert "[t2] (user, 2026-03-01T09:01:00+00:00) Actually" in user
    [action] = result.actions
    assert action.op == "add" and action.kind is FactKind.DECISION
    assert action.subject == "database" and action.content == "Use PostgreSQL as the database."
    assert action.source_turn_ids == ["t2"] and action.confidence == 0.9
    assert result.model == "test-model" and result.raw_output == actions_json(ADD_PG)
    assert r.name == "openai:test-model"


def test_openai_base_url_with_v1_and_no_key(llm: ScriptedLLM) -> None:
    with reflector(llm, base_url=llm.url + "/v1/", api_key=None, json_mode=False) as r:
        r.reflect(make_request())
    [req] = llm.requests
    assert req.path == "/v1/chat/completions"
    assert "authorization" not in req.headers and "response_format" not in req.json


def test_anthropic_request_shape_and_result(llm: ScriptedLLM) -> None:
    llm.push(Reply(text=actions_json({**ADD_PG, "agent_id": "coder", "source_turn_ids": ["t3"],
                                      "content": "The API stays REST.", "kind": "constraint",
                                      "subject": "api style"})))
    with reflector(llm, "anthropic") as r:
        result = r.reflect(make_request())
    [req] = llm.requests
    assert req.path == "/v1/messages"
    assert req.headers["x-api-key"] == KEY
    assert req.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in req.headers
    body = req.json
    assert body["model"] == "test-model" and body["max_tokens"] == 512
    assert "decision" in body["system"]
    assert [m["role"] for m in body["messages"]] == ["user"]
    assert "[t3] (coder," in body["messages"][0]["content"]
    [action] = result.actions
    assert (action.kind, action.subject, action.agent_id) == (
        FactKind.CONSTRAINT, "api style", "coder")
    assert r.name == "anthropic:test-model"


def test_anthropic_base_url_ending_in_v1(llm: ScriptedLLM) -> None:
    with reflector(llm, "anthropic", base_url=llm.url + "/v1") as r:
        r.reflect(make_request())
    assert [q.path for q in llm.requests] == ["/v1/messages"]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize(
    "text",
    [
        "```json\n" + actions_json(ADD_PG) + "\n```",
        "Sure! Here are the facts [t2]:\n\n" + actions_json(ADD_PG) + "\n\nLet me know {if} more.",
        "<think>the user switched {databases}</think>\n" + actions_json(ADD_PG),
        json.dumps([ADD_PG]),
        "Facts:\n```\n" + json.dumps([ADD_PG]) + "\n```",
        '{"actions": [{"op": "add", "content": "Use PostgreSQL as the database.", '
        '"kind": "decision", "subject": "database", "confidence": 0.9, '
        '"source_turn_ids": ["t2"],},],}',
    ],
    ids=["fenced", "chatty", "think", "bare-list", "fenced-list", "trailing-commas"],
)
def test_tolerant_parsing(llm: ScriptedLLM, provider: str, text: str) -> None:
    llm.push(Reply(text=text))
    with reflector(llm, provider) as r:
        result = r.reflect(make_request())
    assert len(llm.requests) == 1  # no repair needed
    [action] = result.actions
    assert (action.op, action.kind, action.subject) == ("add", FactKind.DECISION, "database")
    assert action.source_turn_ids == ["t2"]


def test_action_normalisation() -> None:
    text = actions_json(
        {"op": "ADD", "content": "The API stays REST on port 8080.", "kind": "architecture",
         "subject": "  Service   Port ", "confidence": "85", "source_turn_ids": "[t3]",
         "agent_id": "someone-else"},
        {"op": "add", "content": "Prefers PostgreSQL.", "kind": "preferences",
         "source_turn_ids": ["t1", "t99"], "agent_id": "planner", "confidence": 250},
        {"op": "add", "content": "   "},  # no content: invalid, dropped
        {"op": "merge", "content": "x"},  # unknown op: invalid, dropped
    )
    first, second = parse_actions(text, make_request())
    assert first.kind is FactKind.FACT and first.subject == "service port"
    assert first.confidence == 0.85 and first.source_turn_ids == ["t3"]
    assert first.agent_id == "coder"  # unknown agent: inferred from the source turn
    assert second.kind is FactKind.PREFERENCE and second.source_turn_ids == ["t1"]
    assert second.agent_id == "planner" and second.confidence == 1.0


def test_max_facts_caps_new_facts() -> None:
    # (contents the episode states: an add the turns do not support is rejected first)
    many = [{**ADD_PG, "content": f"PostgreSQL database number {i}."} for i in range(5)]
    actions = parse_actions(actions_json(*many), make_request(max_facts=2))
    assert [a.content for a in actions] == ["PostgreSQL database number 0.",
                                            "PostgreSQL database number 1."]


def test_empty_actions_is_valid(llm: ScriptedLLM) -> None:
    llm.push(Reply(text='{"actions": []}'))
    with reflector(llm) as r:
        assert r.reflect(make_request()).actions == []
    assert len(llm.requests) == 1


# -- transient failures --------------------------------------------------------------------


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_429_honours_retry_after_capped(llm: ScriptedLLM, provider: str) -> None:
    llm.push(
        Reply(status=429, headers={"Retry-After": "60"}, body=error_body("slow down")),
        Reply(status=429, headers={"Retry-After": "0.02"}, body=error_body("slow down")),
        Reply(text=actions_json(ADD_PG)),
    )
    sleeps = Sleeps()
    with reflector(llm, provider, sleeps=sleeps) as r:
        result = r.reflect(make_request())
    assert len(result.actions) == 1 and len(llm.requests) == 3
    assert sleeps == [0.05, 0.02]  # 60 s capped by backoff_max_s; then as asked


def test_5xx_retried_then_retry_later(llm: ScriptedLLM) -> None:
    llm.push(*[Reply(status=500, body=error_body("boom", "api_error")) for _ in range(3)])
    sleeps = Sleeps()
    with reflector(llm, sleeps=sleeps) as r, pytest.raises(RetryLater, match="HTTP 500"):
        r.reflect(make_request())
    assert len(llm.requests) == 3  # max_retries (2) + 1
    assert sleeps == [0.01, 0.02]  # exponential back-off


def test_5xx_then_success(llm: ScriptedLLM) -> None:
    llm.push(Reply(status=503), Reply(status=529, body=error_body("overloaded")),
             Reply(text=actions_json(ADD_PG)))
    with reflector(llm, "anthropic") as r:
        assert len(r.reflect(make_request()).actions) == 1


def test_timeout_retried_then_retry_later(llm: ScriptedLLM) -> None:
    llm.push(*[Reply(text=actions_json(ADD_PG), delay_s=2.0) for _ in range(3)])
    started = time.monotonic()
    with reflector(llm, timeout_s=0.15) as r, pytest.raises(RetryLater, match="timeout"):
        r.reflect(make_request())
    assert len(llm.requests) == 3
    assert time.monotonic() - started < 1.5


def test_timeout_then_success(llm: ScriptedLLM) -> None:
    llm.push(Reply(text="{}", delay_s=2.0), Reply(text=actions_json(ADD_PG)))
    with reflector(llm, timeout_s=0.15) as r:
        assert len(r.reflect(make_request()).actions) == 1
    assert len(llm.requests) == 2


def test_connection_refused_is_retry_later() -> None:
    with ScriptedLLM() as server:
        url = server.url
    cfg = LLMConfig(provider="openai", base_url=url, model="m", max_retries=1,
                    backoff_initial_s=0.01, backoff_max_s=0.01, timeout_s=1.0)
    with OpenAICompatibleReflector(cfg) as r, pytest.raises(RetryLater, match="connection"):
        r.reflect(make_request())


# -- permanent failures --------------------------------------------------------------------


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_401_is_provider_error_without_the_key(llm: ScriptedLLM, provider: str) -> None:
    # The server echoes the key back, as some gateways do: it must still not leak.
    llm.push(Reply(status=401, body=error_body(f"Incorrect API key provided: {KEY}",
                                               "authentication_error")))
    with (
        structlog.testing.capture_logs() as logs,
        reflector(llm, provider) as r,
        pytest.raises(ProviderError) as info,
    ):
        r.reflect(make_request())
    exc = info.value
    assert not isinstance(exc, RetryLater) and isinstance(exc, HivememError)
    assert isinstance(exc, LLMHTTPError) and exc.status == 401
    assert "401" in str(exc) and "Incorrect API key" in str(exc)
    assert KEY not in str(exc) and KEY not in repr(exc.args) and KEY not in exc.body
    assert len(llm.requests) == 1  # not retried
    assert logs and KEY not in repr(logs)
    assert KEY not in repr(r.config) and KEY not in str(r.config.model_dump())


def test_key_never_logged_on_success_or_retry(llm: ScriptedLLM) -> None:
    llm.push(Reply(status=500, body=f"upstream said {KEY}"), Reply(text=actions_json(ADD_PG)))
    with structlog.testing.capture_logs() as logs, reflector(llm) as r:
        r.reflect(make_request())
    assert any(e["event"] == "llm.call" and e["status"] == 500 for e in logs)
    assert any(e["event"] == "llm.call" and e["status"] == 200 and "ms" in e for e in logs)
    assert KEY not in repr(logs)


def test_malformed_then_repaired(llm: ScriptedLLM) -> None:
    bad = "The team moved to PostgreSQL. {not json"
    llm.push(Reply(text=bad), Reply(text=actions_json(ADD_PG)))
    with reflector(llm) as r:
        result = r.reflect(make_request())
    assert len(result.actions) == 1 and result.raw_output == actions_json(ADD_PG)
    first, repair = llm.requests
    messages = repair.json["messages"]
    assert messages[:2] == first.json["messages"]
    assert messages[2] == {"role": "assistant", "content": bad}
    assert messages[3]["role"] == "user" and "JSON" in messages[3]["content"]


def test_malformed_then_repaired_anthropic(llm: ScriptedLLM) -> None:
    llm.push(Reply(text=""), Reply(text=actions_json(ADD_PG)))
    with reflector(llm, "anthropic") as r:
        assert len(r.reflect(make_request()).actions) == 1
    roles = [m["role"] for m in llm.requests[1].json["messages"]]
    assert roles == ["user", "assistant", "user"]
    assert llm.requests[1].json["messages"][1]["content"] == "(empty reply)"


def test_malformed_twice_is_provider_error_with_raw_output(llm: ScriptedLLM) -> None:
    raw = "I could not decide. " + "blah " * 600  # > 2000 chars
    llm.push(Reply(text="no json here"), Reply(text=raw))
    with reflector(llm) as r, pytest.raises(ProviderError) as info:
        r.reflect(make_request())
    exc = info.value
    assert isinstance(exc, LLMOutputError)
    assert exc.raw_output == raw
    assert raw[:2000] in str(exc) and raw not in str(exc)
    assert len(llm.requests) == 2  # exactly one repair attempt


def test_all_invalid_actions_trigger_repair(llm: ScriptedLLM) -> None:
    llm.push(Reply(text='{"actions": [{"op": "merge"}, "text"]}'),
             Reply(text=actions_json(ADD_PG)))
    with reflector(llm) as r:
        assert len(r.reflect(make_request()).actions) == 1
    assert len(llm.requests) == 2


# -- response_format fallback --------------------------------------------------------------


def test_response_format_400_falls_back_and_remembers(llm: ScriptedLLM) -> None:
    llm.push(
        Reply(status=400, body=error_body("Unsupported parameter: 'response_format' "
                                          "is not supported with this model.")),
        Reply(text=actions_json(ADD_PG)),
        Reply(text=actions_json(ADD_PG)),
    )
    with reflector(llm) as r:
        assert len(r.reflect(make_request()).actions) == 1
        assert len(r.reflect(make_request()).actions) == 1
        assert r.response_format_supported is False
    with_rf = ["response_format" in q.json for q in llm.requests]
    assert with_rf == [True, False, False]


def test_other_400_is_provider_error(llm: ScriptedLLM) -> None:
    llm.push(Reply(status=400, body=error_body("model 'nope' not found")))
    with reflector(llm) as r, pytest.raises(LLMHTTPError, match="not found") as info:
        r.reflect(make_request())
    assert info.value.status == 400 and len(llm.requests) == 1
    assert r.response_format_supported is True


# -- consolidate mode ----------------------------------------------------------------------


def test_consolidate_prompt_lists_prior_facts() -> None:
    prompt = build_prompt(make_request(prior_facts()))
    # Facts are shown by short aliases (f1, f2) that the parser maps back to their ids.
    assert "[f1] decision, database: Use MySQL as the database." in prompt.user
    assert "[f2] decision, api style: The API is REST." in prompt.user
    for op in ('"update"', '"remove"', '"keep"', '"add"'):
        assert op in prompt.user
    extract = build_prompt(make_request())
    assert PRIOR_DB not in extract.user and '"update"' not in extract.user
    assert "at most 10" in extract.user
    assert "switch to" in prompt.system and '"actions"' in prompt.system


def test_consolidate_actions_and_unknown_targets_dropped(llm: ScriptedLLM) -> None:
    def answer(request_json: Any) -> Reply:
        user = request_json["messages"][-1]["content"]
        assert "[f1]" in user and "[f2]" in user  # the prompt names the facts by alias
        return Reply(text=actions_json(
            {"op": "update", "target": PRIOR_DB, "content": "Use PostgreSQL as the database.",
             "kind": "decision", "subject": "database", "reason": "switched for JSONB",
             "source_turn_ids": ["t2"]},
            {"op": "keep", "target": f"[{PRIOR_STYLE.upper()}]"},
            {"op": "remove", "target": "ffffffffffffffffffffffffffffffff", "reason": "gone"},
            {"op": "update", "target": "db-fact", "content": "Use SQLite."},
            {"op": "keep", "target": None},
            {"op": "remove", "target": PRIOR_DB, "reason": "second action on the same fact"},
            {"op": "add", "target": PRIOR_DB, "content": "The API stays REST, no GraphQL.",
             "kind": "constraint", "subject": "api style", "source_turn_ids": ["t3"]},
        ))

    llm.push(Reply(body=answer))
    with structlog.testing.capture_logs() as logs, reflector(llm) as r:
        result = r.reflect(make_request(prior_facts()))
    ops = [(a.op, a.target) for a in result.actions]
    assert ops == [("update", PRIOR_DB), ("keep", PRIOR_STYLE), ("add", None)]
    update = result.actions[0]
    assert update.reason == "switched for JSONB" and update.content is not None
    dropped = [e for e in logs if e["event"] == "llm.action_dropped"]
    assert len(dropped) == 4
    assert len(llm.requests) == 1


def test_extract_mode_drops_targeted_actions() -> None:
    text = actions_json({"op": "update", "target": PRIOR_DB, "content": "x"}, ADD_PG)
    assert [a.op for a in parse_actions(text, make_request())] == ["add"]


# -- wiring ----------------------------------------------------------------------------


def test_build_reflector(llm: ScriptedLLM) -> None:
    assert build_reflector(None) is None
    openai = build_reflector(config(llm))
    anthropic = build_reflector(config(llm, "anthropic"))
    assert isinstance(openai, OpenAICompatibleReflector)
    assert isinstance(anthropic, AnthropicReflector)
    with httpx.Client() as client:
        shared = build_reflector(config(llm), client=client)
        assert isinstance(shared, OpenAICompatibleReflector)
        shared.reflect(make_request())
        shared.close()  # a caller-owned client stays open
        assert not client.is_closed
    openai.close()
    anthropic.close()


def test_llm_config_from_settings_style_env(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic_settings import BaseSettings, SettingsConfigDict

    class S(BaseSettings):
        model_config = SettingsConfigDict(env_prefix="HIVEMEM_", env_nested_delimiter="__")
        llm: LLMConfig | None = None

    assert S().llm is None
    monkeypatch.setenv("HIVEMEM_LLM__PROVIDER", "anthropic")
    monkeypatch.setenv("HIVEMEM_LLM__BASE_URL", "https://api.anthropic.com")
    monkeypatch.setenv("HIVEMEM_LLM__MODEL", "claude-x")
    monkeypatch.setenv("HIVEMEM_LLM__API_KEY", KEY)
    loaded = S().llm
    assert loaded is not None and loaded.provider == "anthropic"
    assert loaded.api_key is not None and loaded.api_key.get_secret_value() == KEY
    assert KEY not in repr(loaded)


def test_scripted_server_records_and_404s(llm: ScriptedLLM) -> None:
    response = httpx.post(llm.url + "/nope", json={"a": 1})
    assert response.status_code == 404
    assert llm.requests[-1].path == "/nope" and llm.requests[-1].json == {"a": 1}
