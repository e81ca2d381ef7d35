"""``/docs``: Swagger UI served from this process, never from a CDN.

FastAPI's default page loads its script and stylesheet from a CDN without integrity checks
(and cannot render offline). Here the two files come from the `swagger-ui-py` package (an
``api`` extra; it vendors Swagger UI 5, which renders OpenAPI 3.1). Without that package
``/docs`` says how to get it and where the schema is, instead of reaching out.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse

ASSETS = {"swagger-ui-bundle.js": "text/javascript", "swagger-ui.css": "text/css"}
STATIC = "/docs/static"


def swagger_assets() -> Path | None:
    """The folder holding Swagger UI's files, or None when `swagger-ui-py` is missing."""
    spec = importlib.util.find_spec("swagger_ui")
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent / "static"
    return folder if all((folder / name).is_file() for name in ASSETS) else None


def install_docs(app: FastAPI, openapi_url: str = "/openapi.json") -> None:
    folder = swagger_assets()
    if folder is None:
        @app.get("/docs", include_in_schema=False)
        def docs_missing() -> HTMLResponse:
            return HTMLResponse(
                "<!doctype html><title>hivemem API</title><p>The interactive docs need the"
                " <code>swagger-ui-py</code> package (<code>pip install"
                " 'hivemem[api]'</code>); they are served from this server, never from a CDN."
                f" The schema is at <a href='{openapi_url}'>{openapi_url}</a>.</p>")
        return

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url, title=f"{app.title} - API",
            swagger_js_url=f"{STATIC}/swagger-ui-bundle.js",
            swagger_css_url=f"{STATIC}/swagger-ui.css", swagger_favicon_url="")

    for name, media_type in ASSETS.items():
        app.add_api_route(f"{STATIC}/{name}", _asset(folder / name, media_type),
                          methods=["GET"], include_in_schema=False)


def _asset(path: Path, media_type: str) -> Callable[[], FileResponse]:
    def asset() -> FileResponse:
        return FileResponse(path, media_type=media_type,
                            headers={"Cache-Control": "public, max-age=86400"})
    return asset
