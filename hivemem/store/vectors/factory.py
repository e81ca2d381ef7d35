"""Build the configured vector store without importing the backend that is not used."""

from __future__ import annotations

from pathlib import Path

from hivemem.config import QdrantSettings
from hivemem.errors import ConfigurationError
from hivemem.store.vectors.base import VectorStore


def open_vector_store(settings: QdrantSettings, dim: int) -> VectorStore:
    if settings.url:
        from hivemem.store.vectors.server import ServerVectorStore

        return ServerVectorStore(settings, dim)
    if settings.path is not None:
        from hivemem.store.vectors.edge import EdgeVectorStore

        return EdgeVectorStore(Path(settings.path), dim, settings.index)
    raise ConfigurationError(
        "no vector store configured: set HIVEMEM_QDRANT__URL (a Qdrant server) or"
        " HIVEMEM_QDRANT__PATH (the embedded engine on a folder)"
    )
