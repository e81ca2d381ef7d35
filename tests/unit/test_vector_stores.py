"""Both vector-store backends pass the same tests: qdrant-client `:memory:` and Qdrant Edge."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from hivemem.config import QdrantSettings
from hivemem.domain.fact import Fact
from hivemem.domain.models import Role, Turn
from hivemem.domain.scope import Scope
from hivemem.errors import StoreUnavailable
from hivemem.providers.embedders import HashingEmbedder
from hivemem.store.vectors.base import VectorStore
from hivemem.store.vectors.edge import EdgeVectorStore
from hivemem.store.vectors.server import ServerVectorStore
from tests.support.vector_stores import BACKENDS, open_store

EMB = HashingEmbedder(64)
NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VectorStore]:
    s = open_store(request.param, tmp_path / "q", EMB.dim)
    yield s
    s.close()


def turn(session: str, seq: int, content: str, **kw: object) -> Turn:
    return Turn(turn_id=f"t{seq}", session_id=session, role=Role.USER, content=content,
                timestamp=datetime(2026, 1, 1, 0, seq % 60, tzinfo=UTC), seq=seq,
                token_count=3, **kw)  # type: ignore[arg-type]


def test_upsert_is_idempotent_and_filtered(store: VectorStore) -> None:
    a = [turn("s1", i, f"cats and dogs {i}") for i in range(1, 6)]
    b = [turn("s2", i, f"rockets {i}") for i in range(1, 4)]
    store.upsert_turns(a, EMB.embed_documents([t.content for t in a]))
    store.upsert_turns(b, EMB.embed_documents([t.content for t in b]))
    store.upsert_turns(a, EMB.embed_documents([t.content for t in a]))  # redelivery
    assert store.count_turns() == 8
    assert store.count_turns("s1") == 5
    hits = store.search_turns("s2", EMB.embed_query("cats and dogs"), 10)
    assert {h.turn.session_id for h in hits} == {"s2"}
    hits = store.search_turns("s1", EMB.embed_query("cats and dogs 3"), 2)
    assert hits[0].turn.seq == 3 and hits[0].vector is not None
    assert hits[0].score == pytest.approx(1.0, abs=1e-3)


def test_payload_round_trips(store: VectorStore) -> None:
    t = turn("s1", 7, "Decision: Postgres", markers=("decision",), agent_id="planner",
             metadata={"k": [1, {"x": "y"}]})
    store.upsert_turns([t], EMB.embed_documents([t.content]))
    got = store.get_turns("s1", ["t7", "missing"])
    assert len(got) == 1
    assert got[0].turn == t
    assert got[0].vector is not None and np.linalg.norm(got[0].vector) == pytest.approx(1, abs=1e-4)
    assert list(store.iter_turns("s1")) == [t]
    assert list(store.iter_turns("nope")) == []


def test_iter_turns_pages(store: VectorStore) -> None:
    turns = [turn("s1", i, f"x {i}") for i in range(1, 1201)]
    store.upsert_turns(turns, EMB.embed_documents([t.content for t in turns]))
    assert sorted(t.seq for t in store.iter_turns()) == list(range(1, 1201))


def test_edge_persists_and_locks(tmp_path: Path) -> None:
    s = EdgeVectorStore(tmp_path / "q", EMB.dim)
    t = turn("s1", 1, "hello")
    s.upsert_turns([t], EMB.embed_documents(["hello"]))
    with pytest.raises(StoreUnavailable):
        EdgeVectorStore(tmp_path / "q", EMB.dim)  # second opener in the same process tree
    s.close()
    again = EdgeVectorStore(tmp_path / "q", EMB.dim)
    assert again.count_turns() == 1
    again.close()
    with pytest.raises(StoreUnavailable, match="64-d"):
        EdgeVectorStore(tmp_path / "q", 32)


def test_lexical_search_uses_bm25_with_idf(store: VectorStore) -> None:
    """Sparse BM25 vectors, IDF from the collection: the rare term outranks the common one."""
    from hivemem.providers.lexical import LexicalEncoder

    lex = LexicalEncoder()
    texts = [f"deploy notes number {i} for the service" for i in range(20)]
    texts += ["error PG-4471 when the service restarts", "unrelated lunch menu"]
    turns = [turn("s1", i + 1, t) for i, t in enumerate(texts)]
    turns.append(turn("s2", 1, "error PG-4471 in another session"))
    store.upsert_turns(turns, EMB.embed_documents([t.content for t in turns]),
                       lex.documents([t.content for t in turns]))
    hits = store.search_turns_lexical("s1", lex.query("service error PG-4471"), 5)
    assert hits[0].turn.content == "error PG-4471 when the service restarts"
    assert all(h.turn.session_id == "s1" for h in hits)
    assert hits[0].vector is not None and hits[0].vector.shape == (EMB.dim,)
    both = store.search_turns_lexical(["s1", "s2"], lex.query("PG-4471"), 5)
    assert {h.turn.session_id for h in both} == {"s1", "s2"}
    assert store.search_turns_lexical("s1", lex.query("the"), 5) == []  # a stop word only
    by_seq = store.turns_by_seq("s1", [3, 21, 99])
    assert sorted(h.turn.seq for h in by_seq) == [3, 21]
    assert all(h.vector is not None for h in by_seq)


def test_edge_store_from_before_keyword_search_is_migrated(tmp_path: Path) -> None:
    """Shards made without the lexical vector get it on open, from each point's stored text."""
    import qdrant_edge as qe

    from hivemem.providers.lexical import LexicalEncoder
    from hivemem.store.vectors.base import turn_payload, turn_point_id

    old = turn("s1", 1, "the invoice job crashed with error PG-4471")
    for name in ("turns", "facts"):
        shard = qe.EdgeShard.create(str(tmp_path / "q" / name), qe.EdgeConfig(
            vectors={"dense": qe.EdgeVectorParams(size=EMB.dim, distance=qe.Distance.Cosine)}))
        if name == "turns":
            shard.update(qe.UpdateOperation.upsert_points([qe.Point(
                id=turn_point_id("s1", "t1"),
                vector={"dense": EMB.embed_documents([old.content])[0].tolist()},
                payload=turn_payload(old))]))
        shard.flush()
        shard.close()
    store = EdgeVectorStore(tmp_path / "q", EMB.dim)
    try:
        hits = store.search_turns_lexical("s1", LexicalEncoder().query("PG-4471"), 5)
        assert [h.turn.content for h in hits] == [old.content]
        assert store.count_turns("s1") == 1
    finally:
        store.close()
    assert sorted(p.name for p in (tmp_path / "q").iterdir()) == [
        "fact-vectors.rows", "facts", "turn-vectors.rows", "turns", "vectors.filled"]
    reopened = EdgeVectorStore(tmp_path / "q", EMB.dim)  # already migrated: opens as is
    assert reopened.count_turns() == 1
    reopened.close()


