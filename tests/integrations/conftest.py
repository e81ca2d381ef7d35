"""One embedded hivemem store (hashing embedder, so no model loads) shared by the
framework adapter tests of a worker process; each test takes a namespace of its own."""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from hivemem import MemoryClient, ScopedMemory, Settings
from hivemem.providers.embedders import HashingEmbedder

DIM = 256
_names = itertools.count()


@pytest.fixture(scope="session")
def embedded() -> Iterator[MemoryClient]:
    folder = Path(tempfile.mkdtemp(prefix="hivemem-integrations-"))
    settings = Settings.model_validate({"embedding": {"provider": "hashing", "dim": DIM}})
    client = MemoryClient.local(folder / "memory", settings, embedder=HashingEmbedder(DIM),
                                workers=1, as_guest=False)
    yield client
    client.close()
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def namespace(request: pytest.FixtureRequest) -> str:
    """A namespace no other test of the run uses."""
    return f"ns-{request.node.name[:40].replace('[', '-').replace(']', '')}-{next(_names)}"


@pytest.fixture
def memory(embedded: MemoryClient, namespace: str) -> ScopedMemory:
    return embedded.scoped(namespace=namespace, agent_id="agent-1")
