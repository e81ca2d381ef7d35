"""The model's reply as fact actions: tolerant of what small models write, strict on facts.

Tolerated: code fences, reasoning blocks, chatter around the JSON, a bare list, trailing
commas, unknown kinds, percentages, ids written as ``<t1>``, ``"[f2]"`` or a real id.
Not tolerated: an add whose content the episode does not support (a copy of the prompt),
an empty action list inside prose (an echo of the prompt's instructions, not an answer).
An update whose target cannot be resolved is kept as an add on the same slot (the change
still reaches consolidation, which versions it by slot) and is recorded in `dropped`.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

import structlog
from pydantic import ValidationError as PydanticValidationError

from hivemem.domain.fact import FactAction, FactKind
from hivemem.domain.provenance import stated_in, words_of
from hivemem.errors import ProviderError
from hivemem.providers.llm.prompt import Aliases
from hivemem.providers.reflector import ReflectionRequest

log = structlog.get_logger(__name__)


class MalformedOutput(ValueError):
    """The output holds no usable actions (internal: triggers the repair attempt)."""


class LLMOutputError(ProviderError):
    """The model's output could not be parsed, even after one repair attempt."""

    def __init__(self, message: str, raw_output: str) -> None:
        super().__init__(message)
        self.raw_output = raw_output


_FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n?(.*?)```", re.DOTALL)
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_TRAILING_COMMA = re.compile(r",(\s*[}\]])")
_OPEN = re.compile(r"[\[{]")
_ID_WRAPPING = " \t\n<>[]()\"'`{}.…"  # "<3f9a...>": a shortened id
_MISSING: Any = object()

_OPS: dict[str, str] = {
    **dict.fromkeys(("add", "new", "create", "insert"), "add"),
    **dict.fromkeys(("update", "replace", "supersede", "modify", "change", "revise"), "update"),
    **dict.fromkeys(("keep", "retain", "confirm", "unchanged", "noop", "none"), "keep"),
    **dict.fromkeys(("remove", "delete", "drop", "retract", "invalidate", "archive"), "remove"),
}
_KINDS = {k.value for k in FactKind}


@dataclass(slots=True)
class Decoded:
    value: Any
    bare: bool  # the reply was only this JSON value (fences and reasoning aside)


def _decode_first(text: str) -> tuple[Any, str]:
    """The first usable JSON value in `text` and its source text: an object with "actions",
    else a list of objects, else an object that looks like one action."""
    decoder = json.JSONDecoder()
    for variant in (text, _TRAILING_COMMA.sub(r"\1", text)):
        as_list: Any = _MISSING
        as_action: Any = _MISSING
        for match in _OPEN.finditer(variant):
            try:
                value, end = decoder.raw_decode(variant, match.start())
            except json.JSONDecodeError:
                continue
            span = variant[match.start():end]
            if isinstance(value, dict):
                if "actions" in value or "facts" in value:
                    return value, span
                if "op" in value and as_action is _MISSING:
                    as_action = (value, span)
            elif (
                isinstance(value, list)
                and all(isinstance(v, dict) for v in value)
                and as_list is _MISSING
            ):
                as_list = (value, span)
        if as_list is not _MISSING:
            return as_list  # type: ignore[no-any-return]
        if as_action is not _MISSING:
            return as_action  # type: ignore[no-any-return]
    return _MISSING, ""


def decode_reply(text: str) -> Decoded:
    """Strip reasoning blocks and code fences, then take the first usable JSON value."""
    cleaned = _THINK.sub("", text).strip()
    if not cleaned:
        raise MalformedOutput("the reply was empty")
    unfenced = _FENCE.sub(lambda m: m.group(1), cleaned).strip()
    for chunk in [m.group(1) for m in _FENCE.finditer(cleaned)] + [cleaned]:
        value, span = _decode_first(chunk)
        if value is not _MISSING:
            around = unfenced.replace(span, "", 1) if span else unfenced
            return Decoded(value, bare=not around.strip(" \t\n,;"))
    raise MalformedOutput("no JSON object with an actions list was found")


def extract_json(text: str) -> Any:
    return decode_reply(text).value


def clean_id(raw: Any) -> str:
    """``<t1>``, ``"[T1]"``, `` t1 `` -> ``t1``."""
    return str(raw).strip(_ID_WRAPPING).strip().lower()


