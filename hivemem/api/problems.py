"""Errors as RFC 9457 problem details (``application/problem+json``).

Bad input is always a 4xx: `ValidationError` -> 422 with its field, malformed JSON -> 400,
an unknown session or fact (`NotFound`, which another namespace's session also is) -> 404, a
body over the limit -> 413. A store that is down is a 503; one that refuses what was sent
(`StoreRejected`: it could not read it back) a 422. A server configured wrongly
(`ConfigurationError`) is a 500 that says so (the details go to the log); any other 500 is a
bug, and it says nothing internal.
"""

from __future__ import annotations

from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from hivemem.errors import (
    Backpressure,
    ConfigurationError,
    HivememError,
    NotFound,
    NotPermitted,
    ProcessingTimeout,
    StoreRejected,
    StoreUnavailable,
)
from hivemem.errors import ValidationError as HivememValidationError

MEDIA_TYPE = "application/problem+json"
BASE = "https://hivemem.dev/problems/"
log = structlog.get_logger(__name__)

_TITLES = {
    400: "Bad request", 401: "Unauthorized", 403: "Forbidden", 404: "Not found",
    405: "Method not allowed", 413: "Request too large", 415: "Unsupported media type",
    422: "Invalid input", 429: "Too many requests", 500: "Internal error", 503: "Unavailable",
    504: "Timeout",
}
CONFIGURATION_TITLE = "Server misconfigured"


def problem(
    status: int, detail: str | None = None, *, kind: str | None = None,
    field: str | None = None, instance: str | None = None,
    headers: dict[str, str] | None = None, title: str | None = None,
) -> JSONResponse:
    body: dict[str, Any] = {
        "type": BASE + kind if kind else "about:blank",
        "title": title or _TITLES.get(status, "Error"),
        "status": status,
    }
    if detail:
        body["detail"] = detail
    if instance:
        body["instance"] = instance
    if field:
        body["field"] = field
    return JSONResponse(body, status_code=status, media_type=MEDIA_TYPE, headers=headers)


def _field(loc: tuple[Any, ...] | list[Any]) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:]  # where it was, not what (a body field may be called "query")
    out = ""
    for part in parts:
        out += f"[{part}]" if part.isdigit() else (f".{part}" if out else part)
    return out or "body"


def _allowed(request: Request) -> str:
    """Every method some route serves on this path. Starlette's 405 names only the first
    route whose path matched, and a path can have several (GET and PATCH of a session are
    declared by two routers)."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        match, _ = route.matches(request.scope)
        if match == Match.NONE:
            continue
        methods |= set(getattr(route, "methods", None) or ())
    return ", ".join(sorted(methods))


def install(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _request_invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {}
        if first.get("type") == "json_invalid":
            return problem(400, "the body is not valid JSON", kind="malformed",
                           instance=request.url.path)
        field = _field(first.get("loc", ()))
        message = str(first.get("msg", "invalid"))
        return problem(422, f"{field}: {message}", kind="validation", field=field,
                       instance=request.url.path)

    @app.exception_handler(NotFound)
    async def _not_found(request: Request, exc: NotFound) -> JSONResponse:
        return problem(404, exc.message, kind="not-found", field=exc.field,
                       instance=request.url.path)

    @app.exception_handler(NotPermitted)
    async def _not_permitted(request: Request, exc: NotPermitted) -> JSONResponse:
        return problem(403, str(exc), kind="forbidden", field=exc.field,
                       instance=request.url.path)

    @app.exception_handler(HivememValidationError)
    async def _invalid(request: Request, exc: HivememValidationError) -> JSONResponse:
        return problem(422, str(exc), kind="validation", field=exc.field,
                       instance=request.url.path)

    @app.exception_handler(StoreUnavailable)
    async def _unavailable(request: Request, exc: StoreUnavailable) -> JSONResponse:
        log.warning("api.store_unavailable", store=exc.store, error=str(exc))
        return problem(503, f"{exc.store} is unavailable; retry later", kind="unavailable",
                       instance=request.url.path, headers={"Retry-After": "1"})

    @app.exception_handler(StoreRejected)
    async def _rejected(request: Request, exc: StoreRejected) -> JSONResponse:
        # Not an outage: the store can never hold what was sent (a payload it could not
        # read back); retrying gets the same answer, so no 503.
        log.warning("api.store_rejected", store=exc.store, error=str(exc))
        return problem(422, exc.reason, kind="rejected", instance=request.url.path)

    @app.exception_handler(Backpressure)
    async def _backpressure(request: Request, exc: Backpressure) -> JSONResponse:
        return problem(429, str(exc), kind="backpressure", instance=request.url.path,
                       headers={"Retry-After": "1"})

    @app.exception_handler(ProcessingTimeout)
    async def _timeout(request: Request, exc: ProcessingTimeout) -> JSONResponse:
        return problem(504, str(exc), kind="timeout", instance=request.url.path)

    @app.exception_handler(ConfigurationError)
    async def _misconfigured(request: Request, exc: ConfigurationError) -> JSONResponse:
        log.error("api.misconfigured", error=str(exc))
        return problem(500, "the server's configuration is incomplete or invalid; its log"
                       " says what to fix", kind="configuration", title=CONFIGURATION_TITLE,
                       instance=request.url.path)

    @app.exception_handler(HivememError)
    async def _hivemem(request: Request, exc: HivememError) -> JSONResponse:
        log.error("api.error", error=str(exc))
        return problem(500, "internal error", instance=request.url.path)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = {401: "unauthorized", 404: "not-found", 413: "too-large"}.get(exc.status_code)
        headers = getattr(exc, "headers", None)
        if exc.status_code == 405:
            headers = {**(headers or {}), "Allow": _allowed(request)}
        return problem(exc.status_code, str(exc.detail) if exc.detail else None, kind=kind,
                       instance=request.url.path, headers=headers)

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> JSONResponse:
        log.exception("api.unhandled", error_type=type(exc).__name__)
        return problem(500, "internal error", instance=request.url.path)
