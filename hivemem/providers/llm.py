"""LLM-backed reflectors: a closed episode (+ the session's known facts) in, fact actions out.

Two wire formats cover the usual deployments:

- `OpenAICompatibleReflector`: ``POST {base_url}/chat/completions`` (OpenAI, Ollama's ``/v1``,
  vLLM, llama.cpp server, most gateways);
- `AnthropicReflector`: ``POST {base_url}/v1/messages``.

Both share the prompt, the tolerant output parser (code fences, chatter around the JSON, a
bare list, unknown kinds) with one repair round-trip for malformed output, and the transport
policy: timeouts, connection errors, 429 and 5xx are retried in-process with exponential
back-off and then surface as `RetryLater` (the job is retried later); any other 4xx is a
`ProviderError`. The API key never appears in a log event or an error message.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from types import TracebackType
from typing import Any, Self

import httpx
import structlog
from pydantic import ValidationError as PydanticValidationError

from hivemem.config import LLMConfig
from hivemem.domain.fact import Fact, FactAction, FactKind
from hivemem.domain.models import Turn
from hivemem.errors import ProviderError, RetryLater
from hivemem.providers.reflector import ReflectionRequest, ReflectionResult, Reflector

log = structlog.get_logger(__name__)

ANTHROPIC_VERSION = "2023-06-01"
MAX_TURN_CHARS = 4000  # a turn's text in the prompt is cut here (turns may be 32 KiB)
RAW_IN_ERROR_CHARS = 2000  # the raw output quoted in a `ProviderError`
BODY_IN_ERROR_CHARS = 500  # an HTTP error body quoted in a `ProviderError`
REPAIR_QUOTE_CHARS = 8000  # the malformed output sent back in the repair request


class LLMHTTPError(ProviderError):
    """The endpoint answered with a non-retryable HTTP error (4xx other than 429)."""

    def __init__(self, message: str, status: int, body: str) -> None:
        super().__init__(message)
        self.status = status
        self.body = body  # redacted excerpt


class LLMOutputError(ProviderError):
    """The model's output could not be parsed, even after one repair attempt."""

    def __init__(self, message: str, raw_output: str) -> None:
        super().__init__(message)
        self.raw_output = raw_output


# --------------------------------------------------------------------------------------
# Prompt
# --------------------------------------------------------------------------------------

SYSTEM_PROMPT = """\
You are the long-term memory of a team of AI agents. You read one episode of a \
conversation (a few consecutive turns) and distil it into durable facts: what an agent \
joining the work later must know to continue it.

Kinds of fact:
- decision: a choice that was made ("Use PostgreSQL as the database.")
- constraint: a requirement or limit to respect ("The API must stay backwards compatible.")
- failure: something that was tried and did not work, and why ("Docker Swarm deploy failed: \
no IPv6.")
- goal: what the work is trying to achieve ("Ship the billing page by Friday.")
- preference: how a user or agent wants things done ("The user prefers short answers.")
- fact: any other durable information (names, versions, numbers, places)

Rules:
1. Detect changes first: "switch to", "instead", "no longer", "actually", "changed my mind", \
"not anymore", "replace". The latest statement wins: record the current state, and a change \
replaces the old fact rather than adding a second one beside it.
2. Each fact is one short self-contained sentence that makes sense without the conversation. \
Keep names, numbers and versions exactly.
3. subject: 1 to 4 lowercase words naming what the fact is about, e.g. "database", \
"api style", "frontend framework", "deploy target". Every version of a fact uses the same \
subject: reuse a known fact's subject when the fact is about the same thing.
4. Skip greetings, thanks, open questions, ideas that were not adopted, and anything that \
only matters for the current turn.
5. source_turn_ids: the ids (shown in square brackets) of the turns the fact comes from. \
Use only ids that are shown.
6. agent_id: the agent name shown for the turn that stated the fact; null when the turn \
shows only a role (user, assistant, system, tool).
7. confidence: from 0 to 1; about 0.9 when stated plainly, 0.6 when only implied.

Reply with one JSON object and nothing else (no code fences, no commentary):
{"actions": [{"op": "add", "target": null, "content": "Use PostgreSQL as the database.", \
"kind": "decision", "subject": "database", "confidence": 0.9, "reason": null, \
"source_turn_ids": ["<turn id>"], "agent_id": null}]}"""


@dataclass(frozen=True, slots=True)
class Prompt:
    system: str
    user: str


def render_turn(turn: Turn) -> str:
    """``[turn_id] (agent or role, timestamp) content``."""
    who = turn.agent_id or turn.role.value
    content = turn.content.strip()
    if len(content) > MAX_TURN_CHARS:
        content = content[:MAX_TURN_CHARS] + " [...truncated]"
    return f"[{turn.turn_id}] ({who}, {turn.timestamp.isoformat(timespec='seconds')}) {content}"


