"""One embedded hivemem store (hashing embedder, so no model loads) shared by the
framework adapter tests of a worker process; each test takes a namespace of its own."""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hivemem import MemoryClient, ScopedMemory, Settings
from hivemem.pipeline.topology import Keys
from hivemem.providers.embedders import HashingEmbedder
from hivemem.service.access import SessionAccess
from hivemem.store.state import TurnLog

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


@pytest.fixture
def writer(embedded: MemoryClient, namespace: str) -> ScopedMemory:
    """Agent "a" of the test's namespace, free to act as another agent (a namespace key)."""
    return embedded.scoped(namespace=namespace, agent_id="a")


@pytest.fixture
def agent_key(embedded: MemoryClient, namespace: str) -> ScopedMemory:
    """Agent "b" of the test's namespace, pinned to it (what an agent-bound key gets)."""
    return embedded.scoped(namespace=namespace, agent_id="b").pin()


@pytest.fixture
def scope_checks(namespace: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The session ids of the test's namespace checked against a scope, as they happen
    (`clear()` it before the call whose checks are counted): by `SessionAccess.require`,
    or, for a recall, in its first Redis read (`owned_by`)."""
    checked: list[str] = []
    require = SessionAccess.require
    send = TurnLog.send_recent_turns_and_progress

    def counted(self: SessionAccess, who: Any, session_id: str) -> Any:
        if getattr(who, "namespace", None) == namespace:
            checked.append(session_id)
        return require(self, who, session_id)

    def sent(self: TurnLog, *args: Any, owned_by: str | None = None, **kwargs: Any) -> Any:
        if owned_by == namespace:
            checked.append(Keys.split_name(args[1])[1])
        return send(self, *args, owned_by=owned_by, **kwargs)

    monkeypatch.setattr(SessionAccess, "require", counted)
    monkeypatch.setattr(TurnLog, "send_recent_turns_and_progress", sent)
    return checked
