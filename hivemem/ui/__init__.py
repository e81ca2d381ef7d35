"""The memory explorer: a small static app (plain HTML, CSS and JavaScript) served at `/ui/`.

It ships as files in the wheel (`hivemem/ui/static/`): no CDN, no build step, offline. The
page talks to the public HTTP API only, with the API key the user types in (kept in the
tab's sessionStorage), so it can show nothing that key may not read: the server adds no
route and grants nothing for it. See docs/ui.md for why a static app and not templates.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # starlette loads only with the API (pyproject's lazy imports)
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

STATIC = Path(str(files("hivemem.ui") / "static"))
PREFIX = "/ui"

# Only this origin's own files; no inline script, no framing, no referrer (a URL names a
# session and a query, which a third party has no business reading).
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy",
     b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
     b" connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-content-type-options", b"nosniff"),
    (b"cache-control", b"no-cache"),
)


class Hardened:
    """The static files with the headers above on every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message,
                           "headers": [*message.get("headers", []), *SECURITY_HEADERS]}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def static_app() -> ASGIApp:
    """The explorer's files (index.html at the root), hardened."""
    from starlette.staticfiles import StaticFiles

    return Hardened(StaticFiles(directory=STATIC, html=True))
