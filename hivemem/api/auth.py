"""API key authentication: ``Authorization: Bearer <key>`` or ``X-API-Key: <key>``.

A key maps to one namespace; every route acts in that namespace only, so a key can never
read or write another namespace's sessions (they answer 404, like missing ones). An agent key
also binds the agent: the handle it gets is pinned (another `agent_id` answers 403). A valid
key is remembered in this process for `ttl_s` seconds (by its SHA-256, never in clear), so a
revocation takes effect within that time.

`KeyCheck` is shared by the route dependency and the body-limit middleware (which must know
whether a request is authenticated before it reads a byte of its body).
"""

import hashlib
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from typing import Annotated

from fastapi import HTTPException, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from hivemem.store.apikeys import ApiKeyInfo, ApiKeyStore, presented_key

__all__ = ["KeyCheck", "authenticator", "presented_key", "repeated_credentials"]

_bearer = HTTPBearer(auto_error=False, description="hm_... API key")
_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="hm_... API key")
_MAX_CACHED = 10_000
_MAX_PRESENTED = 256  # a real key is ~60 characters: longer is no key at all


class KeyCheck:
    """Validates presented keys against the store, with a short positive cache."""

    def __init__(self, store: ApiKeyStore, ttl_s: float = 5.0) -> None:
        self.store = store
        self.ttl_s = ttl_s
        self._cache: dict[str, tuple[float, ApiKeyInfo]] = {}

    async def check(self, presented: str | None) -> ApiKeyInfo | None:
        if not presented or len(presented) > _MAX_PRESENTED:
            return None
        digest = hashlib.sha256(presented.encode("utf-8", "replace")).hexdigest()
        now = time.monotonic()
        cached = self._cache.get(digest)
        if cached is not None and cached[0] > now:
            return cached[1]
        found = await run_in_threadpool(self.store.authenticate, presented)
        if found is None:
            return None
        if len(self._cache) >= _MAX_CACHED:
            self._cache.clear()
        self._cache[digest] = (now + self.ttl_s, found)
        return found


def repeated_credentials(raw_headers: Iterable[tuple[bytes, bytes]]) -> bool:
    """Whether a request carries ``Authorization`` or ``X-API-Key`` more than once. Such a
    request is refused (400): one reader taking the first and another the last would let
    the body limit and the route act on different keys."""
    seen = Counter(name.lower() for name, _ in raw_headers
                   if name.lower() in (b"authorization", b"x-api-key"))
    return any(n > 1 for n in seen.values())


def authenticator(keys: KeyCheck) -> Callable[..., Awaitable[ApiKeyInfo]]:
    """The route dependency: the caller's key record, a 401, or a 400 for a request that
    presents a header of credentials twice."""

    async def authenticate(
        request: Request,
        bearer: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
        header: Annotated[str | None, Security(_header)],
    ) -> ApiKeyInfo:
        if repeated_credentials(request.scope.get("headers") or []):
            raise HTTPException(400, "one Authorization (or X-API-Key) header per request")
        presented = bearer.credentials if bearer is not None else header
        if not presented:
            raise HTTPException(401, "an API key is required (Authorization: Bearer ...)",
                                headers={"WWW-Authenticate": "Bearer"})
        info = await keys.check(presented)
        if info is None:
            raise HTTPException(401, "invalid or revoked API key",
                                headers={"WWW-Authenticate": "Bearer"})
        request.state.namespace = info.namespace
        request.state.key_id = info.key_id
        return info

    return authenticate
