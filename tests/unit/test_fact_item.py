"""`fact_item` builds the `ContextItem` that `ContextItem(...)` validates from a fact's
values: the same fields in order, of the same types, the same fields set, its own lists."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from hivemem.domain.fact import Fact, FactKind, FactStatus
from hivemem.domain.models import ContextItem, ScoreComponents
from hivemem.recall.items import fact_item, fact_metadata
from tests.support.items import assert_same_item

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
_ids = st.lists(st.from_regex(r"[a-z0-9:]{1,8}", fullmatch=True), max_size=3)


@st.composite
def facts(draw: st.DrawFn) -> Fact:
    return Fact(
        fact_id=draw(st.from_regex(r"[0-9a-f]{32}", fullmatch=True)), session_id="s",
        agent_id=draw(st.one_of(st.none(), st.sampled_from(["ann", "bob"]))),
        visibility=draw(st.sampled_from(["private", "shared"])),
        namespace=draw(st.sampled_from(["default", "team"])),
        content=draw(st.text(max_size=40)), kind=draw(st.sampled_from(list(FactKind))),
        subject=draw(st.text(max_size=10)), status=draw(st.sampled_from(list(FactStatus))),
        source_turn_ids=draw(_ids), conflicts_with=draw(_ids),
        episode_id=draw(st.one_of(st.none(), st.just("ep1"))),
        created_at=T0, valid_from=T0 + timedelta(seconds=draw(st.integers(0, 10**6))),
        valid_to=draw(st.one_of(st.none(), st.just(T0 + timedelta(days=1)))),
        superseded_by=draw(st.one_of(st.none(), st.just("f2"))),
        version=draw(st.integers(1, 5)))


@given(facts(), st.floats(-10, 10, allow_nan=False), st.integers(0, 500))
@settings(max_examples=200, deadline=None)
def test_a_fact_item_is_the_validated_one(fact: Fact, final: float, tokens: int) -> None:
    components = ScoreComponents(dense=0.5, final=final)
    want = ContextItem(
        content=fact.content, role=None, score=components.final, components=components,
        token_count=tokens, source_type="fact", source_id=fact.fact_id,
        session_id=fact.session_id, agent_id=fact.agent_id, namespace=fact.namespace,
        visibility=fact.visibility, timestamp=fact.valid_from, metadata=fact_metadata(fact))
    got = fact_item(fact, components, tokens)
    assert_same_item(got, want)
    assert got.model_dump_json(exclude_unset=True) == want.model_dump_json(exclude_unset=True)
    assert got.metadata["source_turn_ids"] is not fact.source_turn_ids
