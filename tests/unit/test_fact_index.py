"""Recall's currency per candidate (`CurrencyLens` over a `FactIndex`) answers what the
whole-set functions (`stale_statements`, `personal_statements`) answer, for every key, on
generated fact sets: chains, retractions, mentions, considerations, personal slots, scope
filters and an overlay of changed and new facts; and the index follows in-place updates."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from hivemem.domain.fact import Fact, FactKind, FactStatus
from hivemem.domain.recall.currency import personal_statements, stale_statements
from hivemem.domain.recall.fact_index import CurrencyLens, FactIndex, LensMapping, OwnerMapping

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
TURNS = [f"t{i}" for i in range(8)]
STATUSES = list(FactStatus)


@st.composite
def fact_sets(draw: st.DrawFn) -> list[Fact]:
    n = draw(st.integers(1, 9))
    ids = [f"f{i}" for i in range(n)]
    facts = []
    for i, fid in enumerate(ids):
        status = draw(st.sampled_from(STATUSES))
        agent = draw(st.sampled_from([None, "ann", "bob"]))
        facts.append(Fact(
            fact_id=fid, session_id="s", content=f"fact {fid}", agent_id=agent,
            visibility=draw(st.sampled_from(["shared", "private"])),
            kind=draw(st.sampled_from([FactKind.DECISION, FactKind.PREFERENCE])),
            subject=draw(st.sampled_from(["database", "ann's city", ""])),
            source_turn_ids=draw(st.lists(st.sampled_from(TURNS), max_size=3, unique=True)),
            mentioned_in=draw(st.lists(st.sampled_from(TURNS), max_size=2, unique=True)),
            considered_in=draw(st.lists(st.sampled_from(TURNS), max_size=2, unique=True)),
            retracted_by=draw(st.lists(st.sampled_from(TURNS), max_size=1)),
            superseded_by=draw(st.sampled_from([None, *ids])),
            status=status, created_at=T0 + timedelta(seconds=i), valid_from=T0,
        ))
    return facts


def _keys(facts: list[Fact]) -> list[str]:
    return [f"turn:s:{t}" for t in TURNS] + [f"fact:{f.fact_id}" for f in facts] + [
        "fact:unknown", "turn:other:t1"]


def _sees(fact: Fact) -> bool:
    return fact.visibility == "shared" or fact.agent_id == "ann"


@given(fact_sets(), st.integers(0, 4), st.booleans())
@settings(max_examples=300, deadline=None)
def test_the_lens_answers_what_the_whole_set_functions_answer(
    facts: list[Fact], changed: int, scoped: bool,
) -> None:
    # Stored: every fact; the overlay changes the first `changed` of those the asker sees
    # (it is made from them) and adds one.
    admits = _sees if scoped else None
    seen = [f for f in facts if admits is None or admits(f)]
    stored, overlay = facts, [
        f.model_copy(update={"status": FactStatus.SUPERSEDED, "superseded_by": "new"})
        for f in seen[:changed]]
    overlay.append(Fact(fact_id="new", session_id="s", content="new", source_turn_ids=["t7"],
                        created_at=T0 + timedelta(hours=1), valid_from=T0))
    index = FactIndex()
    for fact in stored:
        index.put(fact)
    lens = CurrencyLens()
    lens.add("s", index, admits=admits, overlay=overlay)

    visible = [f for f in stored if admits is None or admits(f)]
    merged = {f.fact_id: f for f in visible}
    merged.update({f.fact_id: f for f in overlay})
    whole = list(merged.values())
    stale, personal = stale_statements(whole), personal_statements(whole)
    replaced, owners = LensMapping(lens), OwnerMapping(lens)
    for key in _keys([*stored, *overlay]):
        assert replaced.get(key) == stale.get(key), key
        assert (key in replaced) == (key in stale), key
        assert owners.get(key) == personal.get(key), key
    assert owners.values() == set(personal.values())


def _check(index: FactIndex, stored: list[Fact], overlay: list[Fact], scoped: bool) -> None:
    """A lens with the index's chain jumps (an asker key) answers what the whole-set
    functions answer over the stored facts the asker sees and the overlay."""
    admits = _sees if scoped else None
    lens = CurrencyLens()
    lens.add("s", index, admits=admits, overlay=overlay,
             admit_key="ann" if scoped else "anyone")
    visible = [f for f in stored if admits is None or admits(f)]
    merged = {f.fact_id: f for f in visible}
    merged.update({f.fact_id: f for f in overlay})
    stale = stale_statements(list(merged.values()))
    replaced = LensMapping(lens)
    for key in _keys([*stored, *overlay]):
        assert replaced.get(key) == stale.get(key), key


@st.composite
def long_chains(draw: st.DrawFn) -> list[Fact]:
    """Version chains up to 40 long (a slot changed again and again), some retracted or
    archived, some private to another agent, a few pointing back into their own chain (bad
    data)."""
    n = draw(st.integers(2, 40))
    facts = []
    for i in range(n):
        last = i == n - 1
        nxt = draw(st.sampled_from([f"f{i + 1}", f"f{i + 1}", f"f{i + 1}",
                                    f"f{max(0, i - 2)}", None])) if not last else None
        status = FactStatus.ACTIVE if last else draw(st.sampled_from(
            [FactStatus.SUPERSEDED, FactStatus.SUPERSEDED, FactStatus.ARCHIVED]))
        facts.append(Fact(
            fact_id=f"f{i}", session_id="s", content=f"value {i}", subject="database",
            agent_id=draw(st.sampled_from([None, "ann", "bob"])),
            visibility=draw(st.sampled_from(["shared", "shared", "shared", "private"])),
            source_turn_ids=[TURNS[i % len(TURNS)]], superseded_by=nxt, status=status,
            retracted_by=[TURNS[(i + 1) % len(TURNS)]] if nxt is None and not last else [],
            created_at=T0 + timedelta(seconds=i), valid_from=T0))
    return facts


@given(long_chains(), st.integers(0, 39), st.booleans(), st.booleans())
@settings(max_examples=300, deadline=None)
def test_kept_chain_jumps_answer_as_walking_through_puts(
    facts: list[Fact], at: int, scoped: bool, repoint: bool,
) -> None:
    # Asked twice (the second lens jumps by what the first one left in the index), then
    # after a put: a history version re-pointed or a current one superseded by a new one.
    index = FactIndex()
    for fact in facts:
        index.put(fact)
    head = facts[-1]
    new = Fact(fact_id="new", session_id="s", content="value new", subject="database",
               source_turn_ids=["t7"], created_at=T0 + timedelta(hours=1), valid_from=T0)
    overlay = [head.model_copy(update={"status": FactStatus.SUPERSEDED,
                                       "superseded_by": "new"}), new]
    for _ in range(2):
        _check(index, facts, [], scoped)
        _check(index, facts, overlay, scoped)
    target = facts[min(at, len(facts) - 1)]
    if repoint:
        changed = target.model_copy(update={"superseded_by": head.fact_id,
                                            "status": FactStatus.SUPERSEDED})
    else:
        changed = head.model_copy(update={"status": FactStatus.SUPERSEDED,
                                          "superseded_by": "new"})
        index.put(new)
    index.put(changed)
    stored = [changed if f.fact_id == changed.fact_id else f for f in facts]
    if not repoint:
        stored.append(new)
    for _ in range(2):
        _check(index, stored, [], scoped)


def test_the_index_follows_replacements_and_clears() -> None:
    index = FactIndex()
    a = Fact(fact_id="a", session_id="s", content="We use Postgres", subject="database",
             source_turn_ids=["t1"], created_at=T0, valid_from=T0)
    index.put(a)
    assert index.cites == {"t1": {"a"}}
    assert [f.fact_id for f in index.near({"database"}, set(), recent=0, per_key=5)] == ["a"]
    index.put(a.model_copy(update={"source_turn_ids": ["t2"], "subject": "queue"}))
    assert index.cites == {"t2": {"a"}}
    assert index.near({"database"}, set(), recent=0, per_key=5) == []
    assert [f.fact_id for f in index.near(set(), {"postgres"}, recent=0, per_key=5)] == ["a"]
    index.clear()
    assert len(index) == 0 and not index.cites and not index.values
