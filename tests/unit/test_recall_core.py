"""Recall's cheaper per-item Python gives what the validating constructors gave:
`trusted_turn_item` builds the `ContextItem` that `ContextItem(...)` validates from a stored
turn's payload, `trusted_components` the `ScoreComponents`; the dedup in `select` judges
each text once normalised as it did when it normalised it at every look-up."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hivemem.domain.models import (
    ContextItem,
    Role,
    ScoreComponents,
    trusted_components,
    trusted_turn_item,
)
from hivemem.domain.recall.budget import Candidate, select
from hivemem.domain.recall.resemblance import normalised
from hivemem.store.vectors.base import turn_item_fields
from tests.support.items import assert_same_item

_text = st.text(st.characters(codec="utf-8"), max_size=40)


@st.composite
def payloads(draw: st.DrawFn) -> dict[str, Any]:
    """Stored turn payloads as `turn_payload` writes them (optional fields may be missing)."""
    payload: dict[str, Any] = {
        "kind": "turn", "turn_id": draw(st.from_regex(r"[a-z0-9]{1,12}", fullmatch=True)),
        "session_id": draw(st.sampled_from(["s", "locomo-26"])),
        "role": draw(st.sampled_from([r.value for r in Role])),
        "content": draw(_text),
        "timestamp": (datetime(2026, 1, 1, tzinfo=UTC)
                      + timedelta(seconds=draw(st.integers(0, 10**8)))).isoformat(),
        "seq": draw(st.integers(1, 10**6)),
        "ts": 0.0,
    }
    for name, strategy in (
        ("agent_id", st.one_of(st.none(), st.sampled_from(["Caroline", "agent-1"]))),
        ("markers", st.lists(st.sampled_from(["decision", "goal"]), max_size=2)),
        ("metadata", st.dictionaries(st.sampled_from(["a", "b"]), st.integers(), max_size=2)),
        ("token_count", st.integers(0, 500)),
        ("namespace", st.sampled_from(["default", "team"])),
        ("visibility", st.sampled_from(["private", "shared"])),
    ):
        if draw(st.booleans()):
            payload[name] = draw(strategy)
    return payload


def _components(values: list[float]) -> ScoreComponents:
    return ScoreComponents(**dict(zip(ScoreComponents.model_fields, values, strict=True)))


_scores = st.lists(st.floats(-10, 10, allow_nan=False), min_size=16, max_size=16)


@given(payloads(), _scores)
@settings(max_examples=200, deadline=None)
def test_a_trusted_turn_item_is_the_validated_one(payload: dict[str, Any],
                                                   scores: list[float]) -> None:
    components = _components(scores)
    fields = turn_item_fields(payload)
    want = ContextItem(score=components.final, components=components, source_type="turn",
                       **{**fields, "role": payload["role"]})
    got = trusted_turn_item(score=components.final, components=components, **fields)
    assert_same_item(got, want)
    # Its own metadata, as validation copies it: the stored payload is not shared.
    assert got.metadata is not payload.get("metadata")


@given(_scores)
def test_trusted_components_are_the_validated_ones(scores: list[float]) -> None:
    want = _components(scores)
    got = trusted_components(dict(zip(ScoreComponents.model_fields, scores, strict=True)))
    assert got == want and got.model_fields_set == want.model_fields_set
    assert list(got.__dict__) == list(want.__dict__)
    assert got.model_dump_json() == want.model_dump_json()


def _reference_duplicates(ordered: list[Candidate], threshold: float) -> dict[str, str]:
    """Who repeats whom, judged the plain way: best first, a text equal once normalised
    (or a vector at `threshold` or more) to an item kept before (no budget, no quota)."""
    kept: list[Candidate] = []
    out: dict[str, str] = {}
    for cand in ordered:
        same_text = next((k for k in kept if normalised(k.text) == normalised(cand.text)),
                         None)
        if same_text is not None:
            out[cand.key] = same_text.key
            continue
        kept.append(cand)
    return out


@given(st.lists(st.tuples(st.sampled_from(["Deploy on Tuesday", "deploy  ON tuesday",
                                           "DEPLOY on\ttuesday", "lunch at noon",
                                           "Lunch at noon ", "something else"]),
                          st.integers(1, 50)), min_size=1, max_size=12),
       st.integers(0, 2**31))
@settings(max_examples=100, deadline=None)
def test_select_drops_the_same_text_once_normalised(texts: list[tuple[str, int]],
                                                     seed: int) -> None:
    rng = np.random.default_rng(seed)
    cands = []
    for i, (text, tokens) in enumerate(texts):
        vector = rng.standard_normal(8).astype(np.float32)
        cands.append(Candidate(key=f"k{i}", text=text, score=float(len(texts) - i),
                               token_count=tokens, vector=vector / np.linalg.norm(vector)))
    chosen, excluded = select(cands, budget=10**6, min_score=-1.0, dedup_threshold=1.0,
                              quotas={})
    expected = _reference_duplicates(cands, 1.0)
    got = {x.candidate.key: x.detail.removeprefix("near-duplicate of ")
           for x in excluded if x.reason == "duplicate"}
    assert got == expected
    assert [c.key for c in chosen] == [c.key for c in cands if c.key not in expected]


