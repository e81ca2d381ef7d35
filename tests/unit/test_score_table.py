"""The scoring model over arrays (`score_table`) gives every candidate the components the
per-candidate model (`score_candidates`) gives it, on generated candidate pools, for every
preset, fusion and query intent."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from hivemem.domain.models import ScoreComponents
from hivemem.domain.recall.intent import read_query
from hivemem.domain.recall.policy import PRESETS
from hivemem.domain.recall.score_table import score_table
from hivemem.domain.recall.scoring import Signals, score_candidates

_maybe_rank = st.one_of(st.none(), st.integers(1, 40))
_maybe_score = st.one_of(st.none(), st.floats(-1, 12, allow_nan=False))


@st.composite
def pools(draw: st.DrawFn) -> list[Signals]:
    n = draw(st.integers(0, 30))
    out = []
    keys = [f"k{i}" for i in range(n)]
    for key in keys:
        turn = draw(st.booleans())
        out.append(Signals(
            key=key, source="turn" if turn else "fact",
            session_id=draw(st.sampled_from(["s", "r"])),
            dense=draw(st.floats(-1, 1, allow_nan=False)),
            lexical_raw=draw(_maybe_score), dense_rank=draw(_maybe_rank),
            lexical_rank=draw(_maybe_rank),
            window=draw(st.one_of(st.none(), st.floats(-1, 1, allow_nan=False))),
            window_rank=draw(_maybe_rank),
            seq=draw(st.one_of(st.none(), st.integers(1, 40))) if turn else None,
            markers=tuple(draw(st.lists(st.sampled_from(["decision", "goal", "failure"]),
                                        max_size=2))),
            kind=None if turn else draw(st.sampled_from(["decision", "fact", "preference"])),
            confidence=draw(st.floats(0, 1, allow_nan=False)),
            conflicted=draw(st.booleans()), stale=draw(st.booleans()),
            history=draw(st.booleans()), in_current_episode=draw(st.booleans()),
            other_person=draw(st.booleans()), by_asked_speaker=draw(st.booleans()),
            asks=draw(st.booleans()),
            successors=tuple(draw(st.lists(st.sampled_from([*keys, "gone"]), max_size=2))),
        ))
    return out


def _same(a: ScoreComponents, b: ScoreComponents) -> bool:
    return all(math.isclose(x, y, rel_tol=1e-12, abs_tol=1e-12)
               for x, y in zip(a.model_dump().values(), b.model_dump().values(), strict=True))


@given(pools(), st.sampled_from(sorted(PRESETS)), st.sampled_from(["rrf", "weighted"]),
       st.sampled_from(["", "which database now?", "what did we use before?"]),
       st.integers(0, 45))
@settings(max_examples=150, deadline=None)
def test_the_table_scores_as_the_per_candidate_model(
    pool: list[Signals], preset: str, fusion: str, query: str, newest: int,
) -> None:
    policy = PRESETS[preset].model_copy(update={"fusion": fusion})
    intent = read_query(query)
    expected = score_candidates(pool, policy, current_session="s", newest_seq=newest,
                                intent=intent)
    table = score_table(pool, policy, current_session="s", newest_seq=newest, intent=intent)
    assert list(table) == list(expected)
    for key, components in expected.items():
        assert _same(table[key], components), (key, table[key], components)
        assert math.isclose(table.final_of(key), components.final, rel_tol=1e-12,
                            abs_tol=1e-12)


def test_restating_moves_final_and_restates_only() -> None:
    pool = [Signals(key="f", source="fact", session_id="s", dense=0.5),
            Signals(key="t", source="turn", session_id="s", dense=0.4, seq=1)]
    table = score_table(pool, PRESETS["balanced"], current_session="s", newest_seq=1)
    before = table["f"]
    table.restate("f", 9.0)
    assert table["f"].final == table["f"].restates == 9.0
    assert table["f"].relevance == before.relevance
    assert table["t"].restates == 0.0


def _validated(table: object, key: str) -> ScoreComponents:
    """The components as the table built them before its rows were one block: each
    column's value at the key's row through pydantic's validating constructor."""
    from hivemem.domain.recall.score_table import ScoreTable
    assert isinstance(table, ScoreTable)
    i = table.at[key]
    values = {name: float(col[i]) for name, col in table.columns.items()}
    values["restates"] = table.restates.get(key, 0.0)
    return ScoreComponents(**values)


@given(pools(), st.sampled_from(sorted(PRESETS)), st.data())
@settings(max_examples=100, deadline=None)
def test_components_from_the_block_are_the_validated_ones(
    pool: list[Signals], preset: str, data: st.DataObject,
) -> None:
    """Same values, same types, same field order in ``__dict__``, same fields set; also for
    items built before and after a restate (which makes the block again)."""
    table = score_table(pool, PRESETS[preset], current_session="s", newest_seq=20)
    keys = list(table)
    for step in range(2):
        for key in keys:
            got, want = table[key], _validated(table, key)
            assert got == want
            assert list(got.__dict__) == list(want.__dict__)
            assert [type(v) for v in got.__dict__.values()] == [
                type(v) for v in want.__dict__.values()]
            assert got.model_fields_set == want.model_fields_set
            assert got.model_dump_json() == want.model_dump_json()
        if not keys or step:
            break
        table.restate(data.draw(st.sampled_from(keys)),
                      data.draw(st.floats(-5, 5, allow_nan=False)))
