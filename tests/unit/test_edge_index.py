"""A crash during an index build, or after it was made current, loses nothing (the build itself:
tests/integration/test_edge_index_build.py)."""

from __future__ import annotations

import json
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

from hivemem.config import VectorIndexSettings
from hivemem.domain.models import Role, Turn
from hivemem.providers.embedders import HashingEmbedder
from hivemem.store.vectors.base import COLLECTIONS, TURNS
from hivemem.store.vectors.edge import EdgeVectorStore
from hivemem.store.vectors.edge_index import set_active

EMB = HashingEmbedder(64)
def _turns(session: str, start: int, n: int) -> list[Turn]:
    return [Turn(turn_id=f"t{i}", session_id=session, role=Role.USER,
                 content=f"note {i} about topic {i % 17}", seq=i, token_count=4,
                 timestamp=datetime(2026, 1, 1, tzinfo=UTC)) for i in range(start, start + n)]


def _write(store: EdgeVectorStore, turns: list[Turn]) -> None:
    store.upsert_turns(turns, EMB.embed_documents([t.content for t in turns]))


def test_an_interrupted_build_is_cleaned_up_and_a_finished_one_kept(tmp_path: Path) -> None:
    q = tmp_path / "q"
    store = EdgeVectorStore(q, EMB.dim, VectorIndexSettings(index_after_points=0))
    _write(store, _turns("s", 1, 20))
    store.close()
    # A crash while a copy was being built: the half-made generation folder goes.
    (q / f"{TURNS}.g1").mkdir()
    store = EdgeVectorStore(q, EMB.dim)
    try:
        assert store.count_turns("s") == 20
        assert not (q / f"{TURNS}.g1").exists()
    finally:
        store.close()
    # A crash after a build was made current, before the old folder was removed: the
    # current one is used and the old one goes.
    shutil.copytree(q / TURNS, q / f"{TURNS}.g2")
    set_active(q, TURNS, q / f"{TURNS}.g2")
    store = EdgeVectorStore(q, EMB.dim)
    try:
        _write(store, _turns("s", 21, 5))
        assert store.count_turns("s") == 25
        assert not (q / TURNS).exists()
    finally:
        store.close()
    store = EdgeVectorStore(q, EMB.dim)
    try:
        assert store.count_turns("s") == 25
    finally:
        store.close()


def test_only_the_tenant_key_takes_part_in_the_graph_build_also_in_an_older_shard(
        tmp_path: Path) -> None:
    """Per-value HNSW graphs (payload_m) for session_id only; a shard whose indexes were made
    before (plain schemas: every field in the build) gets them remade at open, and its
    filters answer as before."""
    import qdrant_edge as qe

    q = tmp_path / "q"
    store = EdgeVectorStore(q, EMB.dim, VectorIndexSettings(index_after_points=0))
    _write(store, _turns("s", 1, 20))
    _write(store, _turns("other", 1, 5))
    shard = store._shards[TURNS]
    for field in ("role", "visibility"):  # as an older hivemem made them
        shard.update(qe.UpdateOperation.delete_field_index(field))
        shard.update(qe.UpdateOperation.create_field_index(field, qe.PayloadSchemaType.Keyword))
    assert shard.info().payload_schema["role"].params is None
    store.close()

    store = EdgeVectorStore(q, EMB.dim, VectorIndexSettings(index_after_points=0))
    try:
        schema = store._shards[TURNS].info().payload_schema
        assert schema["session_id"].params.is_tenant is True
        assert schema["session_id"].params.enable_hnsw is None  # the engine's default: on
        for field in ("role", "visibility", "namespace", "agent_id", "seq", "written_at"):
            assert schema[field].params is not None, field
            assert schema[field].params.enable_hnsw is False, field
        assert store.count_turns("s") == 20
        assert store.count("turns", {"session_id": "s", "role": "user"}) == 20
        hits = store.search_turns("s", EMB.embed_query("note 7 about topic 7"), 3)
        assert hits[0].turn_id == "t7"
    finally:
        store.close()


def _search_threads_on_disk(q: Path) -> set[int]:
    return {json.loads((q / name / "edge_config.json").read_text())["max_search_threads"]
            for name in COLLECTIONS}


def test_search_threads_reach_the_engine_on_every_open(tmp_path: Path) -> None:
    # The engine keeps the value it was last given in the collection's config on disk, so a
    # store reopened with another setting must say it again (never fall back on the old one).
    q = tmp_path / "q"
    for setting, expected in ((3, 3), (0, os.cpu_count() or 1), (1, 1)):
        store = EdgeVectorStore(q, EMB.dim, VectorIndexSettings(search_threads=setting))
        try:
            _write(store, _turns("s", setting * 10 + 1, 5))
            assert store.count_turns("s") > 0
        finally:
            store.close()
        assert _search_threads_on_disk(q) == {expected}
