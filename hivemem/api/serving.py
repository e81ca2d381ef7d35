"""How `hivemem serve` runs the app under uvicorn: one place for its server settings."""

from __future__ import annotations

from typing import Any

from hivemem.config import Settings


def server_options(settings: Settings) -> dict[str, Any]:
    """uvicorn's options besides the bind address. `timeout_graceful_shutdown`: a shutdown
    (SIGTERM, Ctrl-C) waits at most `api.shutdown_grace_s` for requests in flight, then
    closes their connections: a request that runs long never holds the server up."""
    return {"log_level": "warning", "access_log": False,
            "timeout_graceful_shutdown": settings.api.shutdown_grace_s}


def server_config(app: Any, settings: Settings, **bind: Any) -> Any:
    """The `uvicorn.Config` of a one-process server (`bind`: host and port)."""
    import uvicorn  # noqa: PLC0415 (the api extra)

    return uvicorn.Config(app, **bind, **server_options(settings))
