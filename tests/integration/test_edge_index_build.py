"""The embedded engine builds its HNSW index in a child process while the store keeps
serving: writes made during the build are in the built collection, and a crash mid-swap
loses nothing."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from hivemem.config import VectorIndexSettings
from hivemem.domain.models import Role, Turn
from hivemem.providers.embedders import HashingEmbedder
from hivemem.store.vectors.base import TURNS
from hivemem.store.vectors.edge import EdgeVectorStore

pytestmark = pytest.mark.integration

EMB = HashingEmbedder(64)
# Tiny thresholds so that a few hundred points make the optimiser build HNSW graphs.
SMALL = VectorIndexSettings(index_after_points=300, indexing_threshold_kb=1,
                            full_scan_threshold_kb=1, hnsw_ef_construct=16)


def _turns(session: str, start: int, n: int) -> list[Turn]:
    return [Turn(turn_id=f"t{i}", session_id=session, role=Role.USER,
                 content=f"note {i} about topic {i % 17}", seq=i, token_count=4,
                 timestamp=datetime(2026, 1, 1, tzinfo=UTC)) for i in range(start, start + n)]


def _write(store: EdgeVectorStore, turns: list[Turn]) -> None:
    store.upsert_turns(turns, EMB.embed_documents([t.content for t in turns]))



def test_growth_starts_a_background_build_that_keeps_later_writes(tmp_path: Path) -> None:
    store = EdgeVectorStore(tmp_path / "q", EMB.dim, SMALL)
    try:
        for start in range(1, 400, 50):
            _write(store, _turns("s", start, 50))
        assert store.indexer.running or store.indexer.builds == 1
        # While it builds, this thread is not blocked: it writes and searches.
        written = 400
        while store.indexer.builds == 0:
            if written < 500:  # fewer than the 300 that would start another build
                _write(store, _turns("s", written + 1, 5))
                written += 5
            hits = store.search_turns("s", EMB.embed_query("note 7 about topic 7"), 3)
            assert hits and hits[0].turn_id == "t7"
            time.sleep(0.01)
        store.indexer.wait()
        assert store.indexer.builds == 1
        # The built files were read in before the swap (recall does not fault them in).
        assert store.indexer.warmed is not None and store.indexer.warmed.files > 0
        assert store.indexer.warmed.bytes > 0
        assert written > 400  # writes went on during the build
        assert store.count_turns("s") == written
        info = store._shards[TURNS].info()
        assert info.indexed_vectors_count > 0
        assert store.search_turns("s", EMB.embed_query(f"note {written} about topic"
                                                       f" {written % 17}"), 1)[0].seq == written
        # The old folder is gone; the built generation is the collection now.
        folders = sorted(p.name for p in (tmp_path / "q").iterdir() if p.name.startswith(TURNS))
        assert len([f for f in folders if not f.endswith(".current")]) == 1
    finally:
        store.close()
    reopened = EdgeVectorStore(tmp_path / "q", EMB.dim, SMALL)
    try:
        assert reopened.count_turns("s") == written
    finally:
        reopened.close()


def test_an_int8_index_rescores_with_the_original_vectors(tmp_path: Path) -> None:
    """With int8 quantization (the default) the graph scores quantised vectors; the hits
    recall gets carry exact cosines (rescored), which recall's scoring compares across
    searches."""
    settings = SMALL.model_copy(update={"index_after_points": 0})
    assert settings.quantization == "int8"
    store = EdgeVectorStore(tmp_path / "q", EMB.dim, settings)
    try:
        turns = _turns("s", 1, 400)
        vectors = EMB.embed_documents([t.content for t in turns])
        store.upsert_turns(turns, vectors)
        store.build_index(TURNS)
        assert store.index_info(TURNS)["indexed_vectors"] > 0
        query = EMB.embed_query("note 7 about topic 7")
        hits = store.search_turns("s", query, 5)
        assert hits[0].turn_id == "t7"
        for hit in hits:
            exact = float(vectors[hit.seq - 1] @ query)
            assert abs(hit.score - exact) < 1e-5, (hit.turn_id, hit.score, exact)
        # Without rescoring the scores are the quantised ones (so the check above can fail).
        store.index = settings.model_copy(update={"hnsw_ef": 64})
        raw = store._query("search", TURNS, store._qe.Query.Nearest(query.tolist(),
                           using="dense"), 5, {"session_id": "s"},
                           store._qe.SearchParams(quantization=store._qe.QuantizationSearchParams(
                               rescore=False)))
        assert any(abs(h.score - float(vectors[int(h.payload["seq"]) - 1] @ query)) > 1e-5
                   for h in raw)
    finally:
        store.close()


def test_recall_goes_on_while_the_build_copies_the_collection_and_writes_wait(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The copy at a build's start holds the write lock only: searches are answered during
    it, a write waits for its end and is in the built collection."""
    import threading

    from hivemem.store.vectors import edge_index

    copying, release = threading.Event(), threading.Event()
    real_copy = edge_index._copy

    def held_copy(source: Path, target: Path) -> None:
        copying.set()
        release.wait(30)
        real_copy(source, target)

    monkeypatch.setattr(edge_index, "_copy", held_copy)
    store = EdgeVectorStore(tmp_path / "q", EMB.dim, SMALL.model_copy(
        update={"index_after_points": 0}))
    try:
        _write(store, _turns("s", 1, 50))
        store.build_index(TURNS, wait=False)
        assert copying.wait(10)
        found: list[str] = []
        reader = threading.Thread(target=lambda: found.extend(
            h.turn_id for h in store.search_turns("s", EMB.embed_query("note 7 about topic 7"),
                                                  1)))
        reader.start()
        reader.join(10)
        assert not reader.is_alive() and found == ["t7"]  # answered while the copy is held
        writer = threading.Thread(target=_write, args=(store, _turns("s", 51, 1)))
        writer.start()
        writer.join(0.5)
        assert writer.is_alive()  # the write waits for the copy
        release.set()
        writer.join(10)
        assert not writer.is_alive()
        store.indexer.wait()
        assert store.indexer.builds == 1
        assert store.count_turns("s") == 51
    finally:
        release.set()
        store.close()


def test_tenant_graphs_only_search_several_sessions_exactly(tmp_path: Path) -> None:
    """hnsw_m 0 builds per-session graphs only; a search over several sessions (related
    sessions) then finds the same top-k as an exact scan."""
    import numpy as np
    import qdrant_edge as qe

    settings = VectorIndexSettings(index_after_points=0, indexing_threshold_kb=1,
                                   full_scan_threshold_kb=1, hnsw_m=0, payload_m=16,
                                   index_build_nice=0)
    store = EdgeVectorStore(tmp_path / "q", 64, settings)
    rng = np.random.default_rng(1)
    try:
        for session in ("a", "b", "c"):
            vectors = rng.standard_normal((600, 64)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            store.upsert_turns(_turns(session, 1, 600), vectors)
        store.build_index(TURNS)
        assert store.indexer.builds == 1
        found = []
        for _ in range(10):
            query = rng.standard_normal(64).astype(np.float32)
            query /= np.linalg.norm(query)
            hits = store.search_turns(["a", "b"], query, 20)
            exact = store._query("search", TURNS, qe.Query.Nearest(query.tolist(),
                                 using="dense"), 20, {"session_id": ["a", "b"]},
                                 qe.SearchParams(exact=True))
            found.append(len({(h.session_id, h.turn_id) for h in hits}
                             & {(h.payload["session_id"], h.payload["turn_id"])
                                for h in exact}) / 20)
        assert min(found) == 1.0
    finally:
        store.close()
