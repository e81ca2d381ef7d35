"""``POST {base_url}/v1/messages``: the Anthropic Messages API."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hivemem.providers.llm.base import LLMReflector

ANTHROPIC_VERSION = "2023-06-01"


class AnthropicReflector(LLMReflector):
    """``POST {base_url}/v1/messages`` (Anthropic Messages API)."""

    provider = "anthropic"

    def endpoint(self, base_url: str) -> str:
        return base_url + ("/messages" if base_url.endswith("/v1") else "/v1/messages")

    def _headers(self) -> dict[str, str]:
        headers = {
            "content-type": "application/json",
            "accept": "application/json",
            "anthropic-version": ANTHROPIC_VERSION,
        }
        if self._secret:
            headers["x-api-key"] = self._secret
        return headers

    def _complete(
        self, system: str, messages: Sequence[dict[str, str]], timeout_s: float | None = None
    ) -> str:
        cfg = self.config
        payload: dict[str, Any] = {
            "model": cfg.model,
            "system": system,
            "messages": list(messages),
            "max_tokens": cfg.max_tokens,
            "temperature": cfg.temperature,
        }
        body = self._post(self.url, self._headers(), payload, timeout_s)
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
