"""Per request: a request id in the logs' context and the response header, one log line,
and the HTTP metrics by route template (never the raw path). A plain ASGI middleware
(Starlette's BaseHTTPMiddleware cost ~3 ms per POST here)."""

from __future__ import annotations

import re
import time
import uuid

import structlog
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hivemem.runtime.metrics import Metrics, method_label, status_label

log = structlog.get_logger(__name__)
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")


class Observe:
    def __init__(self, app: ASGIApp, registry: Metrics) -> None:
        self.app = app
        self.registry = registry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope.get("headers") or []).get(b"x-request-id", b"").decode("latin-1")
        request_id = given if _REQUEST_ID.fullmatch(given) else uuid.uuid4().hex[:16]
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(request_id=request_id)
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                headers = list(message.get("headers", []))
                headers.append((b"x-request-id", request_id.encode()))
                message = {**message, "headers": headers}
            await send(message)

        started = time.perf_counter()
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            elapsed = time.perf_counter() - started
            method = method_label(str(scope.get("method", "")))
            # A matched route's template (a closed set: the app's routes), never the path.
            template = str(getattr(scope.get("route"), "path", "unmatched"))
            self.registry.http_requests.labels(method, template, status_label(status)).inc()
            self.registry.http_seconds.labels(method, template).observe(elapsed)
            state = scope.get("state") or {}
            log.info(
                "http.request", method=method, route=template, status=status,
                ms=round(elapsed * 1000, 2), namespace=state.get("namespace"),
                session_id=(scope.get("path_params") or {}).get("session_id"),
                turn_id=state.get("turn_id"), seq=state.get("seq"),
            )
            structlog.contextvars.clear_contextvars()