def test_server_collection_without_lexical_degrades_to_dense() -> None:
    from qdrant_client import QdrantClient
    from qdrant_client import models as qm

    from hivemem.providers.lexical import LexicalEncoder

    settings = QdrantSettings()
    client = QdrantClient(location=":memory:")
    for name in ("turns", "facts"):
        client.create_collection(settings.collection_prefix + name, vectors_config={
            "dense": qm.VectorParams(size=EMB.dim, distance=qm.Distance.COSINE)})
    store = ServerVectorStore(settings, EMB.dim, location=":memory:")
    store._client = client  # the pre-existing collections above
    store._without_lexical.clear()
    for name in ("turns", "facts"):
        store._ensure_collection(settings.collection_prefix + name)
    lex = LexicalEncoder()
    t = turn("s1", 1, "error PG-4471")
    store.upsert_turns([t], EMB.embed_documents([t.content]), lex.documents([t.content]))
    assert store.search_turns_lexical("s1", lex.query("PG-4471"), 5) == []
    assert [h.turn.turn_id for h in store.search_turns("s1", EMB.embed_query("error"), 5)] == [
        "t1"]


def test_turns_between_reads_a_seq_range(store: VectorStore) -> None:
    turns = [turn("s1", i, f"note {i}") for i in range(1, 31)]
    turns += [turn("s1", i, f"private {i}", agent_id="bob", visibility="private")
              for i in range(31, 36)]
    turns += [turn("s2", i, f"other {i}") for i in range(1, 31)]
    store.upsert_turns(turns, EMB.embed_documents([t.content for t in turns]))
    assert sorted(t.seq for t in store.turns_between("s1", 10, 14)) == [10, 11, 12, 13, 14]
    assert store.turns_between("s1", 14, 10) == []
    assert sorted(t.seq for t in store.turns_between("s1", 29, 40)) == [29, 30, 31, 32, 33,
                                                                      34, 35]
    alice = Scope("default", "alice")
    assert sorted(t.seq for t in store.turns_between("s1", 29, 40, alice)) == [29, 30]
    assert {t.session_id for t in store.turns_between("s2", 1, 100)} == {"s2"}


