"""The store boundary refuses what a reopen could not parse (issue 35, item 4): a payload
nested past the limit or holding an integer Qdrant cannot keep is `StoreRejected` before a
byte is written, whichever path it came by; and an engine that cannot read its write-ahead
log back says so instead of blaming another process."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from hivemem.config import QdrantSettings
from hivemem.domain.models import Role, Turn
from hivemem.errors import StoreRejected, StoreUnavailable
from hivemem.providers.embedders import HashingEmbedder
from hivemem.store.vectors import edge
from hivemem.store.vectors.edge import EdgeVectorStore
from hivemem.store.vectors.payload_limits import MAX_PAYLOAD_DEPTH, payload_problem
from hivemem.store.vectors.server import ServerVectorStore

EMB = HashingEmbedder(64)


def nested(levels: int) -> dict[str, Any]:
    root: dict[str, Any] = {}
    node = root
    for _ in range(levels - 1):
        node["a"] = {}
        node = node["a"]
    return root


def turn(metadata: dict[str, Any]) -> Turn:
    # Built past the domain's checks, as a buggy path or a hand-made record would.
    return Turn.model_construct(
        turn_id=uuid.uuid4().hex, session_id="s1", agent_id=None, role=Role.USER,
        content="hello", markers=(), metadata=metadata, timestamp=datetime.now(UTC),
        namespace="default", visibility="shared", seq=1, token_count=1, duplicate=False)


def test_payload_problem_names_the_field_and_the_cause() -> None:
    assert payload_problem({"metadata": nested(MAX_PAYLOAD_DEPTH - 1)}) is None
    problem = payload_problem({"metadata": nested(MAX_PAYLOAD_DEPTH + 1)})
    assert problem is not None and problem.startswith("metadata is nested more than")
    deep_list: Any = []
    for _ in range(5000):  # deeper than Python's recursion limit: measured, not crashed on
        deep_list = [deep_list]
    assert "nested" in (payload_problem({"metadata": {"x": deep_list}}) or "")
    assert "64-bit" in (payload_problem({"metadata": {"n": 2**70}}) or "")
    assert payload_problem({"metadata": {"n": 2**63 - 1, "b": True}}) is None


def test_edge_refuses_what_it_could_not_reopen(tmp_path: Path) -> None:
    store = EdgeVectorStore(tmp_path / "q", EMB.dim)
    store.upsert_turns([turn({"ok": 1})], EMB.embed_documents(["hello"]))
    with pytest.raises(StoreRejected, match="metadata is nested more than"):
        store.upsert_turns([turn(nested(200))], EMB.embed_documents(["hello"]))
    with pytest.raises(StoreRejected, match="64-bit"):
        store.upsert_turns([turn({"n": 2**70})], EMB.embed_documents(["hello"]))
    store.close()
    again = EdgeVectorStore(tmp_path / "q", EMB.dim)  # opens: nothing unreadable was written
    assert again.count_turns() == 1
    again.close()


def test_server_store_refuses_it_too() -> None:
    store = ServerVectorStore(QdrantSettings(), EMB.dim, location=":memory:")
    with pytest.raises(StoreRejected, match="nested"):
        store.upsert_turns([turn(nested(200))], EMB.embed_documents(["hello"]))
    assert store.count_turns() == 0


def test_an_unreadable_log_is_named_not_blamed_on_a_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = EdgeVectorStore(tmp_path / "q", EMB.dim)
    # Written without the check: what an older hivemem could write.
    monkeypatch.setattr(edge, "check_payloads", lambda *_: None)
    store.upsert_turns([turn(nested(200))], EMB.embed_documents(["hello"]))
    store.close()
    with pytest.raises(StoreUnavailable) as caught:
        EdgeVectorStore(tmp_path / "q", EMB.dim)
    assert "RecursionLimitExceeded" in str(caught.value)
    assert "another process" not in str(caught.value)
