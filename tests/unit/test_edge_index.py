"""A crash in the middle of swapping in a built index loses nothing (the build itself:
tests/integration/test_edge_index_build.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from hivemem.config import VectorIndexSettings
from hivemem.domain.models import Role, Turn
from hivemem.providers.embedders import HashingEmbedder
from hivemem.store.vectors.base import TURNS
from hivemem.store.vectors.edge import EdgeVectorStore
from hivemem.store.vectors.edge_index import REPLACED

EMB = HashingEmbedder(64)
def _turns(session: str, start: int, n: int) -> list[Turn]:
    return [Turn(turn_id=f"t{i}", session_id=session, role=Role.USER,
                 content=f"note {i} about topic {i % 17}", seq=i, token_count=4,
                 timestamp=datetime(2026, 1, 1, tzinfo=UTC)) for i in range(start, start + n)]


def _write(store: EdgeVectorStore, turns: list[Turn]) -> None:
    store.upsert_turns(turns, EMB.embed_documents([t.content for t in turns]))


def test_a_swap_cut_short_by_a_crash_is_undone_on_open(tmp_path: Path) -> None:
    store = EdgeVectorStore(tmp_path / "q", EMB.dim, VectorIndexSettings(index_after_points=0))
    _write(store, _turns("s", 1, 20))
    store.close()
    # The crash came after the old folder was moved aside and before the new one was in.
    (tmp_path / "q" / TURNS).rename(tmp_path / "q" / f"{TURNS}{REPLACED}")
    (tmp_path / "q" / f"{TURNS}.indexing").mkdir()
    store = EdgeVectorStore(tmp_path / "q", EMB.dim)
    try:
        assert store.count_turns("s") == 20
        assert not (tmp_path / "q" / f"{TURNS}.indexing").exists()
    finally:
        store.close()
