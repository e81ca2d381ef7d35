"""Context-window vectors: each turn embedded with the turns before it, written by the embed
worker, searched by recall next to the turn's own vector (weights.window), on both stores."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hivemem import PRESETS, MemoryClient, Settings
from hivemem.config import QdrantSettings
from hivemem.domain.models import Role, Turn
from hivemem.pipeline.topology import Keys
from hivemem.providers.embedders import HashingEmbedder
from hivemem.providers.lexical import LexicalEncoder
from hivemem.store.vectors.base import VectorStore
from hivemem.store.vectors.edge import EdgeVectorStore
from hivemem.store.vectors.server import ServerVectorStore
from hivemem.workers.embed import EmbedHandler
from tests.support.vector_stores import BACKENDS, open_store

EMB = HashingEmbedder(256)
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VectorStore]:
    s = open_store(request.param, tmp_path / "q", EMB.dim)
    yield s
    s.close()


def turn(seq: int, content: str, **kw: object) -> Turn:
    return Turn(turn_id=f"t{seq}", session_id="s", role=Role.USER, content=content,
                timestamp=T0 + timedelta(seconds=seq), seq=seq, token_count=3,
                **kw)  # type: ignore[arg-type]


class _NoStreams:
    """The embed handler's Redis side is not under test here."""

    def publish_embedded(self, _entries: object) -> None:
        pass


def _embed(store: VectorStore, batches: list[list[Turn]], window_turns: int = 2,
           window_mode: str = "text") -> None:
    handler = EmbedHandler(EMB, store, _NoStreams(), None, Keys(),  # type: ignore[arg-type]
                           window_turns=window_turns, window_mode=window_mode)
    for batch in batches:
        handler(batch)


def _windows(store: VectorStore) -> dict[int, np.ndarray]:
    hits = store.turns_by_seq("s", [1, 2, 3, 4], with_windows=True)
    return {h.seq: h.window for h in hits if h.window is not None}


def _windows_of_their_own(store: VectorStore) -> dict[int, np.ndarray]:
    """The windows that say more than their turn: a turn written without one ranks on its
    own vector (qdrant-edge keeps fused vectors, so there its window is its own vector)."""
    hits = store.turns_by_seq("s", [1, 2, 3, 4], with_windows=True)
    return {h.seq: h.window for h in hits if h.window is not None
            and not np.allclose(h.window, h.vector, atol=1e-6)}


def test_the_embed_worker_writes_each_turns_window_from_the_turns_before_it(
    store: VectorStore,
) -> None:
    turns = [turn(1, "which database for billing"), turn(2, "postgres, definitely"),
             turn(3, "agreed"), turn(4, "ship it friday")]
    # Turn 3's predecessors come from the store (an earlier batch), turn 4's from both.
    _embed(store, [turns[:2], turns[2:]])
    windows = _windows(store)
    assert store.has_windows and sorted(windows) == [1, 2, 3, 4]
    own = {h.seq: h.vector for h in store.turns_by_seq("s", [1, 2, 3, 4])}
    # Nothing before the first turn: its window is its own vector.
    assert np.allclose(windows[1], own[1])
    expected = EMB.embed_documents([
        "which database for billing\npostgres, definitely",
        "which database for billing\npostgres, definitely\nagreed",
        "postgres, definitely\nagreed\nship it friday",
    ])
    for seq, row in zip((2, 3, 4), expected, strict=True):
        assert np.allclose(windows[seq], row, atol=1e-6)
    query = EMB.embed_query("database billing postgres")
    dense, hits = store.search_turns_and_windows("s", query, 4)
    # Ranked on dense + window together; turn 2's window (question + reply) is the nearest.
    assert hits and max(hits, key=lambda h: h.score).seq == 2
    fused = [(d.score + w.score) / 2 for d, w in zip(dense, hits, strict=True)]
    assert fused == sorted(fused, reverse=True)
    # Recall asks the store for the window similarity of turns the window search missed:
    # the same cosine the search scored.
    assert store.window_similarities(hits, query) == pytest.approx(
        [h.score for h in hits], abs=1e-5)


