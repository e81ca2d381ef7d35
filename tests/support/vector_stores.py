"""Both vector stores for tests that must hold on each: qdrant-client on `:memory:` (the
server store's code) and qdrant-edge on a folder (the embedded engine)."""

from __future__ import annotations

from pathlib import Path

from hivemem.config import QdrantSettings
from hivemem.store.vectors.base import VectorStore
from hivemem.store.vectors.edge import EdgeVectorStore
from hivemem.store.vectors.server import ServerVectorStore

BACKENDS = ("server-memory", "edge")


def open_store(backend: str, folder: Path, dim: int) -> VectorStore:
    if backend == "edge":
        return EdgeVectorStore(folder, dim)
    return ServerVectorStore(QdrantSettings(), dim, location=":memory:")
