"""The embedded store's turn vectors as rows (`edge_rows`): what recall reads is what was
written, through rewrites, deletes, vacuums, crashes and stores written before rows."""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from hivemem.domain.fact import Fact, FactStatus
from hivemem.domain.models import Role, Turn
from hivemem.providers.embedders import HashingEmbedder
from hivemem.store.vectors.base import FACTS, TURNS, fused_vector
from hivemem.store.vectors.edge import FILLED, EdgeVectorStore
from hivemem.store.vectors.edge_rows import FILES, ROW, RowVectors

FILE = FILES[TURNS]
NOW = datetime(2026, 1, 1, tzinfo=UTC)

EMB = HashingEmbedder(64)


def turn(seq: int, content: str) -> Turn:
    return Turn(turn_id=f"t{seq}", session_id="s", role=Role.USER, content=content,
                timestamp=datetime(2026, 1, 1, 0, seq % 60, tzinfo=UTC), seq=seq,
                token_count=3)


def write(store: EdgeVectorStore, turns: list[Turn], windows: np.ndarray | None = None
          ) -> np.ndarray:
    vectors = EMB.embed_documents([t.content for t in turns])
    store.upsert_turns(turns, vectors, windows=windows)
    return vectors


def file_rows(folder: Path) -> np.ndarray:
    data = np.fromfile(folder / FILE, dtype=np.float32)
    return data.reshape(-1, 2 * EMB.dim)


def test_hits_carry_the_vectors_written_read_as_rows(tmp_path: Path) -> None:
    store = EdgeVectorStore(tmp_path / "q", EMB.dim)
    try:
        turns = [turn(i, f"note {i} about the deploy") for i in range(1, 6)]
        windows = EMB.embed_documents([f"window {i}" for i in range(1, 6)])
        vectors = write(store, turns, windows)
        hits = {h.seq: h for h in store.turns_by_seq("s", [1, 2, 3, 4, 5],
                                                      with_windows=True)}
        for i in range(5):
            hit = hits[i + 1]
            assert ROW in hit.payload
            np.testing.assert_allclose(hit.vector, vectors[i], atol=1e-6)
            np.testing.assert_allclose(hit.window, windows[i] / np.linalg.norm(windows[i]),
                                       atol=1e-5)
        found = store.search_turns("s", vectors[2], 1)[0]
        assert found.seq == 3
        np.testing.assert_allclose(found.vector, vectors[2], atol=1e-6)
        assert len(file_rows(tmp_path / "q")) == 5
    finally:
        store.close()


def test_a_turn_written_again_keeps_its_row_and_a_refined_window_rewrites_it(
        tmp_path: Path) -> None:
    store = EdgeVectorStore(tmp_path / "q", EMB.dim)
    try:
        turns = [turn(1, "the release is on Friday"), turn(2, "tests are green")]
        vectors = write(store, turns)
        write(store, turns)  # at least once: the same turns again
        assert len(file_rows(tmp_path / "q")) == 2
        window = EMB.embed_documents(["a refined window"])
        store.update_windows("s", ["t2"], window)
        hit = store.get_turns("s", ["t2"])[0]
        np.testing.assert_allclose(hit.vector, vectors[1], atol=1e-6)
        row = file_rows(tmp_path / "q")[hit.payload[ROW]]
        np.testing.assert_allclose(row[EMB.dim:], fused_vector(vectors[1], window[0]),
                                   atol=1e-6)
    finally:
        store.close()


def test_a_deleted_turn_leaves_no_vector_in_the_rows(tmp_path: Path) -> None:
    store = EdgeVectorStore(tmp_path / "q", EMB.dim)
    try:
        write(store, [turn(1, "my card number is private"), turn(2, "the weather is fine")])
        gone = store.get_turns("s", ["t1"])[0].payload[ROW]
        kept = store.get_turns("s", ["t2"])[0].payload[ROW]
        store.delete(TURNS, {"session_id": "s", "turn_id": "t1"})
        rows = file_rows(tmp_path / "q")
        assert not rows[gone].any()
        assert rows[kept].any()
        assert [h.turn_id for h in store.get_turns("s", ["t1", "t2"])] == ["t2"]
    finally:
        store.close()


def test_a_store_written_before_rows_gets_them_on_open(tmp_path: Path) -> None:
    folder = tmp_path / "q"
    store = EdgeVectorStore(folder, EMB.dim)
    turns = [turn(i, f"fact {i} about the budget") for i in range(1, 4)]
    vectors = write(store, turns)
    # As an older version left it: no rows file, no row in the payloads.
    store._update("strip", TURNS, store._qe.UpdateOperation.delete_payload(
        [h.point_id for h in store.get_turns("s", ["t1", "t2", "t3"])], [ROW]), 0)
    store.close()
    os.remove(folder / FILE)
    os.remove(folder / FILLED)
    reopened = EdgeVectorStore(folder, EMB.dim)
    try:
        assert len(file_rows(folder)) == 3
        hits = {h.seq: h for h in reopened.turns_by_seq("s", [1, 2, 3])}
        for i in range(3):
            assert ROW in hits[i + 1].payload
            np.testing.assert_allclose(hits[i + 1].vector, vectors[i], atol=1e-6)
    finally:
        reopened.close()


