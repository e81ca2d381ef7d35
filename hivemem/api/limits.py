"""Request body size limit, as a plain ASGI middleware (before any body is parsed)."""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hivemem.api.problems import BASE, MEDIA_TYPE


class BodyLimit:
    """A declared Content-Length over the limit is refused at once; a chunked body is read
    up to the limit and refused as soon as it passes it. Either way: 413 problem JSON."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None:
            try:
                size = int(declared)
            except ValueError:
                await self._refuse(scope, send, 400, "bad Content-Length")
                return
            if size > self.max_bytes:
                if size <= 16 * self.max_bytes:  # let a modest upload finish: no reset
                    more = True
                    while more:
                        message = await receive()
                        more = message["type"] == "http.request" and bool(
                            message.get("more_body", False))
                await self._refuse(scope, send, 413, self._detail())
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
                # Read (and drop) the rest first, up to a bound, so the client gets the
                # answer instead of a reset connection mid-upload.
                while message.get("more_body", False) and total <= 16 * self.max_bytes:
                    message = await receive()
                    total += len(message.get("body", b""))
                await self._refuse(scope, send, 413, self._detail())
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
    async def _refuse(scope: Scope, send: Send, status: int, detail: str) -> None:
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
        await send({"type": "http.response.body", "body": payload})
