"""``POST {base_url}/chat/completions``: OpenAI, Ollama's ``/v1``, vLLM, llama.cpp server."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import structlog

from hivemem.providers.llm.base import LLMReflector
from hivemem.providers.llm.transport import LLMHTTPError

log = structlog.get_logger(__name__)


class OpenAICompatibleReflector(LLMReflector):
    """``POST {base_url}/chat/completions``: OpenAI, Ollama (/v1), vLLM, llama.cpp server."""

    provider = "openai"

    # Cleared on an instance when its server rejects response_format (then remembered).
    response_format_supported = True

    def endpoint(self, base_url: str) -> str:
        return base_url + "/chat/completions"

    def _headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json", "accept": "application/json"}
        if self._secret:
            headers["authorization"] = f"Bearer {self._secret}"
        return headers

    def _complete(
        self, system: str, messages: Sequence[dict[str, str]], timeout_s: float | None = None
    ) -> str:
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
            body = self._post(self.url, self._headers(), payload, timeout_s)
        except LLMHTTPError as exc:
            lowered = exc.body.lower()
            rejected = "response_format" in lowered or "json_object" in lowered
            if not (json_mode and exc.status in (400, 422) and rejected):
                raise
            log.warning("llm.response_format_unsupported", model=cfg.model, status=exc.status)
            self.response_format_supported = False
            del payload["response_format"]
            body = self._post(self.url, self._headers(), payload, timeout_s)
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