def test_a_point_naming_no_row_is_read_from_the_engine(tmp_path: Path) -> None:
    store = EdgeVectorStore(tmp_path / "q", EMB.dim)
    try:
        vectors = write(store, [turn(1, "alpha beta"), turn(2, "gamma delta")])
        store._update("strip", TURNS, store._qe.UpdateOperation.delete_payload(
            [store.get_turns("s", ["t1"])[0].point_id], [ROW]), 0)
        hits = {h.seq: h for h in store.turns_by_seq("s", [1, 2])}
        assert ROW not in hits[1].payload
        np.testing.assert_allclose(hits[1].vector, vectors[0], atol=1e-6)
        np.testing.assert_allclose(hits[2].vector, vectors[1], atol=1e-6)
    finally:
        store.close()


def test_a_partial_row_from_a_crash_is_cut_and_a_vacuum_zeroes_rows_no_point_names(
        tmp_path: Path) -> None:
    folder = tmp_path / "q"
    store = EdgeVectorStore(folder, EMB.dim)
    write(store, [turn(1, "first"), turn(2, "second")])
    # A crash between a row and its point: a row no point names, then half a row.
    orphan = store._rows[TURNS].append(np.ones((1, EMB.dim), np.float32),
                                np.ones((1, EMB.dim), np.float32))[0]
    store.close()
    with open(folder / FILE, "ab") as fh:
        fh.write(b"\x01" * (EMB.dim * 4))
    reopened = EdgeVectorStore(folder, EMB.dim)
    try:
        assert len(reopened._rows[TURNS]) == 3
        assert file_rows(folder)[orphan].any()
        reopened.vacuum()
        rows = file_rows(folder)
        assert not rows[orphan].any()
        assert rows[0].any() and rows[1].any()
        write(reopened, [turn(3, "third")])
        assert reopened.get_turns("s", ["t3"])[0].payload[ROW] == 3
    finally:
        reopened.close()


def test_row_vectors_append_rewrite_erase(tmp_path: Path) -> None:
    rows = RowVectors(tmp_path / FILE, 4)
    try:
        a = np.arange(8, dtype=np.float32).reshape(2, 4)
        assert list(rows.append(a, a + 10)) == [0, 1]
        dense, fused = rows.read([1, 0])
        np.testing.assert_array_equal(dense, a[[1, 0]])
        np.testing.assert_array_equal(fused, a[[1, 0]] + 10)
        assert list(rows.append(a + 1, a)) == [2, 3]
        dense, _ = rows.read([3])  # past the first map: mapped again
        np.testing.assert_array_equal(dense, a[[1]] + 1)
        rows.write_half([0], np.full((1, 4), 7, np.float32), fused=True)
        rows.erase([1])
        dense, fused = rows.read([0, 1])
        np.testing.assert_array_equal(fused[0], np.full(4, 7))
        assert not dense[1].any() and not fused[1].any()
        with pytest.raises(IndexError):
            rows.read([4])
    finally:
        rows.close()


def fact(content: str) -> Fact:
    return Fact(fact_id=str(uuid.uuid4()), session_id="s", content=content, created_at=NOW,
                valid_from=NOW)


def test_facts_carry_their_vectors_read_as_rows_through_rewrites_and_deletes(
        tmp_path: Path) -> None:
    folder = tmp_path / "q"
    store = EdgeVectorStore(folder, EMB.dim)
    try:
        facts = [fact("we deploy on Fridays"), fact("the budget is 40k"), fact("Ana leads")]
        vectors = EMB.embed_documents([f.content for f in facts])
        store.upsert_facts(facts, vectors)
        hits = store.search_facts("s", vectors[1], 3, [s.value for s in FactStatus])
        assert hits[0].fact.fact_id == facts[1].fact_id
        for hit in hits:
            i = next(j for j, f in enumerate(facts) if f.fact_id == hit.fact.fact_id)
            np.testing.assert_allclose(hit.vector, vectors[i], atol=1e-6)
        # A new version of a fact (its status changed) keeps its row.
        store.upsert_facts([facts[0].model_copy(update={"status": FactStatus.SUPERSEDED})],
                           vectors[:1])
        rows = np.fromfile(folder / FILES[FACTS], dtype=np.float32).reshape(-1, EMB.dim)
        assert len(rows) == 3
        got = store.get_facts([facts[0].fact_id])[0]
        assert got.fact.status == FactStatus.SUPERSEDED
        np.testing.assert_allclose(got.vector, vectors[0], atol=1e-6)
        store.delete(FACTS, {"fact_id": facts[2].fact_id})
        rows = np.fromfile(folder / FILES[FACTS], dtype=np.float32).reshape(-1, EMB.dim)
        assert not rows[2].any() and rows[0].any()
    finally:
        store.close()


def test_rows_are_looked_for_once_and_again_when_a_rows_file_is_gone(tmp_path: Path) -> None:
    folder = tmp_path / "q"
    store = EdgeVectorStore(folder, EMB.dim)
    vectors = write(store, [turn(1, "one"), turn(2, "two")])
    store.close()
    assert (folder / FILLED).exists()
    os.remove(folder / FILE)  # removed by hand: the marker alone does not skip the fill
    reopened = EdgeVectorStore(folder, EMB.dim)
    try:
        hits = {h.seq: h for h in reopened.turns_by_seq("s", [1, 2])}
        np.testing.assert_allclose(hits[2].vector, vectors[1], atol=1e-6)
        assert len(file_rows(folder)) == 2
    finally:
        reopened.close()