def test_bm25_hits_and_recent_turns_give_their_window_similarity_as_the_engine_does(
    store: VectorStore,
) -> None:
    """Recall takes a BM25 hit's or a recent turn's window similarity from the vectors it
    carries when it carries the fused one (qdrant-edge), else asks the store: the same
    number either way."""
    turns = [turn(1, "which database for billing"), turn(2, "postgres, definitely"),
             turn(3, "agreed, postgres it is")]
    _embed(store, [turns])
    query = EMB.embed_query("database billing postgres")
    for hits in (store.search_turns_lexical("s", LexicalEncoder().query("postgres"), 4),
                 store.get_turns("s", ["t1", "t2", "t3"])):
        assert len(hits) >= 2
        asked = store.window_similarities(hits, query)
        carried = [h.window_score(query) for h in hits]
        assert carried == pytest.approx(asked, abs=1e-5)
        assert all(h.carries_fused for h in hits) == isinstance(store, EdgeVectorStore)


def test_window_similarities_of_turns_from_several_sessions(store: VectorStore) -> None:
    handler = EmbedHandler(EMB, store, _NoStreams(), None, Keys(),  # type: ignore[arg-type]
                           window_turns=2, window_mode="text")
    for session in ("s", "other"):
        handler([t.model_copy(update={"session_id": session}) for t in (
            turn(1, "which database for billing"), turn(2, "postgres, definitely"))])
    query = EMB.embed_query("database billing postgres")
    _dense, hits = store.search_turns_and_windows(["s", "other"], query, 4)
    # Same seqs in both sessions: each turn gets its own window's similarity.
    assert sorted((h.session_id, h.seq) for h in hits) == [
        ("other", 1), ("other", 2), ("s", 1), ("s", 2)]
    assert store.window_similarities(hits, query) == pytest.approx(
        [h.score for h in hits], abs=1e-5)
    one = [h for h in hits if h.session_id == "s"]
    assert store.window_similarities(one, query) == pytest.approx(
        [h.score for h in one], abs=1e-5)


def test_another_agents_private_turn_stays_out_of_a_shared_turns_window(
    store: VectorStore,
) -> None:
    _embed(store, [[turn(1, "my salary is secret", agent_id="a", visibility="private"),
                    turn(2, "lunch at noon", agent_id="b")]])
    window = _windows(store)[2]
    assert np.allclose(window, EMB.embed_documents(["lunch at noon"])[0])


def test_mean_windows_add_up_the_turns_own_vectors_across_batches(
    store: VectorStore,
) -> None:
    turns = [turn(1, "which database for billing"), turn(2, "postgres, definitely"),
             turn(3, "agreed", agent_id="b"), turn(4, "ship it friday"),
             turn(5, "secret plan", agent_id="a", visibility="private"), turn(6, "ok")]
    _embed(store, [turns[:2], turns[2:]], window_mode="mean")
    own = dict(zip(range(1, 7), EMB.embed_documents([t.content for t in turns]), strict=True))
    windows = {h.seq: h.window
               for h in store.turns_by_seq("s", list(range(1, 7)), with_windows=True)}

    def mean(*seqs: int) -> np.ndarray:
        total = np.sum([own[s] for s in seqs], axis=0)
        return total / np.linalg.norm(total)

    assert np.allclose(windows[1], own[1])  # nothing before it
    assert np.allclose(windows[2], mean(1, 2), atol=1e-6)
    assert np.allclose(windows[3], mean(1, 2, 3), atol=1e-6)  # 1 and 2 from the store
    assert np.allclose(windows[4], mean(2, 3, 4), atol=1e-6)
    # Another agent's private turn stays out of a shared turn's window.
    assert np.allclose(windows[6], mean(4, 6), atol=1e-6)


def test_window_turns_0_writes_no_windows(store: VectorStore) -> None:
    _embed(store, [[turn(1, "a"), turn(2, "b")]], window_turns=0)
    assert _windows_of_their_own(store) == {}
    query = EMB.embed_query("a")
    dense, windows = store.search_turns_and_windows("s", query, 5)
    # No window, or (qdrant-edge) the turn's own vector as its window: it ranks on that.
    assert len(dense) == 2 and [h.score for h in windows] in (
        [], pytest.approx([h.score for h in dense], abs=1e-5))
    hits = store.turns_by_seq("s", [1, 2])
    assert len(hits) == 2 and store.window_similarities(hits, query) in (
        [None, None], pytest.approx([float(h.vector @ query) for h in hits], abs=1e-5))


_FOUR = ("which database do we use for the billing service", "postgres, definitely",
         "the office plants need water", "the cafeteria menu changed again")


