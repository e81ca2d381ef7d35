"""Recall keeps each session's facts between calls and re-reads only what was written since:
every change still shows on the next call (both vector-store backends)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from hivemem import MemoryClient, Settings
from hivemem.domain.fact import Fact, FactStatus
from hivemem.providers.embedders import HashingEmbedder
from hivemem.recall.known_facts import KnownFacts
from hivemem.runtime.gated_vectors import GatedVectorStore
from hivemem.store.vectors.base import DENSE, FACTS, TURNS, Hit, VectorStore, Where
from tests.support.vector_stores import BACKENDS, open_store

EMB = HashingEmbedder(64)
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VectorStore]:
    s = open_store(request.param, tmp_path / "q", EMB.dim)
    yield s
    s.close()


def _fact(name: str, session: str = "s", **kw: object) -> Fact:
    return Fact(fact_id=uuid.uuid5(uuid.NAMESPACE_URL, name).hex, session_id=session,
                content=name, created_at=T0, valid_from=T0, **kw)  # type: ignore[arg-type]


def _write(store: VectorStore, *facts: Fact) -> None:
    store.upsert_facts(list(facts), EMB.embed_documents([f.content for f in facts]))


def test_changes_additions_and_deletions_show_on_the_next_read(store: VectorStore) -> None:
    known = KnownFacts(store)
    pg = _fact("postgres")
    _write(store, pg, _fact("elsewhere", session="other"))
    first = known.get("s")
    assert [f.content for f in first.facts] == ["postgres"]
    assert known.get("s").revision == first.revision  # nothing written: same answer

    mysql = _fact("mysql", supersedes=pg.fact_id)
    _write(store, pg.model_copy(update={"status": FactStatus.SUPERSEDED,
                                        "superseded_by": mysql.fact_id}), mysql)
    second = known.get("s")
    assert second.revision != first.revision
    by_content = {f.content: f for f in second.facts}
    assert by_content["postgres"].status == FactStatus.SUPERSEDED
    assert by_content["mysql"].status == FactStatus.ACTIVE

    store.delete(FACTS, {"session_id": "s"})
    _write(store, _fact("sqlite"))
    assert [f.content for f in known.get("s").facts] == ["sqlite"]
    store.delete(FACTS, {"session_id": "s"})
    assert known.get("s").facts == ()


def test_a_write_stamped_before_the_last_read_is_still_found(store: VectorStore) -> None:
    """A writer whose clock is behind the reader's (or whose upsert landed late) stamps its
    facts earlier than the reader's last read: within the margin they are still picked up."""
    known = KnownFacts(store, margin_s=5.0, clock=lambda: time.time() + 3.0)
    _write(store, _fact("a"))
    assert len(known.get("s").facts) == 1
    _write(store, _fact("a", status=FactStatus.ARCHIVED))  # same fact, changed
    assert known.get("s").facts[0].status == FactStatus.ARCHIVED


def test_recall_sees_a_switch_reflected_after_an_earlier_recall(
    tmp_path: Path, settings: Settings
) -> None:
    with MemoryClient.local(tmp_path / "m", settings, embedder=HashingEmbedder(1024)) as client:
        client.ingest("s", "user", "We decided to use PostgreSQL for the database",
                      markers=["decision"], timestamp=T0, turn_id="pg")
        client.close_episode("s")
        client.wait_until_reflected("s", 30)
        before = client.recall("s", "which database are we using now?", token_budget=40)
        assert any("PostgreSQL" in i.content for i in before)

        client.ingest("s", "user",
                      "Change of plan: we switch the database to MySQL, ops only supports it",
                      timestamp=T0 + timedelta(minutes=2), turn_id="mysql")
        client.close_episode("s")
        client.wait_until_reflected("s", 30)
        after = list(client.recall("s", "which database are we using now?", token_budget=40))
        assert after and "MySQL" in after[0].content
        assert not any("PostgreSQL" in i.content for i in after)


def test_a_guest_store_reads_only_what_was_written_since(store: VectorStore) -> None:
    """A store that offers only the primitives (the embedded owner's guests: the proxy, the
    gated store the reflection process is served through) reads just the facts stamped
    since the cursor, through a range on the stamp, not every fact of the session."""
    scrolled: list[str] = []

    class Primitives(GatedVectorStore):
        def scroll(self, collection: str, where: Where | None, *,
                   with_vectors: bool = False) -> Iterator[Hit]:
            for hit in super().scroll(collection, where, with_vectors=with_vectors):
                scrolled.append(hit.id)
                yield hit

    guest = Primitives(store, lambda: None)
    _write(store, *(_fact(f"old {i}") for i in range(20)))
    known = KnownFacts(guest, margin_s=0.0)
    assert len(known.get("s").facts) == 20
    time.sleep(0.01)
    scrolled.clear()
    _write(store, _fact("new"))
    assert len(known.get("s").facts) == 21
    assert len(scrolled) == 1


