"""The HTTP side of the LLM reflectors: one client, retries with back-off, redaction.

Timeouts, connection errors, 429 and 5xx are retried in-process with exponential back-off
and then surface as `RetryLater` (the job is retried later); any other 4xx is a
`ProviderError`. The API key never appears in a log event or an error message.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Self

import httpx
import structlog

from hivemem.config import LLMConfig
from hivemem.errors import ProviderError, RetryLater
from hivemem.providers.retry_after import retry_after

log = structlog.get_logger(__name__)

BODY_IN_ERROR_CHARS = 500  # an HTTP error body quoted in a `ProviderError`


class LLMHTTPError(ProviderError):
    """The endpoint answered with a non-retryable HTTP error (4xx other than 429)."""

    def __init__(self, message: str, status: int, body: str) -> None:
        super().__init__(message)
        self.status = status
        self.body = body  # redacted excerpt


class LLMTransport:
    """Shared by both wire formats: the client, retries, redaction."""

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
        self.url = self.endpoint(config.base_url.rstrip("/"))

    def endpoint(self, base_url: str) -> str:
        """Where requests go, from the configured base URL (without a trailing slash)."""
        return base_url

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

    def complete(
        self, system: str, messages: Sequence[dict[str, str]], timeout_s: float | None = None
    ) -> str:
        """The model's text reply to `messages` under `system` (a chat, not a reflection)."""
        return self._complete(system, messages, timeout_s)

    def _complete(
        self, system: str, messages: Sequence[dict[str, str]], timeout_s: float | None = None
    ) -> str:
        """The model's text reply; `timeout_s` per attempt (None: the configured one)."""
        raise NotImplementedError

    # -- HTTP ----------------------------------------------------------------------------

    def _redact(self, text: str) -> str:
        return text.replace(self._secret, "[redacted]") if self._secret else text

    def _post(
        self, url: str, headers: dict[str, str], payload: dict[str, Any],
        timeout_s: float | None = None,
    ) -> Any:
        """POST with in-process retries for transient failures; the decoded JSON body."""
        cfg = self.config
        timeout = cfg.timeout_s if timeout_s is None else timeout_s
        attempts = cfg.max_retries + 1
        for attempt in range(1, attempts + 1):
            started = time.perf_counter()
            wait: float | None = None
            try:
                response = self._client.post(
                    url, json=payload, headers=headers, timeout=timeout
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
                    timeout_s=round(timeout, 1),
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
                    wait = retry_after(response.headers)
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