def _four_turns(client: MemoryClient) -> tuple[str, ...]:
    """Session "s": a question, its reply (which shares no word with the question) and two
    unrelated turns, embedded (t0-t3)."""
    for i, text in enumerate(_FOUR):
        client.ingest("s", "user", text, timestamp=T0 + timedelta(minutes=i), turn_id=f"t{i}")
    client.wait_until_processed("s", 30)
    return _FOUR


def test_recall_weighs_the_window_of_a_reply_to_what_the_query_asks(
    tmp_path: Path, settings: Settings
) -> None:
    with MemoryClient.local(tmp_path / "m", settings, embedder=EMB) as client:
        _four_turns(client)
        query = "billing database"
        base = PRESETS["balanced"]
        flat = base.model_copy(update={"weights": base.weights.model_copy(
            update={"window": 0.0, "neighbour": 0.0, "recency": 0.0})})
        windowed = flat.model_copy(update={"weights": flat.weights.model_copy(
            update={"window": 1.0})})
        without = {i.source_id: i.score for i in client.recall("s", query, 500, preset=flat)}
        with_ = {i.source_id: i.score for i in client.recall("s", query, 500,
                                                             preset=windowed)}
        # The reply shares no word with the query; its window (question + reply) does.
        assert with_["t1"] > without["t1"] + 0.1
        # A turn whose window adds nothing relevant does not gain.
        assert with_["t3"] <= without["t3"] + 1e-6


def test_edge_store_from_before_window_vectors_is_migrated(tmp_path: Path) -> None:
    """A shard made without the window vector gets the fused one on open; its old points
    have no window (their own vector stands for it: recall ranks them on their turn
    vectors) and new points are written with one."""
    import qdrant_edge as qe

    from hivemem.store.vectors.base import turn_payload, turn_point_id

    old = turn(1, "the invoice job crashed")
    for name in ("turns", "facts"):
        shard = qe.EdgeShard.create(str(tmp_path / "q" / name), qe.EdgeConfig(
            vectors={"dense": qe.EdgeVectorParams(size=EMB.dim, distance=qe.Distance.Cosine)},
            sparse_vectors={"lexical": qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)}))
        if name == "turns":
            shard.update(qe.UpdateOperation.upsert_points([qe.Point(
                id=turn_point_id("s", "t1"),
                vector={"dense": EMB.embed_documents([old.content])[0].tolist()},
                payload=turn_payload(old))]))
        shard.flush()
        shard.close()
    store = EdgeVectorStore(tmp_path / "q", EMB.dim)
    try:
        assert store.count_turns("s") == 1 and _windows_of_their_own(store) == {}
        _embed(store, [[turn(2, "restarted it")]])
        assert sorted(_windows_of_their_own(store)) == [2]
        assert store.indexer.builds == 0 and not store.indexer.running  # 1 point: no graph
        query = EMB.embed_query("invoice job crashed restarted")
        dense, windows = store.search_turns_and_windows("s", query, 5)
        scores = {h.seq: (d.score, h.score) for d, h in zip(dense, windows, strict=True)}
        assert scores[1][1] == pytest.approx(scores[1][0], abs=1e-5)  # its own vector
        assert scores[2][1] > scores[2][0] + 0.1  # its window holds the crashed job
    finally:
        store.close()
    assert sorted(p.name for p in (tmp_path / "q").iterdir()) == [
        "fact-vectors.rows", "facts", "turn-vectors.rows", "turns", "vectors.filled"]


def _old_layout_store(path: Path, turns: list[Turn], own: np.ndarray,
                      windows: np.ndarray) -> None:
    """A store as hivemem wrote it before fused vectors: dense and window, both cosine."""
    import qdrant_edge as qe

    from hivemem.store.vectors.base import turn_payload, turn_point_id

    for name in ("turns", "facts"):
        shard = qe.EdgeShard.create(str(path / name), qe.EdgeConfig(
            vectors={v: qe.EdgeVectorParams(size=EMB.dim, distance=qe.Distance.Cosine)
                     for v in ("dense", "window")},
            sparse_vectors={"lexical": qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)}))
        if name == "turns":
            shard.update(qe.UpdateOperation.upsert_points([qe.Point(
                id=turn_point_id("s", t.turn_id),
                vector={"dense": own[i].tolist(), "window": windows[i].tolist()},
                payload=turn_payload(t)) for i, t in enumerate(turns)]))
        shard.flush()
        shard.close()