def test_visible_fact_ids_checks_only_the_named_facts(store: VectorStore) -> None:
    ids = [str(uuid.uuid4()) for _ in range(3)]
    facts = [Fact(fact_id=ids[0], session_id="s1", content="shared one", created_at=NOW,
                  valid_from=NOW),
             Fact(fact_id=ids[1], session_id="s1", content="bob's", agent_id="bob",
                  visibility="private", created_at=NOW, valid_from=NOW),
             Fact(fact_id=ids[2], session_id="s2", content="elsewhere", created_at=NOW,
                  valid_from=NOW)]
    store.upsert_facts(facts, EMB.embed_documents([f.content for f in facts]))
    alice, bob = Scope("default", "alice"), Scope("default", "bob")
    assert store.visible_fact_ids("s1", [*ids, "not-a-uuid"], alice) == {ids[0]}
    assert store.visible_fact_ids("s1", ids, bob) == {ids[0], ids[1]}
    assert store.visible_fact_ids("s2", ids[:2], bob) == set()


def test_edge_points_without_a_namespace_are_the_default_namespaces(tmp_path: Path) -> None:
    """Written before namespaces (or by a caller that sends none): on open such points get
    ``default``, and a point written without one gets it as it is written, so the default
    namespace's filter is one match (`EdgeVectorStore._in_namespace`)."""
    from hivemem.store.vectors.base import TURNS, Point

    folder = tmp_path / "q"
    store = EdgeVectorStore(folder, EMB.dim)
    old = turn("s1", 1, "the invoice job crashed with error PG-4471")
    store.upsert_turns([old], EMB.embed_documents([old.content]))
    point = store.get_turns("s1", ["t1"])[0].point_id
    store._update("strip", TURNS, store._qe.UpdateOperation.delete_payload(
        [point], ["namespace"]), 0)
    assert "namespace" not in store.get_turns("s1", ["t1"])[0].payload
    vector = EMB.embed_documents(["a second note"])[0]
    payload = {k: v for k, v in store.scroll(TURNS, None).__next__().payload.items()
               if k != "namespace"} | {"turn_id": "t2", "seq": 2, "content": "a second note"}
    store.upsert(TURNS, [Point(str(uuid.uuid4()), vector, payload)])
    assert [h.turn_id for h in store.search_turns("s1", vector, 5)] == ["t2"]
    store.close()
    (folder / "vectors.filled").unlink()  # as a folder from before namespaces has none
    reopened = EdgeVectorStore(folder, EMB.dim)
    try:
        found = reopened.search_turns("s1", EMB.embed_query(old.content), 5)
        assert sorted(h.turn_id for h in found) == ["t1", "t2"]
        assert all(h.payload["namespace"] == "default" for h in found)
        assert reopened.search_turns("s1", vector, 5, Scope(namespace="default"))
    finally:
        reopened.close()
