"""LLM-backed reflectors: a closed episode (+ the session's known facts) in, fact actions out.

Two wire formats cover the usual deployments (`openai`: OpenAI, Ollama's ``/v1``, vLLM,
llama.cpp server, most gateways; `anthropic`: the Messages API). Both share the prompt
(`prompt`), the tolerant parser with one repair round-trip (`parse`, `base`) and the
transport policy (`transport`).
"""

from __future__ import annotations

import httpx

from hivemem.config import LLMConfig
from hivemem.providers.heuristic import HeuristicReflector
from hivemem.providers.llm.anthropic import ANTHROPIC_VERSION, AnthropicReflector
from hivemem.providers.llm.augmented import AugmentedReflector, AugmentedResult
from hivemem.providers.llm.base import LLMReflector
from hivemem.providers.llm.openai import OpenAICompatibleReflector
from hivemem.providers.llm.parse import (
    LLMOutputError,
    MalformedOutput,
    ParsedReply,
    extract_json,
    parse_actions,
    parse_reply,
)
from hivemem.providers.llm.prompt import (
    SYSTEM_PROMPT,
    Aliases,
    Prompt,
    build_prompt,
    render_fact,
    render_turn,
    repair_prompt,
)
from hivemem.providers.llm.transport import LLMHTTPError
from hivemem.providers.reflector import Reflector

__all__ = [
    "ANTHROPIC_VERSION", "SYSTEM_PROMPT", "Aliases", "AnthropicReflector", "AugmentedReflector",
    "AugmentedResult", "LLMConfig", "LLMHTTPError", "LLMOutputError", "LLMReflector",
    "MalformedOutput", "OpenAICompatibleReflector", "ParsedReply", "Prompt", "build_prompt",
    "build_reflector", "extract_json", "parse_actions", "parse_reply", "reflector_for",
    "render_fact", "render_turn", "repair_prompt",
]


def build_reflector(
    config: LLMConfig | None, client: httpx.Client | None = None
) -> Reflector | None:
    """The configured LLM reflector; None when no LLM is configured."""
    if config is None:
        return None
    if config.provider == "anthropic":
        return AnthropicReflector(config, client)
    return OpenAICompatibleReflector(config, client)


def reflector_for(config: LLMConfig | None, client: httpx.Client | None = None) -> Reflector:
    """What reflects episodes under `config`: the heuristic reflector without an LLM; with
    one, the LLM on top of the heuristic (it may add facts, never undo the change rules)."""
    llm = build_reflector(config, client)
    rules = HeuristicReflector()
    return rules if llm is None else AugmentedReflector(llm, rules)