def test_edge_store_with_window_vectors_is_migrated_to_fused_vectors(tmp_path: Path) -> None:
    """A shard of the layout before fused vectors (dense + window, both cosine) is copied into
    the fused layout on open: each turn keeps its window (recovered from the fused vector),
    and the fused search ranks on the mean of the two similarities."""


    turns = [turn(1, "which database for billing"), turn(2, "postgres, definitely")]
    own = EMB.embed_documents([t.content for t in turns])
    old_windows = EMB.embed_documents(["a window about invoices", "billing database postgres"])
    _old_layout_store(tmp_path / "q", turns, own, old_windows)
    store = EdgeVectorStore(tmp_path / "q", EMB.dim)
    try:
        windows = _windows(store)
        for seq in (1, 2):
            assert np.allclose(windows[seq], old_windows[seq - 1], atol=1e-5)
        query = EMB.embed_query("billing database postgres")
        dense, window = store.search_turns_and_windows("s", query, 2)
        assert [h.seq for h in dense] == [2, 1]  # turn 2's window is the query's words
        for d, w in zip(dense, window, strict=True):
            assert d.score == pytest.approx(float(own[d.seq - 1] @ query), abs=1e-5)
            assert w.score == pytest.approx(float(old_windows[d.seq - 1] @ query), abs=1e-5)
    finally:
        store.close()
    assert sorted(p.name for p in (tmp_path / "q").iterdir()) == [
        "fact-vectors.rows", "facts", "turn-vectors.rows", "turns", "vectors.filled"]


def test_a_migrated_edge_store_large_enough_gets_its_graph_built(tmp_path: Path) -> None:
    """The copy has no graph: a store past `index_after_points` starts a build on open
    (growth alone would wait for as many new points again)."""

    from hivemem.config import VectorIndexSettings
    from hivemem.store.vectors.base import TURNS

    turns = [turn(i, f"note {i}") for i in range(1, 61)]
    own = EMB.embed_documents([t.content for t in turns])
    _old_layout_store(tmp_path / "q", turns, own, own)
    store = EdgeVectorStore(tmp_path / "q", EMB.dim, VectorIndexSettings(
        index_after_points=50, index_build_nice=0))
    try:
        store.indexer.wait()
        assert store.indexer.builds == 1
        assert store.count_turns("s") == 60
        assert store.search_turns_and_windows("s", own[4], 1)[0][0].seq == 5
        assert store.index_info(TURNS)["points"] == 60
    finally:
        store.close()


def test_server_collection_without_window_vectors_ranks_on_turn_vectors() -> None:
    from qdrant_client import QdrantClient
    from qdrant_client import models as qm

    settings = QdrantSettings()
    client = QdrantClient(location=":memory:")
    for name in ("turns", "facts"):  # made the way hivemem made them before windows
        client.create_collection(
            settings.collection_prefix + name,
            vectors_config={"dense": qm.VectorParams(size=EMB.dim,
                                                     distance=qm.Distance.COSINE)},
            sparse_vectors_config={"lexical": qm.SparseVectorParams(modifier=qm.Modifier.IDF)})
    store = ServerVectorStore(settings, EMB.dim, location=":memory:")
    store._client = client  # the pre-existing collections above
    store._without_window.clear()
    for name in ("turns", "facts"):
        store._ensure_collection(settings.collection_prefix + name)
    try:
        assert not store.has_windows
        _embed(store, [[turn(1, "which database"), turn(2, "postgres")]])
        assert _windows(store) == {}
        assert store.search_turns_and_windows("s", EMB.embed_query("postgres"), 5)[1] == []
        assert [h.seq for h in store.search_turns("s", EMB.embed_query("postgres"), 1)] == [2]
    finally:
        store.close()


