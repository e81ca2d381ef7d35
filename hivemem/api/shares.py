"""Each namespace's share of the server's worker threads, as a plain ASGI middleware.

A route runs in a worker thread (FastAPI runs sync routes in anyio's pool: 40 threads by
default), and a thread cannot be stopped from outside: a request that runs long (a large
export, a long poll, a slow store) holds its thread until it is done. Without a bound, one
tenant holding every thread made every other tenant's requests, and `/healthz`, wait
(measured: 40 held requests, and both timed out). So a namespace may have at most
`api.max_inflight_per_namespace` requests in flight; one more answers 429 at once (a problem
body, ``Retry-After: 1``), before anything is read or run. A request without a valid key is
let through: the route answers 401 without running anything long.

(Shutdown is bounded apart: `hivemem serve` gives uvicorn `api.shutdown_grace_s`,
`hivemem.api.serving`.)
"""

from __future__ import annotations

import json
from collections import Counter

from starlette.types import ASGIApp, Receive, Scope, Send

from hivemem.api.auth import KeyCheck, presented_key, repeated_credentials
from hivemem.api.problems import BASE, MEDIA_TYPE


class NamespaceShare:
    def __init__(self, app: ASGIApp, keys: KeyCheck, limit: int,
                 protected: str = "/v1/") -> None:
        self.app = app
        self.keys = keys
        self.limit = limit
        self.protected = protected
        # Requests in flight per namespace (the event loop's thread only: no lock needed).
        self.inflight: Counter[str] = Counter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not str(scope.get("path", "")).startswith(
                self.protected):
            await self.app(scope, receive, send)
            return
        raw = scope.get("headers") or []
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in raw}
        key = None if repeated_credentials(raw) else await self.keys.check(
            presented_key(headers))
        if key is None:
            await self.app(scope, receive, send)
            return
        namespace = key.namespace
        if self.inflight[namespace] >= self.limit:
            await self._busy(scope, send)
            return
        self.inflight[namespace] += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.inflight[namespace] -= 1
            if not self.inflight[namespace]:
                del self.inflight[namespace]

    async def _busy(self, scope: Scope, send: Send) -> None:
        body = {"type": BASE + "busy", "title": "Too many requests", "status": 429,
                "detail": f"this namespace has {self.limit} requests in flight already:"
                          " retry when one is done", "instance": scope.get("path")}
        payload = json.dumps(body).encode()
        await send({"type": "http.response.start", "status": 429, "headers": [
            (b"content-type", MEDIA_TYPE.encode()),
            (b"content-length", str(len(payload)).encode()),
            (b"retry-after", b"1"),
        ]})
        await send({"type": "http.response.body", "body": payload})
