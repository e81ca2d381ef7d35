"""The HTTP API: `create_app(settings)` builds it; `hivemem serve` runs it under uvicorn.

Nothing global: the app owns its `MemoryClient`, API key store and metrics registry (or
uses the ones passed in, for tests and embedding in another app). The routes see only
`ScopedMemory` handles, one per request from its API key's namespace; the app itself uses
`memory.admin` for the API keys, readiness and the pipeline metrics.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import structlog
from fastapi import FastAPI, Response
from fastapi.responses import JSONResponse

from hivemem import __version__
from hivemem.api.auth import KeyCheck, authenticator
from hivemem.api.client_routes import build_client_router
from hivemem.api.docs import install_docs
from hivemem.api.forget_routes import build_forget_router
from hivemem.api.limits import BodyLimit
from hivemem.api.observe import Observe
from hivemem.api.operate_routes import build_operate_router
from hivemem.api.problems import install as install_problems
from hivemem.api.routes import build_router
from hivemem.api.schemas import Health
from hivemem.api.shares import NamespaceShare
from hivemem.config import Settings
from hivemem.logs import configure_logging
from hivemem.producer.admin import READY, Admin
from hivemem.producer.client import MemoryClient
from hivemem.producer.scoped import ScopedMemory
from hivemem.runtime.metrics import CONTENT_TYPE, Metrics
from hivemem.store.apikeys import ApiKeyInfo
from hivemem.ui import PREFIX as UI_PREFIX
from hivemem.ui import static_app as ui_app

log = structlog.get_logger(__name__)

DESCRIPTION = """Shared, session-scoped memory for AI agents.

Authenticate with an API key (`hivemem apikey create NAMESPACE`) as
`Authorization: Bearer hm_...` or `X-API-Key: hm_...`. A key belongs to one namespace: every
call reads and writes that namespace only, and another namespace's session answers 404 like
a missing one. An agent key (`hivemem apikey create NAMESPACE --agent ID`) also acts as that
agent only: a request naming another `agent_id` answers 403. Errors are RFC 9457 problem
details (`application/problem+json`) with the offending `field` for invalid input.
"""


def create_app(
    settings: Settings,
    *,
    client: MemoryClient | None = None,
    metrics: Metrics | None = None,
) -> FastAPI:
    owned = client is None
    memory = client or MemoryClient(settings)
    admin = memory.admin
    registry = metrics or Metrics()
    if metrics is None:
        registry.watch_pipeline(admin.pipeline_status)

    def tenant_of(key: ApiKeyInfo) -> ScopedMemory:
        if key.agent_id is None:  # a namespace key: any agent of its namespace
            return memory.scoped(namespace=key.namespace)
        return memory.scoped(namespace=key.namespace, agent_id=key.agent_id).pin()

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        log.info("api.started", version=__version__)
        yield
        if owned:
            memory.close()

    app = FastAPI(
        title="hivemem", version=__version__, description=DESCRIPTION, lifespan=lifespan,
        docs_url=None, redoc_url=None,
    )
    install_docs(app)  # Swagger UI from this process, not a CDN
    install_problems(app)
    keys = KeyCheck(admin.api_keys())
    app.include_router(build_router(tenant_of, registry, authenticator(keys),
                                    settings.api.max_batch,
                                    settings.recall.default_preset))
    app.include_router(build_client_router(tenant_of, authenticator(keys), admin,
                                           max_wait_s=settings.api.max_wait_s))
    app.include_router(build_forget_router(tenant_of, authenticator(keys)))
    app.include_router(build_operate_router(tenant_of, authenticator(keys), admin))

    _operations(app, admin, registry)
    # The memory explorer: static files that call the routes above with the user's key.
    app.mount(UI_PREFIX, ui_app(), name="ui")
    app.add_middleware(Observe, registry=registry)
    app.add_middleware(BodyLimit, max_bytes=settings.api.max_body_bytes, keys=keys)
    app.add_middleware(NamespaceShare, keys=keys,
                       limit=settings.api.max_inflight_per_namespace)
    return app


def _operations(app: FastAPI, admin: Admin, registry: Metrics) -> None:
    """Liveness, readiness and metrics (no API key: they reveal no memory)."""

    @app.get("/healthz", response_model=Health, tags=["operations"],
             summary="Liveness: the process answers")
    async def healthz() -> Health:
        # On the event loop, never in a worker thread: it answers while every thread works.
        return Health(status="ok")

    @app.get("/readyz", response_model=Health, tags=["operations"],
             summary="Readiness: Redis and the vector store answer",
             responses={503: {"model": Health}})
    def readyz() -> Any:
        checks = admin.ready()
        ok = all(v == READY for v in checks.values())
        health = Health(status="ok" if ok else "unavailable", checks=checks)
        return JSONResponse(health.model_dump(), status_code=200 if ok else 503)

    @app.get("/metrics", tags=["operations"], summary="Prometheus metrics",
             response_class=Response)
    def metrics_endpoint() -> Response:
        return Response(registry.exposition(), media_type=CONTENT_TYPE)


def from_env() -> FastAPI:
    """The app from `Settings()` (the environment): what each `serve --workers` process runs."""
    settings = Settings()
    configure_logging(settings.log_level, settings.log_json)
    return create_app(settings)
