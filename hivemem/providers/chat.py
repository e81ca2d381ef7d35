"""A chat-completion endpoint for the REPL, on the reflectors' transport.

`ChatModel` reuses `OpenAICompatibleReflector` / `AnthropicReflector` for the HTTP part only
(retries with back-off for timeouts, 429 and 5xx, the API key redacted from every error),
with JSON mode off: the REPL wants prose, not a JSON object.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Self

import httpx

from hivemem.config import LLMConfig
from hivemem.providers.llm import AnthropicReflector, OpenAICompatibleReflector


class ChatModel:
    def __init__(self, config: LLMConfig, client: httpx.Client | None = None) -> None:
        plain = config.model_copy(update={"json_mode": False})
        self.config = plain
        self.name = f"{plain.provider}:{plain.model}"
        self._backend: OpenAICompatibleReflector | AnthropicReflector = (
            AnthropicReflector(plain, client) if plain.provider == "anthropic"
            else OpenAICompatibleReflector(plain, client)
        )

    def complete(self, system: str, messages: Sequence[dict[str, str]]) -> str:
        """The model's answer to `messages` (role/content dicts) under `system`."""
        return self._backend.complete(system, messages).strip()

    def close(self) -> None:
        """Closes the backend's HTTP client (the transport owns it and its lifecycle)."""
        self._backend.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