def test_the_embedded_engine_counts_every_write_it_applies(tmp_path: Path) -> None:
    """`changes` grows with each upsert, vector update and delete of that collection (a
    server, written to by other processes too, cannot say: None)."""
    store = open_store("edge", tmp_path / "q", EMB.dim)
    try:
        seen = [store.changes(FACTS)]
        _write(store, _fact("a"))
        seen.append(store.changes(FACTS))
        point = str(uuid.UUID(_fact("a").fact_id))
        assert store.update_vectors(FACTS, DENSE, [(point, EMB.embed_query("b"))]) == 1
        seen.append(store.changes(FACTS))
        store.delete(FACTS, {"session_id": "s"})
        seen.append(store.changes(FACTS))
        assert seen == sorted(set(seen)) and len(seen) == 4
        assert store.changes(TURNS) == 0  # per collection
    finally:
        store.close()
    server = open_store("server-memory", tmp_path / "q2", EMB.dim)
    assert server.changes(FACTS) is None
    server.close()


def test_facts_are_not_read_again_while_the_store_applied_no_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a store that counts the writes it applies, a quiet session's facts cost no
    read at all (the count of a session's facts grew with them, on every recall); any
    write to the facts, also another session's or a delete, makes the next call read."""
    store = open_store("edge", tmp_path / "q", EMB.dim)
    reads: list[str] = []
    for method in ("count_facts", "facts_written_after"):
        original = getattr(store, method)

        def counting(*a: object, _m: str = method, _o: Any = original, **k: object) -> Any:
            reads.append(_m)
            return _o(*a, **k)

        monkeypatch.setattr(store, method, counting)
    try:
        known = KnownFacts(store)
        _write(store, _fact("a"), _fact("b"))
        first = known.get("s")
        assert len(first) == 2 and reads
        reads.clear()
        assert known.get("s").revision == first.revision and known.get("s")
        assert reads == []
        _write(store, _fact("elsewhere", session="other"))
        assert known.get("s").revision == first.revision
        assert reads  # read: the write could have been this session's
        reads.clear()
        known.get("s")
        assert reads == []
        store.delete(FACTS, {"session_id": "s", "fact_id": [_fact("a").fact_id]})
        assert [f.content for f in known.get("s").facts] == ["b"]
    finally:
        store.close()


def test_search_hits_reuse_the_facts_read_only_for_the_same_write(store: VectorStore) -> None:
    """A search's hit is the known fact when its id and write stamp are the ones read
    (`read_already`; the edge store then reads no more of its payload); a newer write of
    it, or one not read yet, is validated anew from its whole payload. Both searches."""
    from hivemem.providers.lexical import LexicalEncoder
    from hivemem.recall.known_facts import read_already

    lexical = LexicalEncoder()

    def write(*facts: Fact) -> None:
        texts = [f.content for f in facts]
        store.upsert_facts(list(facts), EMB.embed_documents(texts), lexical.documents(texts))

    def search(snaps: list[Any]) -> list[list[Fact]]:
        statuses = ["active"]
        dense = store.search_facts("s", EMB.embed_query("postgres"), 5, statuses,
                                   known=read_already(snaps))
        sparse = store.search_facts_lexical("s", lexical.query("postgres"), 5, statuses,
                                            known=read_already(snaps))
        return [[h.fact for h in dense], [h.fact for h in sparse]]

    known = KnownFacts(store)
    pg = _fact("postgres")
    write(pg)
    snap = known.get("s")
    [read] = snap.facts
    for facts in search([snap]):
        assert facts == [pg] and facts[0] is read
    # Rewritten (another stamp), not read again yet: validated from the new payload.
    write(pg.model_copy(update={"content": "postgres 16"}))
    for facts in search([snap]):
        assert [f.content for f in facts] == ["postgres 16"] and facts[0] is not read
    fresh = known.get("s")  # read again: now it is the one known
    for facts in search([fresh]):
        assert facts[0] is fresh.index.by_id[pg.fact_id]
    # Not known at all (another session's facts): whole, as without `known`.
    for facts in search([]):
        assert [f.content for f in facts] == ["postgres 16"]
        assert facts == [h.fact for h in store.search_facts(
            "s", EMB.embed_query("postgres"), 5, ["active"])]
