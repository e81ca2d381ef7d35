import numpy as np
import pytest

from hivemem.memory.budget import Candidate, drop_near_duplicates, pack
from hivemem.memory.scoring import ScoringWeights, recency, score
from hivemem.memory.tokens import estimate_tokens


def cand(key: str, score: float, tokens: int, text: str | None = None,
         vector: list[float] | None = None) -> Candidate:
    vec = None if vector is None else np.asarray(vector, dtype=np.float32)
    return Candidate(key=key, text=text or key, score=score, token_count=tokens, vector=vec)


def test_pack_never_exceeds_budget_and_fills_gaps() -> None:
    items = [cand("a", 0.9, 60), cand("b", 0.8, 50), cand("c", 0.7, 30), cand("d", 0.1, 10)]
    chosen, left = pack(items, 100)
    assert [c.key for c in chosen] == ["a", "c", "d"]
    assert [c.key for c in left] == ["b"]
    assert sum(c.token_count for c in chosen) <= 100


@pytest.mark.parametrize("budget", [1, 7, 33, 100, 1000])
def test_pack_hard_limit_property(budget: int) -> None:
    rng = np.random.default_rng(budget)
    items = [cand(str(i), float(rng.random()), int(rng.integers(1, 80))) for i in range(50)]
    chosen, left = pack(items, budget)
    assert sum(c.token_count for c in chosen) <= budget
    assert len(chosen) + len(left) == 50


def test_dedup_by_text_and_vector() -> None:
    items = [
        cand("a", 0.9, 5, "We use Postgres.", [1, 0]),
        cand("b", 0.8, 5, "we use   postgres.", [0, 1]),
        cand("c", 0.7, 5, "Different wording", [0.999, 0.0447]),
        cand("d", 0.6, 5, "Unrelated", [0, 1]),
    ]
    kept, dropped = drop_near_duplicates(items, 0.95)
    assert [c.key for c in kept] == ["a", "d"]
    assert {c.key for c in dropped} == {"b", "c"}


def test_recency_halves_per_half_life() -> None:
    assert recency(10, 10, 4) == 1.0
    assert recency(6, 10, 4) == pytest.approx(0.5)
    assert recency(None, 10, 4) == 0.0


def test_score_components_add_up() -> None:
    w = ScoringWeights(dense=1.0, recency=0.5, marker=0.2, recency_half_life_turns=2)
    c = score(dense=0.4, seq=8, newest_seq=10, marked=True, weights=w)
    assert c.final == pytest.approx(0.4 + 0.5 * 0.5 + 0.2)
    assert "marked" in c.reasons()


def test_token_estimate_is_conservative() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("hello") >= 1
    text = "The quick brown fox jumps over the lazy dog."
    assert estimate_tokens(text) >= 10  # 9 words + period; GPT tokenizers give 10