def render_fact(fact: Fact) -> str:
    subject = fact.subject or "-"
    return f"- [{fact.fact_id}] {fact.kind.value}, {subject}: {fact.content}"


def build_prompt(request: ReflectionRequest) -> Prompt:
    """One system prompt (the task and the schema) and one user message (the data)."""
    turns = "\n".join(render_turn(t) for t in request.turns)
    header = "Episode turns, oldest first ([turn id] (agent or role, time) text):"
    limit = request.max_facts
    if request.mode == "extract":
        user = (
            f"{header}\n{turns}\n\n"
            "Task: extract the facts worth remembering from this episode, each as an "
            f'"add" action (target null). Return at most {limit} actions. If nothing is '
            'worth remembering, return {"actions": []}.'
        )
        return Prompt(SYSTEM_PROMPT, user)
    known = "\n".join(render_fact(f) for f in request.prior_facts)
    user = (
        "Known facts ([fact id] kind, subject: content):\n"
        f"{known}\n\n{header}\n{turns}\n\n"
        "Task: compare the episode with the known facts, look for changes first, then "
        "return actions:\n"
        '- "update": a known fact changed. target = its fact id; content = the whole new '
        "version (not the difference); reason = what changed. The new version supersedes "
        "the old one.\n"
        '- "remove": a known fact is no longer true and nothing replaces it. target = its '
        "fact id; reason = why.\n"
        '- "keep": the episode confirms a known fact. target = its fact id.\n'
        '- "add": information no known fact covers. target = null.\n'
        "Known facts the episode does not touch may be left out: they stay as they are. "
        "A target must be one of the fact ids listed above. Return at most "
        f'{limit} "add" and "update" actions together. If nothing changes, return '
        '{"actions": []}.'
    )
    return Prompt(SYSTEM_PROMPT, user)


def repair_prompt(error: str) -> str:
    return (
        f"Your reply could not be used: {error}. Reply again with only the JSON object "
        '{"actions": [...]} in the schema described above: no code fences, no commentary.'
    )


# --------------------------------------------------------------------------------------
# Output parsing
# --------------------------------------------------------------------------------------


class MalformedOutput(ValueError):
    """The output holds no usable actions (internal: triggers the repair attempt)."""


_FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n?(.*?)```", re.DOTALL)
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_TRAILING_COMMA = re.compile(r",(\s*[}\]])")
_OPEN = re.compile(r"[\[{]")
_MISSING: Any = object()

_OPS: dict[str, str] = {
    **dict.fromkeys(("add", "new", "create", "insert"), "add"),
    **dict.fromkeys(("update", "replace", "supersede", "modify", "change", "revise"), "update"),
    **dict.fromkeys(("keep", "retain", "confirm", "unchanged", "noop", "none"), "keep"),
    **dict.fromkeys(("remove", "delete", "drop", "retract", "invalidate", "archive"), "remove"),
}
_KINDS = {k.value for k in FactKind}


def _decode_first(text: str) -> Any:
    """The first usable JSON value in `text`: an object with "actions", else a list of
    objects, else an object that looks like one action."""
    decoder = json.JSONDecoder()
    for variant in (text, _TRAILING_COMMA.sub(r"\1", text)):
        as_list: Any = _MISSING
        as_action: Any = _MISSING
        for match in _OPEN.finditer(variant):
            try:
                value, _ = decoder.raw_decode(variant, match.start())
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict):
                if "actions" in value or "facts" in value:
                    return value
                if "op" in value and as_action is _MISSING:
                    as_action = value
            elif (
                isinstance(value, list)
                and all(isinstance(v, dict) for v in value)
                and as_list is _MISSING
            ):
                as_list = value
        if as_list is not _MISSING:
            return as_list
        if as_action is not _MISSING:
            return as_action
    return _MISSING


def extract_json(text: str) -> Any:
    """Strip reasoning blocks and code fences, then take the first usable JSON value."""
    cleaned = _THINK.sub("", text).strip()
    if not cleaned:
        raise MalformedOutput("the reply was empty")
    for chunk in [m.group(1) for m in _FENCE.finditer(cleaned)] + [cleaned]:
        value = _decode_first(chunk)
        if value is not _MISSING:
            return value
    raise MalformedOutput("no JSON object with an actions list was found")


@dataclass(frozen=True, slots=True)
class _Known:
    fact_ids: dict[str, str]  # lower-case id -> id
    turn_ids: dict[str, str]
    turn_agent: dict[str, str | None]
    agents: frozenset[str]

    @classmethod
    def of(cls, request: ReflectionRequest) -> _Known:
        return cls(
            fact_ids={f.fact_id.lower(): f.fact_id for f in request.prior_facts},
            turn_ids={t.turn_id.lower(): t.turn_id for t in request.turns},
            turn_agent={t.turn_id: t.agent_id for t in request.turns},
            agents=frozenset(t.agent_id for t in request.turns if t.agent_id),
        )

    def fact_id(self, raw: Any) -> str | None:
        if not isinstance(raw, str):
            return None
        key = raw.strip().strip("[]").strip().lower()
        if not key:
            return None
        if key in self.fact_ids:
            return self.fact_ids[key]
        if len(key) >= 8:  # a model that shortened a long id: accept a unique prefix
            hits = [v for k, v in self.fact_ids.items() if k.startswith(key)]
            if len(hits) == 1:
                return hits[0]
        return None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    text = value if isinstance(value, str) else str(value)
    return text.strip() or None


def _kind(value: Any) -> str:
    text = (_text(value) or "").lower()
    if text in _KINDS:
        return text
    if text.rstrip("s") in _KINDS:
        return text.rstrip("s")
    return FactKind.FACT.value


def _confidence(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if math.isnan(number):
        return None
    if 1.0 < number <= 100.0:
        number /= 100.0  # a percentage
    return min(1.0, max(0.0, number))


def _turn_ids(value: Any, known: _Known) -> list[str]:
    items = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    out: list[str] = []
    for item in items:
        if not isinstance(item, str | int):
            continue
        key = str(item).strip().strip("[]").strip().lower()
        turn_id = known.turn_ids.get(key)
        if turn_id is not None and turn_id not in out:
            out.append(turn_id)
    return out


def _agent(value: Any, source: list[str], known: _Known) -> str | None:
    agent = _text(value)
    if agent is not None and agent in known.agents:
        return agent
    speakers = {known.turn_agent.get(t) for t in source}
    if len(speakers) == 1:
        return speakers.pop()
    return None


def _one_action(item: Any, known: _Known) -> FactAction | str:
    """A validated action, or why the item is invalid."""
    if not isinstance(item, dict):
        return "not an object"
    op = _OPS.get((_text(item.get("op") or item.get("action")) or "").lower())
    if op is None:
        return f"unknown op {item.get('op')!r}"
    content = _text(item.get("content") or item.get("fact") or item.get("text"))
    if op in ("add", "update") and content is None:
        return f"{op} without content"
    source = _turn_ids(item.get("source_turn_ids"), known)
    fields: dict[str, Any] = {
        "op": op,
        "target": _text(item.get("target")) if op != "add" else None,
        "content": content,
        "kind": _kind(item.get("kind")),
        "subject": " ".join((_text(item.get("subject")) or "").lower().split())[:80],
        "reason": _text(item.get("reason")),
        "source_turn_ids": source,
        "agent_id": _agent(item.get("agent_id"), source, known),
    }
    confidence = _confidence(item.get("confidence"))
    if confidence is not None:
        fields["confidence"] = confidence
    try:
        return FactAction.model_validate(fields)
    except PydanticValidationError as exc:
        return f"invalid: {exc.errors()[0].get('msg', 'validation error')}"


def parse_actions(text: str, request: ReflectionRequest) -> list[FactAction]:
    """The model's reply as fact actions. Raises `MalformedOutput` when nothing is usable."""
    value = extract_json(text)
    items: Any = value
    if isinstance(value, dict):
        items = value.get("actions", value.get("facts", _MISSING))
        if items is _MISSING:
            items = [value]  # a single action object
    if not isinstance(items, list):
        raise MalformedOutput('"actions" is not a list')
    known = _Known.of(request)
    actions: list[FactAction] = []
    invalid: list[str] = []
    targets: set[str] = set()
    new_facts = 0
    for item in items:
        parsed = _one_action(item, known)
        if isinstance(parsed, str):
            invalid.append(parsed)
            continue
        if parsed.op != "add":
            target = known.fact_id(parsed.target)
            if target is None:
                log.warning(
                    "llm.action_dropped",
                    op=parsed.op,
                    target=parsed.target,
                    why="target is not a known fact id",
                )
                continue
            if target in targets:
                log.warning(
                    "llm.action_dropped",
                    op=parsed.op,
                    target=target,
                    why="second action on the same target",
                )
                continue
            targets.add(target)
            parsed = parsed.model_copy(update={"target": target})
        if parsed.op in ("add", "update"):
            if new_facts >= request.max_facts:
                log.warning(
                    "llm.action_dropped",
                    op=parsed.op,
                    why="over max_facts",
                    max_facts=request.max_facts,
                )
                continue
            new_facts += 1
        actions.append(parsed)
    if invalid:
        log.warning("llm.actions_invalid", count=len(invalid), reasons=invalid[:5])
        if len(invalid) == len(items):
            raise MalformedOutput(f"no valid action ({'; '.join(invalid[:3])})")
    return actions


# --------------------------------------------------------------------------------------
# Transport
# --------------------------------------------------------------------------------------


def _retry_after(headers: httpx.Headers) -> float | None:
    """Seconds the server asked us to wait (Retry-After seconds or date, retry-after-ms)."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


class _LLMReflector:
    """Shared by both wire formats: retries, redaction, parsing with one repair."""

    provider: str = ""

    def __init__(
        self,
        config: LLMConfig,
        client: httpx.Client | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.config = config
        self.name = f"{self.provider}:{config.model}"
        self._owns_client = client is None
        self._client = client if client is not None else httpx.Client(timeout=config.timeout_s)
        self._sleep = sleep
        self._secret = config.api_key.get_secret_value() if config.api_key else ""

    # -- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- the protocol --------------------------------------------------------------------

    def reflect(self, request: ReflectionRequest) -> ReflectionResult:
        prompt = build_prompt(request)
        messages: list[dict[str, str]] = [{"role": "user", "content": prompt.user}]
        text = self._complete(prompt.system, messages)
        try:
            actions = parse_actions(text, request)
        except MalformedOutput as first:
            log.warning(
                "llm.malformed_output",
                model=self.config.model,
                error=str(first),
                chars=len(text),
                episode_id=request.episode.episode_id,
            )
            quoted = text[:REPAIR_QUOTE_CHARS] if text.strip() else "(empty reply)"
            repair = [
                *messages,
                {"role": "assistant", "content": quoted},
                {"role": "user", "content": repair_prompt(str(first))},
            ]
            text = self._complete(prompt.system, repair)
            try:
                actions = parse_actions(text, request)
            except MalformedOutput as second:
                raw = self._redact(text)
                raise LLMOutputError(
                    f"{self.name}: unusable output after one repair attempt ({second}); "
                    f"raw output: {raw[:RAW_IN_ERROR_CHARS]}",
                    raw_output=raw,
                ) from None
        log.info(
            "llm.reflected",
            model=self.config.model,
            mode=request.mode,
            actions=len(actions),
            episode_id=request.episode.episode_id,
        )
        return ReflectionResult(actions=actions, raw_output=text, model=self.config.model)

    def _complete(self, system: str, messages: Sequence[dict[str, str]]) -> str:
        raise NotImplementedError

    # -- HTTP ----------------------------------------------------------------------------

    def _redact(self, text: str) -> str:
        return text.replace(self._secret, "[redacted]") if self._secret else text

    def _post(self, url: str, headers: dict[str, str], payload: dict[str, Any]) -> Any:
        """POST with in-process retries for transient failures; the decoded JSON body."""
        cfg = self.config
        attempts = cfg.max_retries + 1
        for attempt in range(1, attempts + 1):
            started = time.perf_counter()
            wait: float | None = None
            try:
                response = self._client.post(
                    url, json=payload, headers=headers, timeout=cfg.timeout_s
                )
            except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as exc:
                ms = round((time.perf_counter() - started) * 1000)
                problem = "timeout" if isinstance(exc, httpx.TimeoutException) else "connection"
                log.info(
                    "llm.call",
                    provider=self.provider,
                    model=cfg.model,
                    ms=ms,
                    status=None,
                    error=type(exc).__name__,
                    attempt=attempt,
                )
            except httpx.HTTPError as exc:
                raise ProviderError(
                    f"{self.name}: request failed: {type(exc).__name__}: {self._redact(str(exc))}"
                ) from None
            else:
                ms = round((time.perf_counter() - started) * 1000)
                status = response.status_code
                log.info(
                    "llm.call",
                    provider=self.provider,
                    model=cfg.model,
                    ms=ms,
                    status=status,
                    attempt=attempt,
                )
                if status < 400:
                    try:
                        return response.json()
                    except ValueError:
                        raise ProviderError(
                            f"{self.name}: HTTP {status} with a non-JSON body: "
                            f"{self._excerpt(response)}"
                        ) from None
                if status != 429 and status < 500:
                    body = self._excerpt(response)
                    raise LLMHTTPError(f"{self.name}: HTTP {status}: {body}", status, body)
                problem = f"HTTP {status}"
                if status == 429:
                    wait = _retry_after(response.headers)
            if attempt == attempts:
                raise RetryLater(f"{self.name}: {problem} after {attempts} attempt(s)")
            if wait is None:
                wait = cfg.backoff_initial_s * 2 ** (attempt - 1)
            wait = min(wait, cfg.backoff_max_s)
            log.warning(
                "llm.retry",
                model=cfg.model,
                problem=problem,
                attempt=attempt,
                wait_s=round(wait, 3),
            )
            self._sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover

    def _excerpt(self, response: httpx.Response) -> str:
        try:
            text = response.text
        except (UnicodeDecodeError, LookupError):
            text = repr(response.content[:BODY_IN_ERROR_CHARS])
        return self._redact(" ".join(text.split()))[:BODY_IN_ERROR_CHARS]

    def _shape_error(self, body: Any) -> ProviderError:
        text = self._redact(json.dumps(body, ensure_ascii=False, default=str))
        return ProviderError(
            f"{self.name}: unexpected response shape: {text[:BODY_IN_ERROR_CHARS]}"
        )


class OpenAICompatibleReflector(_LLMReflector):
    """``POST {base_url}/chat/completions``: OpenAI, Ollama (/v1), vLLM, llama.cpp server."""

    provider = "openai"

    def __init__(
        self,
        config: LLMConfig,
        client: httpx.Client | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(config, client, sleep=sleep)
        self.url = config.base_url.rstrip("/") + "/chat/completions"
        # Cleared when the server rejects response_format; remembered for this instance.
        self.response_format_supported = True

    def _headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json", "accept": "application/json"}
        if self._secret:
            headers["authorization"] = f"Bearer {self._secret}"
        return headers

    def _complete(self, system: str, messages: Sequence[dict[str, str]]) -> str:
        cfg = self.config
        payload: dict[str, Any] = {
            "model": cfg.model,
            "messages": [{"role": "system", "content": system}, *messages],
            "temperature": cfg.temperature,
            "max_tokens": cfg.max_tokens,
            "stream": False,
        }
        json_mode = cfg.json_mode and self.response_format_supported
        if json_mode:
            payload["response_format"] = {"type": "json_object"}
        try:
            body = self._post(self.url, self._headers(), payload)
        except LLMHTTPError as exc:
            lowered = exc.body.lower()
            rejected = "response_format" in lowered or "json_object" in lowered
            if not (json_mode and exc.status in (400, 422) and rejected):
                raise
            log.warning("llm.response_format_unsupported", model=cfg.model, status=exc.status)
            self.response_format_supported = False
            del payload["response_format"]
            body = self._post(self.url, self._headers(), payload)
        return self._text(body)

    def _text(self, body: Any) -> str:
        try:
            message = body["choices"][0]["message"]
        except (KeyError, IndexError, TypeError):
            raise self._shape_error(body) from None
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):  # content parts
            return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        return content if isinstance(content, str) else ""


class AnthropicReflector(_LLMReflector):
    """``POST {base_url}/v1/messages`` (Anthropic Messages API)."""

    provider = "anthropic"

    def __init__(
        self,
        config: LLMConfig,
        client: httpx.Client | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(config, client, sleep=sleep)
        base = config.base_url.rstrip("/")
        self.url = base + ("/messages" if base.endswith("/v1") else "/v1/messages")

    def _headers(self) -> dict[str, str]:
        headers = {
            "content-type": "application/json",
            "accept": "application/json",
            "anthropic-version": ANTHROPIC_VERSION,
        }
        if self._secret:
            headers["x-api-key"] = self._secret
        return headers

    def _complete(self, system: str, messages: Sequence[dict[str, str]]) -> str:
        cfg = self.config
        payload: dict[str, Any] = {
            "model": cfg.model,
            "system": system,
            "messages": list(messages),
            "max_tokens": cfg.max_tokens,
            "temperature": cfg.temperature,
        }
        body = self._post(self.url, self._headers(), payload)
        try:
            blocks = body["content"]
            if not isinstance(blocks, list):
                raise TypeError("content is not a list")
        except (KeyError, TypeError):
            raise self._shape_error(body) from None
        # content[0].text, or every text block when a thinking block comes first.
        return "".join(
            str(b.get("text", ""))
            for b in blocks
            if isinstance(b, dict) and b.get("type", "text") == "text"
        )


def build_reflector(
    config: LLMConfig | None, client: httpx.Client | None = None
) -> Reflector | None:
    """The configured LLM reflector; None when no LLM is configured."""
    if config is None:
        return None
    if config.provider == "anthropic":
        return AnthropicReflector(config, client)
    return OpenAICompatibleReflector(config, client)
