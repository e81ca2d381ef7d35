"""The lens answers an index keeps between recalls (`FactIndex.kept_answers`): the next
lens over the same facts answers from them, and any write drops them, so a fact updated,
superseded or added is seen by the next recall; each asker and overlay keeps its own;
several sessions or no asker key answer afresh."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from hivemem import MemoryClient
from hivemem.domain.fact import Fact, FactKind, FactStatus
from hivemem.domain.recall.fact_index import CurrencyLens, FactIndex
from hivemem.providers.embedders import HashingEmbedder

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def _fact(fact_id: str, content: str, turns: list[str], *, at: int = 0,
          **update: object) -> Fact:
    return Fact(fact_id=fact_id, session_id="s", content=content, subject="database",
                source_turn_ids=turns, created_at=T0 + timedelta(seconds=at), valid_from=T0,
                **update)


def _lens(index: FactIndex, key: object = "anyone", overlay: list[Fact] | None = None,
          admits: Callable[[Fact], bool] | None = None) -> CurrencyLens:
    lens = CurrencyLens()
    lens.add("s", index, admits=admits, overlay=overlay or [], admit_key=key)
    return lens


def test_a_superseding_write_is_seen_by_the_next_lens() -> None:
    index = FactIndex()
    index.put(_fact("a", "The database is Postgres 15", ["t1"]))
    for _ in range(2):  # the second lens answers from what the first kept
        lens = _lens(index)
        assert lens.replaced("turn:s:t1") is None
        assert lens.replaced("fact:a") is None
    assert index.kept_answers("anyone").replaced == {"turn:s:t1": None, "fact:a": None}
    index.put(_fact("b", "The database is MySQL 8 now", ["t2"], at=1))
    assert not index.kept_answers("anyone").replaced  # the write dropped them
    index.put(_fact("a", "The database is Postgres 15", ["t1"], status=FactStatus.SUPERSEDED,
                    superseded_by="b"))
    for _ in range(2):
        lens = _lens(index)
        assert lens.replaced("turn:s:t1") == ("fact:b", "turn:s:t2")
        assert lens.replaced("fact:a") == ("fact:b", "turn:s:t2")
    index.clear()
    assert _lens(index).replaced("turn:s:t1") is None


def test_owners_are_kept_and_dropped_alike() -> None:
    index = FactIndex()
    index.put(_fact("a", "Ann likes tea", ["t1"], agent_id="ann", kind=FactKind.PREFERENCE))
    assert _lens(index).owner("turn:s:t1") == "ann"
    assert index.kept_answers("anyone").owner == {"turn:s:t1": "ann"}
    index.put(_fact("a", "Ann likes tea", ["t3"], agent_id="ann", kind=FactKind.PREFERENCE))
    assert _lens(index).owner("turn:s:t1") is None
    assert _lens(index).owner("turn:s:t3") == "ann"


def test_overlays_no_key_and_askers_keep_apart() -> None:
    index = FactIndex()
    index.put(_fact("a", "The database is Postgres 15", ["t1"]))
    assert _lens(index).replaced("turn:s:t1") is None  # kept for "anyone"
    overlay = [_fact("a", "The database is Postgres 15", ["t1"],
                     status=FactStatus.SUPERSEDED, superseded_by="b"),
               _fact("b", "The database is MySQL 8 now", ["t2"], at=1)]
    for _ in range(2):  # kept for these overlay objects
        assert _lens(index, overlay=overlay).replaced("turn:s:t1") == ("fact:b", "turn:s:t2")
    assert index.kept_answers("anyone", tuple(overlay)).replaced == {
        "turn:s:t1": ("fact:b", "turn:s:t2")}
    assert _lens(index).replaced("turn:s:t1") is None  # not for the index alone
    # An overlay made anew (the unreflected turns changed) is another one.
    again = [f.model_copy() for f in overlay]
    assert not index.kept_answers("anyone", tuple(again)).replaced
    assert _lens(index, overlay=again[1:]).replaced("turn:s:t1") is None
    # A private successor: seen by its owner's key, not by another asker's.
    index.put(_fact("b", "The database is MySQL 8 now", ["t2"], at=1, agent_id="bob",
                    visibility="private"))
    index.put(_fact("a", "The database is Postgres 15", ["t1"], status=FactStatus.SUPERSEDED,
                    superseded_by="b"))

    def sees(asker: str) -> Callable[[Fact], bool]:
        return lambda f: f.visibility == "shared" or f.agent_id == asker

    for _ in range(2):
        assert _lens(index, "bob", admits=sees("bob")).replaced("turn:s:t1") == (
            "fact:b", "turn:s:t2")
        # Ann cannot see what replaced it: withdrawn, as far as she can tell.
        assert _lens(index, "ann", admits=sees("ann")).replaced("turn:s:t1") == ()
    assert _lens(index, None, admits=sees("ann")).replaced("turn:s:t1") == ()
    assert not index.kept_answers(None).replaced


def test_two_sessions_answer_afresh() -> None:
    index, other = FactIndex(), FactIndex()
    index.put(_fact("a", "The database is Postgres 15", ["t1"]))
    lens = CurrencyLens()
    lens.add("s", index, admit_key="anyone")
    lens.add("o", other, admit_key="anyone")
    assert lens.replaced("turn:s:t1") is None
    assert not index.kept_answers("anyone").replaced
    assert not other.kept_answers("anyone").replaced


def test_a_fact_superseded_between_recalls_is_seen_by_the_next_one(pipeline) -> None:
    """Through the whole read path: the first recalls keep the session's answers, the
    write of a newer version makes the next recall see the first fact as history."""
    client: MemoryClient = pipeline[0]
    drain = pipeline[1]
    client.ingest("s1", "user", "the team database is Postgres", turn_id="t1")
    client.ingest("s1", "user", "filler chatter about lunch")
    drain()
    emb = HashingEmbedder(1024)
    vectors = client.vector_store()
    now = datetime.now(UTC)
    old = Fact(fact_id=f"{1:032x}", session_id="s1", created_at=now, valid_from=now,
               content="The team database is Postgres", subject="team database",
               source_turn_ids=["t1"])
    vectors.upsert_facts([old], emb.embed_documents([old.content]))
    query = "what was said about the team database postgres"

    def stale_of(source_id: str) -> float | None:
        result = client.recall("s1", query, token_budget=2000, explain=True,
                               include_history=True)
        found = [i.components.stale for i in [*result.items, *result.excluded]
                 if i.source_id == source_id]
        return found[0] if found else None

    assert stale_of(old.fact_id) == 0.0
    assert stale_of("t1") == 0.0  # asked again: from the kept answers
    new = Fact(fact_id=f"{2:032x}", session_id="s1", created_at=now, valid_from=now,
               content="The team database is MySQL", subject="team database",
               source_turn_ids=[])
    vectors.upsert_facts([new, old.model_copy(update={
        "status": FactStatus.SUPERSEDED, "superseded_by": new.fact_id})],
        emb.embed_documents([new.content, old.content]))
    assert stale_of("t1") == 1.0
    assert stale_of(old.fact_id) == 1.0


def test_a_fact_items_lists_are_its_own() -> None:
    """A recalled fact may be the one the session's known facts hold (`read_already`):
    changing an item's metadata must not change it."""
    from hivemem.domain.models import ScoreComponents
    from hivemem.recall.items import fact_item

    fact = _fact("a", "The database is Postgres 15", ["t1"], conflicts_with=["b"])
    item = fact_item(fact, ScoreComponents(), 5)
    item.metadata["source_turn_ids"].append("t9")
    item.metadata["conflicts_with"].clear()
    assert fact.source_turn_ids == ["t1"] and fact.conflicts_with == ["b"]