def test_update_windows_writes_the_window_in_place_and_never_brings_a_turn_back(
    store: VectorStore, tmp_path: Path
) -> None:
    """What the window stage writes with: only the window vector changes, and a turn
    deleted meanwhile (an import replacing the session) stays deleted."""
    turns = [turn(1, "which database for billing"), turn(2, "postgres, definitely")]
    _embed(store, [turns], window_mode="mean")
    before = {h.seq: h for h in store.turns_by_seq("s", [1, 2], with_windows=True)}
    new = EMB.embed_documents(["a brand new window", "another one"])
    assert store.update_windows("s", ["t1", "t2"], new) == 2
    after = {h.seq: h for h in store.turns_by_seq("s", [1, 2], with_windows=True)}
    for seq in (1, 2):
        assert np.allclose(after[seq].window, new[seq - 1], atol=1e-6)
        assert np.allclose(after[seq].vector, before[seq].vector)
        assert after[seq].turn == before[seq].turn
    assert store.search_turns_lexical("s", LexicalEncoder().query("postgres"), 2)[0].seq == 2
    assert store.update_windows("s", ["t1", "gone"], new) == 1
    assert store.get_turns("s", ["gone"]) == []
    assert store.count_turns("s") == 2


def test_update_windows_through_a_qdrant_server_api(tmp_path: Path) -> None:
    """The same against the REST stand-in. A point gone before the store's read is left
    out; one deleted between its read and its write makes Qdrant answer 404 for the whole
    request, and the store then updates the others one by one."""
    from tests.support.qdrant_standin import spawn

    standin = spawn(tmp_path / "standin")
    store = ServerVectorStore(QdrantSettings(url=standin.url), EMB.dim)
    try:
        _embed(store, [[turn(1, "which database"), turn(2, "postgres")]], window_mode="mean")
        new = EMB.embed_documents(["w1", "w2"])
        assert store.update_windows("s", ["t1", "gone", "t2"], np.stack(
            [new[0], new[0], new[1]])) == 2
        after = {h.seq: h for h in store.turns_by_seq("s", [1, 2], with_windows=True)}
        assert np.allclose(after[2].window, new[1], atol=1e-6)
        assert store.count_turns("s") == 2
        # Deleted between the read and the write: the read saw every point.
        real_retrieve = store._client.retrieve

        def stale_read(collection: str, ids: list[str], **kw: Any) -> Any:
            records = real_retrieve(collection, ids[:1], **kw)
            return [r.model_copy(update={"id": i}) for i in ids for r in records[:1]]

        store._client.retrieve = stale_read  # type: ignore[method-assign]
        assert store.update_windows("s", ["t2", "gone"], np.stack([new[0], new[0]])) == 1
        store._client.retrieve = real_retrieve  # type: ignore[method-assign]
        after = {h.seq: h for h in store.turns_by_seq("s", [1, 2], with_windows=True)}
        assert np.allclose(after[2].window, new[0], atol=1e-6)
        assert store.count_turns("s") == 2
    finally:
        store.close()
        standin.stop()


def test_a_qdrant_server_gets_the_fused_search_as_one_request(tmp_path: Path) -> None:
    """A server collection keeps dense and window vectors apart: both searches go in one
    batch request, ranked together as the two searches one by one rank them."""
    from tests.support.qdrant_standin import QdrantStandin

    with QdrantStandin(tmp_path / "standin") as standin:
        store = ServerVectorStore(QdrantSettings(url=standin.url), EMB.dim)
        try:
            _embed(store, [[turn(1, "which database for billing"),
                            turn(2, "postgres, definitely"), turn(3, "agreed"),
                            turn(4, "ship it friday")]])
            query = EMB.embed_query("database billing postgres")
            before = len(standin.requests("/points/query"))
            fused = store.search_fused("turns", query, 3, {"session_id": "s"})
            asked = [r.path for r in standin.requests("/points/query")[before:]]
            assert len(asked) == 1 and asked[0].endswith("/points/query/batch")
            one_by_one = VectorStore.search_fused(store, "turns", query, 3,
                                                  {"session_id": "s"})
            assert len(standin.requests("/points/query")[before:]) == 3  # + two searches
            assert [h.id for h in fused] == [h.id for h in one_by_one]
            assert [h.score for h in fused] == pytest.approx([h.score for h in one_by_one])
        finally:
            store.close()


def _weigh_windows_only(**update: object) -> Any:
    base = PRESETS["balanced"]
    return base.model_copy(update={**update, "weights": base.weights.model_copy(
        update={"window": 1.0, "neighbour": 0.0, "recency": 0.0})})