@dataclass(frozen=True, slots=True)
class _Known:
    fact_ids: dict[str, str]  # lower-case id or alias -> id
    turn_ids: dict[str, str]
    turn_agent: dict[str, str | None]
    agents: frozenset[str]
    vocabulary: frozenset[str]  # the words of the episode's turns

    @classmethod
    def of(cls, request: ReflectionRequest) -> _Known:
        aliases = Aliases.of(request)
        # Real ids first: an alias never shadows a real id that happens to look like one.
        facts = {**aliases.fact_ids(), **{f.fact_id.lower(): f.fact_id
                                          for f in request.prior_facts}}
        turns = {**aliases.turn_ids(), **{t.turn_id.lower(): t.turn_id for t in request.turns}}
        words = {w for t in request.turns for w in words_of(t.content)}
        return cls(
            fact_ids=facts,
            turn_ids=turns,
            turn_agent={t.turn_id: t.agent_id for t in request.turns},
            agents=frozenset(t.agent_id for t in request.turns if t.agent_id),
            vocabulary=frozenset(words),
        )

    def fact_id(self, raw: Any) -> str | None:
        if not isinstance(raw, str):
            return None
        key = clean_id(raw)
        if not key:
            return None
        if key in self.fact_ids:
            return self.fact_ids[key]
        if len(key) >= 8:  # a model that shortened a long id: accept a unique prefix
            hits = {v for k, v in self.fact_ids.items() if k.startswith(key)}
            if len(hits) == 1:
                return hits.pop()
        return None

    def supports(self, content: str) -> bool:
        """Does the episode state this? Most of its words, and every name in it, occur in
        the turns (a copy of the prompt or an invented fact fails)."""
        return stated_in(content, self.vocabulary)


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
    if isinstance(value, str):
        # "t1, t2" or "[t1][t2]" in one string
        items: list[Any] = [p for p in re.split(r"[,\s]+|\]\s*\[", value) if p]
    else:
        items = value if isinstance(value, list) else []
    out: list[str] = []
    for item in items:
        if not isinstance(item, str | int):
            continue
        turn_id = known.turn_ids.get(clean_id(item))
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


@dataclass(slots=True)
class ParsedReply:
    actions: list[FactAction] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)  # what was not used as written, and why


def _drop(parsed: ParsedReply, index: int, why: str, **fields: Any) -> None:
    log.warning("llm.action_dropped", index=index, why=why, **fields)
    parsed.dropped.append(f"llm {index}: {why}")


def parse_reply(text: str, request: ReflectionRequest) -> ParsedReply:
    """The model's reply as fact actions. Raises `MalformedOutput` when nothing is usable."""
    decoded = decode_reply(text)
    value = decoded.value
    items: Any = value
    if isinstance(value, dict):
        items = value.get("actions", value.get("facts", _MISSING))
        if items is _MISSING:
            items = [value]  # a single action object
    if not isinstance(items, list):
        raise MalformedOutput('"actions" is not a list')
    if not items and not decoded.bare:
        # {"actions": []} quoted inside prose is the prompt's instruction echoed back.
        raise MalformedOutput("an empty actions list inside prose; reply with the JSON only")
    known = _Known.of(request)
    out = ParsedReply()
    invalid: list[str] = []
    targets: set[str] = set()
    new_facts = 0
    for index, item in enumerate(items):
        parsed = _one_action(item, known)
        if isinstance(parsed, str):
            invalid.append(parsed)
            continue
        if parsed.op != "add":
            target = known.fact_id(parsed.target)
            if target is None and parsed.op == "update":
                # The change is real even if its target is garbled: an add on the same
                # slot, which consolidation versions against the slot's current fact.
                log.info("llm.update_unresolved", index=index, target=parsed.target)
                out.dropped.append(
                    f"llm {index}: update target {parsed.target!r} unknown; kept as an add"
                )
                parsed = parsed.model_copy(update={"op": "add", "target": None})
            elif target is None:
                _drop(out, index, "target is not a known fact id", op=parsed.op,
                      target=parsed.target)
                continue
            elif target in targets:
                _drop(out, index, "second action on the same target", op=parsed.op,
                      target=target)
                continue
            else:
                targets.add(target)
                parsed = parsed.model_copy(update={"target": target})
        if parsed.op == "add" and not known.supports(parsed.content or ""):
            _drop(out, index, "content not stated in the episode", op=parsed.op,
                  content=(parsed.content or "")[:80])
            continue
        if parsed.op in ("add", "update"):
            if new_facts >= request.max_facts:
                _drop(out, index, "over max_facts", op=parsed.op, max_facts=request.max_facts)
                continue
            new_facts += 1
        out.actions.append(parsed)
    if invalid:
        log.warning("llm.actions_invalid", count=len(invalid), reasons=invalid[:5])
        if len(invalid) == len(items):
            raise MalformedOutput(f"no valid action ({'; '.join(invalid[:3])})")
    return out


def parse_actions(text: str, request: ReflectionRequest) -> list[FactAction]:
    return parse_reply(text, request).actions
