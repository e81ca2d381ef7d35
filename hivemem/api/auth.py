"""API key authentication: ``Authorization: Bearer <key>`` or ``X-API-Key: <key>``.

A key maps to one namespace; every route acts in that namespace only, so a key can never
read or write another namespace's sessions (they answer 404, like missing ones). A valid
key is remembered in this process for `ttl_s` seconds (by its SHA-256, never in clear), so
a revocation takes effect within that time.
"""

import hashlib
import time
from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import HTTPException, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from hivemem.store.apikeys import ApiKeyInfo, ApiKeyStore

_bearer = HTTPBearer(auto_error=False, description="hm_... API key")
_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="hm_... API key")
_MAX_CACHED = 10_000


def authenticator(
    store: ApiKeyStore, ttl_s: float = 5.0
) -> Callable[..., Awaitable[ApiKeyInfo]]:
    cache: dict[str, tuple[float, ApiKeyInfo]] = {}

    async def authenticate(
        request: Request,
        bearer: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
        header: Annotated[str | None, Security(_header)],
    ) -> ApiKeyInfo:
        presented = bearer.credentials if bearer is not None else header
        if not presented:
            raise HTTPException(401, "an API key is required (Authorization: Bearer ...)",
                                headers={"WWW-Authenticate": "Bearer"})
        digest = hashlib.sha256(presented.encode("utf-8", "replace")).hexdigest()
        now = time.monotonic()
        cached = cache.get(digest)
        if cached is not None and cached[0] > now:
            info = cached[1]
        else:
            found = await run_in_threadpool(store.authenticate, presented)
            if found is None:
                raise HTTPException(401, "invalid or revoked API key",
                                    headers={"WWW-Authenticate": "Bearer"})
            if len(cache) >= _MAX_CACHED:
                cache.clear()
            cache[digest] = (now + ttl_s, found)
            info = found
        request.state.namespace = info.namespace
        request.state.key_id = info.key_id
        return info

    return authenticate
