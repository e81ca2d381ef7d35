"""`Resemblance`: what dedup reads of a pool (normalised texts, near vectors), computed once
per pool and read by every selection over it. Its answers are every pair over the threshold,
a selection with a pool's resemblance chooses and refuses what one without it does, and a
resemblance never answers for candidates it was not built over."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hivemem.domain.recall.budget import Candidate, select
from hivemem.domain.recall.resemblance import Resemblance


def _pool(size: int, seed: int, *, texts: int = 0) -> list[Candidate]:
    """`size` candidates with 384-d vectors, a third of them near copies of an earlier one,
    every seventh without a vector; `texts`: texts drawn from that many (repeats)."""
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((size, 384)).astype(np.float32)
    for i in range(1, size, 3):
        j = int(rng.integers(0, i))
        vectors[i] = vectors[j] + 0.05 * rng.standard_normal(384).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return [
        Candidate(key=f"k{i}", text=f"text {rng.integers(texts) if texts else i}",
                  score=float(rng.random()), token_count=int(rng.integers(1, 40)),
                  vector=None if i % 7 == 5 else vectors[i],
                  source="fact" if i % 4 == 0 else "turn")
        for i in range(size)]


@pytest.mark.parametrize("size", [0, 1, 2, 3, 17, 60, 700])
def test_near_is_every_other_candidate_over_the_threshold(size: int) -> None:
    """Against every pair compared one by one; 700 candidates take one row a block."""
    pool = _pool(size, size)
    resemblance = Resemblance(pool, 0.95)
    ordered = resemblance.ordered
    assert [c.key for c in ordered] == [
        c.key for c in sorted(pool, key=lambda c: c.score, reverse=True)]
    for p, cand in enumerate(ordered):
        want = {q for q, other in enumerate(ordered)
                if q != p and cand.vector is not None and other.vector is not None
                and float(cand.vector @ other.vector) >= 0.95}
        got = resemblance.near(p)
        assert [q for _sim, q in got] == sorted(want)
        assert all(sim == pytest.approx(float(cand.vector @ ordered[q].vector), abs=1e-5)
                   for sim, q in got)
        assert resemblance.texts[p] == " ".join(cand.text.lower().split())
    assert resemblance.positions(ordered[::-1]) == list(range(size))[::-1]
    if size >= 17:
        assert any(resemblance.near(p) for p in range(size)), "planted near-duplicates"


@given(st.integers(2, 70), st.integers(0, 2**31), st.integers(1, 6),
       st.sampled_from([None, 5, 20]), st.integers(20, 600))
@settings(max_examples=60, deadline=None)
def test_a_pools_resemblance_selects_as_none(size: int, seed: int, texts: int,
                                             limit: int | None, budget: int) -> None:
    """As the refill rounds do: select from the pool, then from what is left after dropping
    some of the chosen, each time with the resemblance built for the whole pool (and its
    rows kept from the rounds before), and without one."""
    pool = _pool(size, seed, texts=texts)
    resemblance = Resemblance(pool, 0.95)
    rng = np.random.default_rng(seed)
    quotas = {"fact": 0.5}
    for _round in range(4):
        kw = dict(budget=budget, min_score=0.2, dedup_threshold=0.95, quotas=quotas,
                  limit=limit)
        fresh = select(pool, **kw)  # type: ignore[arg-type]
        shared = select(pool, resemblance=resemblance, **kw)  # type: ignore[arg-type]
        assert [c.key for c in shared[0]] == [c.key for c in fresh[0]]
        assert [(x.candidate.key, x.reason, x.detail) for x in shared[1]] == [
            (x.candidate.key, x.reason, x.detail) for x in fresh[1]]
        dropped = {c.key for c in fresh[0] if rng.random() < 0.3}
        pool = [c for c in pool if c.key not in dropped]


def test_a_resemblance_answers_only_for_its_own_pool() -> None:
    """Candidates equal to the pool's but not the pool's own (another recall's, a copy with
    another vector): refused, never judged by the cosines kept for the first pool."""
    pool = _pool(30, 1)
    resemblance = Resemblance(pool, 0.95)
    resemblance.near(0)  # rows computed and kept
    other = [dataclasses.replace(c, vector=None) for c in pool]
    with pytest.raises(ValueError, match="not one of this pool's candidates"):
        select(other, budget=10**6, min_score=0.0, dedup_threshold=0.95, quotas={},
               resemblance=resemblance)
    with pytest.raises(ValueError, match="another dedup threshold"):
        select(pool, budget=10**6, min_score=0.0, dedup_threshold=0.9, quotas={},
               resemblance=resemblance)
