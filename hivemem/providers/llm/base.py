"""The reflection loop both wire formats share: prompt, parse, one repair round-trip."""

from __future__ import annotations

import structlog

from hivemem.providers.llm.parse import LLMOutputError, MalformedOutput, parse_reply
from hivemem.providers.llm.prompt import build_prompt, expected_output_tokens, repair_prompt
from hivemem.providers.llm.transport import LLMTransport
from hivemem.providers.reflector import ReflectionRequest, ReflectionResult

log = structlog.get_logger(__name__)

RAW_IN_ERROR_CHARS = 2000  # the raw output quoted in a `ProviderError`
REPAIR_QUOTE_CHARS = 8000  # the malformed output sent back in the repair request
# The output size `timeout_s` is meant to cover: a local model on a CPU writes ~10 tokens/s,
# so an episode with many facts gets proportionally longer instead of timing out every try.
TOKENS_PER_TIMEOUT = 256


class LLMReflector(LLMTransport):
    def timeout_for(self, request: ReflectionRequest) -> float:
        expected = min(self.config.max_tokens, expected_output_tokens(request))
        return self.config.timeout_s * max(1.0, expected / TOKENS_PER_TIMEOUT)

    def reflect(self, request: ReflectionRequest) -> ReflectionResult:
        prompt = build_prompt(request)
        timeout = self.timeout_for(request)
        messages: list[dict[str, str]] = [{"role": "user", "content": prompt.user}]
        text = self._complete(prompt.system, messages, timeout)
        try:
            parsed = parse_reply(text, request)
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
            text = self._complete(prompt.system, repair, timeout)
            try:
                parsed = parse_reply(text, request)
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
            actions=len(parsed.actions),
            episode_id=request.episode.episode_id,
        )
        return ReflectionResult(actions=parsed.actions, raw_output=text,
                                model=self.config.model, dropped=parsed.dropped)
