"""Request body size limit, as a plain ASGI middleware (before any body is parsed).

It runs after authentication: a request to the API (``/v1/...``) without a valid key never
has its body read (the app answers 401 from an empty body), so an anonymous client cannot
make the server buffer anything. An authenticated body over the limit is refused as soon as
that is known: at once for a declared Content-Length, at the first chunk past the limit for
a chunked one. The 413's status line and headers go out before any more is read; the rest of
a moderately oversized body is then dropped (bounded in size and time) and only then the
response completed, so that the client, still sending, can read the 413. (The drain must come
before the response's last message: once a response is complete, uvicorn's `receive` answers
`http.disconnect` at once, the connection is closed with the client's bytes unread, and the
kernel's reset can destroy the 413 before the client reads it, as seen on CI.)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hivemem.api.auth import KeyCheck, presented_key, repeated_credentials
from hivemem.api.problems import BASE, MEDIA_TYPE

_NO_BODY = ("GET", "HEAD", "OPTIONS")
# With a 413 started, read and drop the rest of a body up to this many times the limit, for
# at most _DRAIN_S: a socket closed with unread bytes is reset by the kernel, and the reset
# can destroy the 413 before the client reads it. Bigger bodies are cut at once.
_DRAIN_FACTOR = 16
_DRAIN_S = 2.0


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int, keys: KeyCheck | None = None,
                 protected: str = "/v1/") -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.keys = keys
        self.protected = protected

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in _NO_BODY:
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers") or []}
        if (self.keys is not None and str(scope.get("path", "")).startswith(self.protected)
                and (repeated_credentials(scope.get("headers") or [])
                     or await self.keys.check(presented_key(headers)) is None)):
            await self.app(scope, _empty_body, send)  # the route's auth answers 401/400
            return
        declared = headers.get("content-length")
        if declared is not None:
            try:
                size = int(declared)
            except ValueError:
                await self._refuse(scope, send, 400, "bad Content-Length")
                return
            if size > self.max_bytes:
                await self._refuse(scope, send, 413, self._detail(),
                                   drain=receive if size <= _DRAIN_FACTOR * self.max_bytes
                                   else None)
                return
            await self.app(scope, receive, send)
            return
        # No length declared (chunked): buffer up to the limit, then replay.
        chunks: list[bytes] = []
        total = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            body = message.get("body", b"")
            total += len(body)
            if total > self.max_bytes:
                await self._refuse(scope, send, 413, self._detail(), drain=receive)
                return
            chunks.append(body)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        await self.app(scope, replay, send)

    def _detail(self) -> str:
        return f"the request body exceeds {self.max_bytes} bytes"

    @staticmethod
    async def _refuse(scope: Scope, send: Send, status: int, detail: str,
                      drain: Receive | None = None) -> None:
        kind = "too-large" if status == 413 else "malformed"
        title = "Request too large" if status == 413 else "Bad request"
        body: dict[str, Any] = {"type": BASE + kind, "title": title, "status": status,
                                "detail": detail, "instance": scope.get("path")}
        payload = json.dumps(body).encode()
        await send({"type": "http.response.start", "status": status, "headers": [
            (b"content-type", MEDIA_TYPE.encode()),
            (b"content-length", str(len(payload)).encode()),
            (b"connection", b"close"),
        ]})
        if drain is not None:
            await _drain(drain)
        await send({"type": "http.response.body", "body": payload})


async def _drain(receive: Receive) -> None:
    async def drop() -> None:
        while True:
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                return

    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(drop(), _DRAIN_S)


async def _empty_body() -> Message:
    return {"type": "http.request", "body": b"", "more_body": False}
