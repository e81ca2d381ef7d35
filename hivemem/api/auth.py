"""API key authentication: ``Authorization: Bearer <key>`` or ``X-API-Key: <key>``.

A key maps to one namespace; every route acts in that namespace only, so a key can never
read or write another namespace's sessions (they answer 404, like missing ones).
"""

from collections.abc import Callable
from typing import Annotated

from fastapi import HTTPException, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from hivemem.store.apikeys import ApiKeyInfo, ApiKeyStore

_bearer = HTTPBearer(auto_error=False, description="hm_... API key")
_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="hm_... API key")


def authenticator(store: ApiKeyStore) -> Callable[..., ApiKeyInfo]:
    def authenticate(
        request: Request,
        bearer: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
        header: Annotated[str | None, Security(_header)],
    ) -> ApiKeyInfo:
        presented = bearer.credentials if bearer is not None else header
        if not presented:
            raise HTTPException(401, "an API key is required (Authorization: Bearer ...)",
                                headers={"WWW-Authenticate": "Bearer"})
        info = store.authenticate(presented)
        if info is None:
            raise HTTPException(401, "invalid or revoked API key",
                                headers={"WWW-Authenticate": "Bearer"})
        request.state.namespace = info.namespace
        request.state.key_id = info.key_id
        return info

    return authenticate
