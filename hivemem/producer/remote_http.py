"""The remote client's wire: a `Call` (one HTTP request and how to read its answer), sent by
`Transport` (httpx, blocking) or `AsyncTransport` (httpx, asyncio).

Both retry what the server says to retry: a 429 (backpressure) or a 503 (a store is down),
after the ``Retry-After`` the answer carries (else an exponential backoff), and a connection
that could not be opened (the request never left). Nothing else is retried, so a call that
reached the server runs once; an ingest is safe to resend anyway, since the client names
every turn (`turn_id`). Errors come back as the SDK's own types, read from the RFC 9457
problem body: 422 -> `ValidationError` with the field, 404 -> `NotFound`, 401/403 ->
`Unauthorized`, and so on (`error_of`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx
import structlog

from hivemem.errors import (
    ApiError,
    ConfigurationError,
    HivememError,
    NotFound,
    RetryLater,
    StoreUnavailable,
    Unauthorized,
    ValidationError,
)
from hivemem.logs import ensure_quiet_default
from hivemem.providers.retry_after import retry_after

R = TypeVar("R")
log = structlog.get_logger(__name__)

RETRIED_STATUS = frozenset({429, 503})
# The title `hivemem.api.problems` gives a misconfigured server's 500.
_CONFIGURATION_TITLE = "Server misconfigured"


def segment(value: str) -> str:
    """A path segment: an id is ``[A-Za-z0-9._:-]``, but ``.`` and ``..`` would be read as
    dot segments, so dots-only ids are sent escaped."""
    quoted = quote(value, safe="")
    return quoted.replace(".", "%2E") if set(value) == {"."} else quoted


@dataclass(frozen=True)
class Call(Generic[R]):
    """One request: `read` turns the (successful) response into the method's result."""

    method: str
    path: str
    read: Callable[[httpx.Response], R]
    params: Mapping[str, Any] | None = None
    json: Any = None
    # A raw body (an upload), sent as `content_type`.
    content: bytes | None = None
    content_type: str | None = None
    # The body is streamed into this file (beside it, renamed into place when complete).
    download: Path | None = None
    # A long poll's own read timeout (seconds), beyond the client's default.
    timeout: float | None = None

    def headers(self) -> dict[str, str] | None:
        return {"Content-Type": self.content_type} if self.content_type else None

    def query(self) -> dict[str, Any] | None:
        if self.params is None:
            return None
        out: dict[str, Any] = {}
        for key, value in self.params.items():
            if value is None:
                continue
            out[key] = ("true" if value else "false") if isinstance(value, bool) else value
        return out


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry a 429/503 or an unopened connection."""

    attempts: int = 5
    backoff_s: float = 0.2
    max_wait_s: float = 30.0
    statuses: frozenset[int] = field(default=RETRIED_STATUS)

    def wait(self, attempt: int, response: httpx.Response | None) -> float:
        """Seconds before attempt ``attempt + 1``: the server's Retry-After (seconds or an
        HTTP date) when it sent one, else an exponential backoff; at most `max_wait_s`."""
        if response is not None:
            after = retry_after(response.headers)
            if after is not None:
                return min(after, self.max_wait_s)
        return float(min(self.backoff_s * 2.0 ** attempt, self.max_wait_s))


def _problem(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def error_of(response: httpx.Response) -> HivememError:
    """The SDK error a problem answer stands for (the same type the embedded client raises
    for the same mistake, where there is one)."""
    body = _problem(response)
    status = response.status_code
    title = str(body.get("title") or response.reason_phrase or "Error")
    detail = body.get("detail")
    detail = str(detail) if detail is not None else None
    where = body.get("field")
    where = str(where) if where else None
    message = detail or title
    if where and message.startswith(f"{where}: "):
        message = message[len(where) + 2:]
    if status == 404:
        # A route the server does not have (an older server) names no field.
        return NotFound(where or "session_id", message) if where or detail else ApiError(
            status, title, detail)
    if status in (400, 413, 422):
        return ValidationError(where or "body", message)
    if status in (401, 403):
        return Unauthorized(message)
    if status == 429:
        return RetryLater(message)
    if status == 503:
        return StoreUnavailable("api", message)
    if status == 500 and title == _CONFIGURATION_TITLE:
        return ConfigurationError(message)
    return ApiError(status, title, detail)


def _unreachable(base_url: str, exc: Exception) -> StoreUnavailable:
    return StoreUnavailable("api", f"{base_url}: {type(exc).__name__}: {exc}")


def _version() -> str:
    try:
        return metadata.version("hivemem")
    except metadata.PackageNotFoundError:  # pragma: no cover - run from a source tree
        return "0"


USER_AGENT = f"hivemem-python/{_version()}"


def _headers(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}", "User-Agent": USER_AGENT}


def _write_part(path: Path) -> Path:
    part = path.with_name(path.name + ".part")
    part.parent.mkdir(parents=True, exist_ok=True)
    return part


class Transport:
    """Sends `Call`s over one pooled `httpx.Client`."""

    def __init__(
        self, base_url: str, api_key: str, *, timeout: float = 30.0,
        retry: RetryPolicy | None = None, transport: httpx.BaseTransport | None = None,
    ) -> None:
        # A retry is logged at debug level; without any logging set up, nothing below
        # warnings is printed: the caller sees one error, when no attempt is left.
        ensure_quiet_default()
        self.base_url = base_url.rstrip("/")
        self.retry = retry or RetryPolicy()
        self._http = httpx.Client(base_url=self.base_url, headers=_headers(api_key),
                                  timeout=timeout, transport=transport)

    def send(self, call: Call[R]) -> R:
        attempt = 0
        while True:
            try:
                return self._once(call)
            except _Retry as retry:
                if attempt + 1 >= self.retry.attempts:
                    raise retry.error from None
                wait = self.retry.wait(attempt, retry.response)
                log.debug("remote.retry", path=call.path, status=retry.status, wait_s=wait)
                time.sleep(wait)
                attempt += 1

    def _once(self, call: Call[R]) -> R:
        timeout = httpx.USE_CLIENT_DEFAULT if call.timeout is None else call.timeout
        try:
            if call.download is not None:
                with self._http.stream(call.method, call.path, params=call.query(),
                                       json=call.json, timeout=timeout) as response:
                    if response.is_success:
                        part = _write_part(call.download)
                        with part.open("wb") as out:
                            for chunk in response.iter_bytes():
                                out.write(chunk)
                        part.replace(call.download)
                        return call.read(response)
                    response.read()
            else:
                response = self._http.request(call.method, call.path, params=call.query(),
                                              json=call.json, content=call.content,
                                              headers=call.headers(), timeout=timeout)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise _Retry(None, _unreachable(self.base_url, exc)) from exc
        except httpx.TransportError as exc:
            raise _unreachable(self.base_url, exc) from exc
        return _answer(call, response, self.retry)

    def close(self) -> None:
        self._http.close()


class AsyncTransport:
    """Sends `Call`s over one pooled `httpx.AsyncClient`."""

    def __init__(
        self, base_url: str, api_key: str, *, timeout: float = 30.0,
        retry: RetryPolicy | None = None, transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        # A retry is logged at debug level; without any logging set up, nothing below
        # warnings is printed: the caller sees one error, when no attempt is left.
        ensure_quiet_default()
        self.base_url = base_url.rstrip("/")
        self.retry = retry or RetryPolicy()
        self._http = httpx.AsyncClient(base_url=self.base_url,
                                       headers=_headers(api_key), timeout=timeout,
                                       transport=transport)

    async def send(self, call: Call[R]) -> R:
        attempt = 0
        while True:
            try:
                return await self._once(call)
            except _Retry as retry:
                if attempt + 1 >= self.retry.attempts:
                    raise retry.error from None
                wait = self.retry.wait(attempt, retry.response)
                log.debug("remote.retry", path=call.path, status=retry.status, wait_s=wait)
                await asyncio.sleep(wait)
                attempt += 1

    async def _once(self, call: Call[R]) -> R:
        timeout = httpx.USE_CLIENT_DEFAULT if call.timeout is None else call.timeout
        try:
            if call.download is not None:
                async with self._http.stream(call.method, call.path, params=call.query(),
                                             json=call.json, timeout=timeout) as response:
                    if response.is_success:
                        part = _write_part(call.download)
                        with part.open("wb") as out:
                            async for chunk in response.aiter_bytes():
                                out.write(chunk)
                        part.replace(call.download)
                        return call.read(response)
                    await response.aread()
            else:
                response = await self._http.request(call.method, call.path,
                                                    params=call.query(), json=call.json,
                                                    content=call.content,
                                                    headers=call.headers(), timeout=timeout)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise _Retry(None, _unreachable(self.base_url, exc)) from exc
        except httpx.TransportError as exc:
            raise _unreachable(self.base_url, exc) from exc
        return _answer(call, response, self.retry)

    async def close(self) -> None:
        await self._http.aclose()


class _Retry(Exception):
    """Internal: this attempt may be repeated; `error` is what to raise when none is left."""

    def __init__(self, response: httpx.Response | None, error: HivememError) -> None:
        super().__init__(str(error))
        self.response = response
        self.error = error
        self.status = response.status_code if response is not None else None


def _answer(call: Call[R], response: httpx.Response, retry: RetryPolicy) -> R:
    if response.status_code in retry.statuses:
        raise _Retry(response, error_of(response))
    if response.is_error:
        raise error_of(response)
    return call.read(response)
