"""The HTTP API (FastAPI; install the ``api`` extra). `create_app(settings)` builds it."""

from hivemem.api.app import create_app

__all__ = ["create_app"]