def test_without_a_window_search_the_candidates_get_their_window_similarities(
    tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    with MemoryClient.local(tmp_path / "m", settings, embedder=EMB) as client:
        _four_turns(client)
        # Relevance (dense, window, lexical fused): the boosts move as the boundary worker
        # closes the episode between the two recalls.
        searched = {i.source_id: i.components.relevance for i in client.recall(
            "s", "billing database", 500, preset=_weigh_windows_only())}

        def no_window_search(*_a: object, **_k: object) -> object:
            raise AssertionError("window_search=False searches no window vectors")

        for name in ("search_fused", "search_turns_and_windows"):
            monkeypatch.setattr(EdgeVectorStore, name, no_window_search)
        among = {i.source_id: i.components.relevance for i in client.recall(
            "s", "billing database", 500, preset=_weigh_windows_only(window_search=False))}
    # Every turn is a dense candidate here: the same similarities, asked of the engine.
    assert among.keys() == searched.keys() == {"t0", "t1", "t2", "t3"}
    assert among == pytest.approx(searched, abs=1e-5)


def test_a_neighbour_turn_brings_its_own_window_similarity(
    tmp_path: Path, settings: Settings
) -> None:
    with MemoryClient.local(tmp_path / "m", settings, embedder=EMB) as client:
        texts = _four_turns(client)
        # One dense hit (t0), no BM25, no recent window: t1 comes in as its neighbour.
        policy = _weigh_windows_only(search_limit=1, neighbours=1, lexical=False,
                                     recent_turns=0, window_search=False)
        items = {i.source_id: i for i in client.recall("s", texts[0], 500, preset=policy)}
        store = client.vector_store()
        query = EMB.embed_query(texts[0])
        (t1,) = store.turns_by_seq("s", [2])
        (window,) = store.window_similarities([t1], query)
    assert set(items) == {"t0", "t1"} and window is not None
    neighbour = items["t1"].components
    assert neighbour.relevance == pytest.approx((neighbour.dense + window) / 2, abs=1e-5)


def test_engine_float_lists_convert_to_the_float32_values_numpy_gives() -> None:
    """`as_vector` packs the engine's lists with `struct` (2.5x faster than numpy's
    conversion); each value must round to the same float32 as numpy's cast, and what
    `struct` refuses (beyond float32's range) must still convert as numpy does."""
    from hivemem.store.vectors.base import as_vector

    rng = np.random.default_rng(3)
    values = [*rng.standard_normal(380).tolist(), 1e-45, -0.0, 3.4028234e38, 1 / 3]
    got = as_vector({"dense": values})
    assert got is not None and got.dtype == np.float32 and got.shape == (384,)
    assert got.tobytes() == np.asarray(values, dtype=np.float32).tobytes()
    huge = [1e300, *values[1:]]
    with np.errstate(over="ignore"):
        expected = np.asarray(huge, dtype=np.float32)
        assert (as_vector(huge) == expected).all()
    assert as_vector({"fused": values}) is None and as_vector(None) is None


def test_a_shard_just_closed_is_loaded_once_its_lock_is_released(tmp_path: Path) -> None:
    """The engine may hold a closed shard's WAL lock a moment longer (its background work):
    the migration's reload waits for it, bounded; any other error is raised at once."""
    from types import SimpleNamespace

    calls: list[str] = []

    def load(path: str) -> str:
        calls.append(path)
        if len(calls) < 3:
            raise RuntimeError(f"failed to open WAL {path}/wal: Can't init WAL: Kind(WouldBlock)")
        return "shard"

    fake = SimpleNamespace(_qe=SimpleNamespace(EdgeShard=SimpleNamespace(load=load)))
    assert EdgeVectorStore._load_just_closed(fake, tmp_path) == "shard"  # type: ignore[arg-type]
    assert len(calls) == 3

    def broken(path: str) -> str:
        raise RuntimeError("segment is corrupt")

    fake.__dict__["_qe"] = SimpleNamespace(EdgeShard=SimpleNamespace(load=broken))
    with pytest.raises(RuntimeError, match="corrupt"):
        EdgeVectorStore._load_just_closed(fake, tmp_path)  # type: ignore[arg-type]

    def held(path: str) -> str:
        raise RuntimeError("Can't init WAL: Kind(WouldBlock)")

    fake.__dict__["_qe"] = SimpleNamespace(EdgeShard=SimpleNamespace(load=held))
    with pytest.raises(RuntimeError, match="WouldBlock"):
        EdgeVectorStore._load_just_closed(fake, tmp_path, wait_s=0.1)  # type: ignore[arg-type]
