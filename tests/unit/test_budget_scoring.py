import numpy as np
import pytest

from hivemem.domain.recall.budget import Candidate, drop_near_duplicates, pack, select
from hivemem.domain.recall.policy import PRESETS, RecallPolicy, ScoringWeights
from hivemem.domain.recall.scoring import Signals, recency, score_candidates
from hivemem.domain.tokens import estimate_tokens


def cand(key: str, score: float, tokens: int, text: str | None = None,
         vector: list[float] | None = None, source: str = "turn") -> Candidate:
    vec = None if vector is None else np.asarray(vector, dtype=np.float32)
    return Candidate(key=key, text=text or key, score=score, token_count=tokens, vector=vec,
                     source=source)


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


def test_weighted_fusion_scales_lexical_to_the_best_hit() -> None:
    policy = RecallPolicy(weights=ScoringWeights(lexical=0.5, recency=0, marker=0, session=0,
                                                 episode=0, confidence=0, neighbour=0))
    sig = [
        Signals("a", "turn", "s", dense=0.4, lexical_raw=8.0, seq=1),
        Signals("b", "turn", "s", dense=0.6, lexical_raw=2.0, seq=5),
        Signals("c", "turn", "s", dense=0.5, seq=9),
    ]
    out = score_candidates(sig, policy, current_session="s", newest_seq=9)
    assert out["a"].lexical == pytest.approx(1.0)
    assert out["a"].final == pytest.approx(0.4 + 0.5)
    assert out["b"].final == pytest.approx(0.6 + 0.5 * 0.25)
    assert out["c"].lexical == 0.0 and out["c"].final == pytest.approx(0.5)
    assert "keywords 1.00" in out["a"].reasons()


def test_rrf_fusion_uses_ranks() -> None:
    policy = RecallPolicy(fusion="rrf", weights=ScoringWeights(
        dense=1, lexical=1, rrf_k=10, neighbour=0, session=0, recency=0))
    sig = [Signals("a", "turn", "s", dense=0.9, dense_rank=1, lexical_raw=3, lexical_rank=1),
           Signals("b", "turn", "s", dense=0.8, dense_rank=2)]
    out = score_candidates(sig, policy, current_session="s", newest_seq=0)
    assert out["a"].relevance == pytest.approx(1.0)
    assert out["b"].relevance == pytest.approx((11 / 12) / 2)


def test_boosts_scale_with_relevance() -> None:
    """An irrelevant recent, marked turn gains (almost) nothing; a relevant one gains."""
    policy = PRESETS["balanced"]
    sig = [Signals("hit", "turn", "s", dense=0.8, seq=1),
           Signals("noise", "turn", "s", dense=0.0, seq=50, markers=("decision",))]
    out = score_candidates(sig, policy, current_session="s", newest_seq=50)
    assert out["noise"].recency == 1.0 and out["noise"].marker == 1.0
    assert out["noise"].final == pytest.approx(0.0)
    assert out["hit"].final > out["noise"].final
    ungated = policy.model_copy(update={"gate_boosts": False})
    out = score_candidates(sig, ungated, current_session="s", newest_seq=50)
    assert out["noise"].final > 0.05


def test_neighbours_gain_from_the_adjacent_hit_only_in_their_session() -> None:
    policy = PRESETS["balanced"]
    sig = [Signals("q", "turn", "s", dense=0.9, seq=10),
           Signals("answer", "turn", "s", dense=0.2, seq=11),
           Signals("far", "turn", "s", dense=0.2, seq=13),
           Signals("other", "turn", "t", dense=0.2, seq=11)]
    out = score_candidates(sig, policy, current_session="s", newest_seq=13)
    assert out["answer"].neighbour == pytest.approx(0.9)
    assert out["far"].neighbour == 0.0 and out["other"].neighbour == 0.0
    assert out["answer"].final > out["far"].final
    assert out["other"].session == 0.5 and "related session" in out["other"].reasons()


def test_the_turn_after_a_relevant_question_gains_as_its_answer() -> None:
    assert PRESETS["balanced"].weights.answer == pytest.approx(0.1)
    policy = PRESETS["balanced"].model_copy(update={"weights": PRESETS[
        "balanced"].weights.model_copy(update={"recency": 0.0})})  # seqs apart: no recency
    sig = [Signals("q", "turn", "s", dense=0.8, seq=10, asks=True),
           Signals("after", "turn", "s", dense=0.2, seq=11),
           Signals("before", "turn", "s", dense=0.2, seq=9),
           Signals("said", "turn", "s", dense=0.8, seq=20),  # a statement, not a question
           Signals("after-said", "turn", "s", dense=0.2, seq=21)]
    out = score_candidates(sig, policy, current_session="s", newest_seq=21)
    # Only the turn after the question, by the weight x the question's relevance.
    assert out["after"].answer == pytest.approx(out["q"].relevance)
    assert out["before"].answer == 0.0 and out["after-said"].answer == 0.0
    assert out["after"].final - out["after-said"].final == pytest.approx(
        policy.weights.answer * out["q"].relevance)
    assert "answers a question" in " ".join(out["after"].reasons())
    # Weight 0: the neighbour weight alone, both sides alike.
    off = policy.model_copy(update={"weights": policy.weights.model_copy(
        update={"answer": 0.0})})
    flat = score_candidates(sig, off, current_session="s", newest_seq=21)
    assert flat["after"].answer == 0.0
    assert flat["after"].final == pytest.approx(flat["after-said"].final)


def test_history_ranks_below_current_and_kind_weights_apply() -> None:
    policy = PRESETS["agent_state"]
    sig = [Signals("old", "fact", "s", dense=0.9, kind="decision", history=True),
           Signals("goal", "fact", "s", dense=0.1, kind="goal", confidence=0.9),
           Signals("chat", "turn", "s", dense=0.3, seq=3)]
    out = score_candidates(sig, policy, current_session="s", newest_seq=3)
    assert out["old"].stale == 1.0 and out["old"].final < out["chat"].final
    assert out["goal"].kind == pytest.approx(0.5)
    assert out["goal"].final > out["chat"].final  # agent state first, whatever the query


def test_select_reports_every_reason() -> None:
    items = [
        cand("a", 0.9, 40, "alpha", [1, 0]),
        cand("a2", 0.85, 40, "alpha again", [0.999, 0.0447]),
        cand("f1", 0.8, 30, "fact one", [0, 1], source="fact"),
        cand("f2", 0.7, 30, "fact two", [0.6, 0.8], source="fact"),
        cand("b", 0.6, 50, "beta", [0.8, -0.6]),
        cand("c", 0.5, 10, "gamma", [-1, 0]),
        cand("low", -0.2, 5, "low", [-0.6, -0.8]),
    ]
    chosen, excluded = select(items, budget=100, min_score=0.0, dedup_threshold=0.95,
                              quotas={"fact": 0.4})
    assert [c.key for c in chosen] == ["a", "f1", "c"]
    reasons = {x.candidate.key: (x.reason, x.detail) for x in excluded}
    assert reasons["a2"] == ("duplicate", "near-duplicate of a")
    assert reasons["f2"][0] == "quota"
    assert reasons["b"][0] == "budget"
    assert reasons["low"][0] == "threshold"
    assert sum(c.token_count for c in chosen) <= 100
    chosen, excluded = select(items, budget=1000, min_score=0.0, dedup_threshold=0.95,
                              quotas={}, limit=2)
    assert [c.key for c in chosen] == ["a", "f1"]
    assert {x.reason for x in excluded} == {"duplicate", "limit", "threshold"}


def test_token_estimate_is_conservative() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("hello") >= 1
    text = "The quick brown fox jumps over the lazy dog."
    assert estimate_tokens(text) >= 10  # 9 words + period; GPT tokenizers give 10


def test_questions_about_the_current_state_weigh_recency_more() -> None:
    from hivemem.domain.recall.intent import read_query

    assert read_query("What is the current session timeout?").latest
    assert read_query("where do we deploy now").latest
    # "In the end" asks for the state the changes ended in, though it says "did".
    ended = read_query("Which colour did the client pick in the end?")
    assert ended.latest and ended.current
    assert not read_query("When did Caroline go to the support group?").latest
    policy = PRESETS["balanced"]
    sig = [Signals("old", "turn", "s", dense=0.62, seq=2),
           Signals("new", "turn", "s", dense=0.55, seq=30)]
    plain = score_candidates(sig, policy, current_session="s", newest_seq=30)
    assert plain["old"].final > plain["new"].final  # similarity decides
    latest = score_candidates(sig, policy, current_session="s", newest_seq=30,
                              intent=read_query("where do we deploy now"))
    assert latest["new"].final > latest["old"].final  # the newer statement wins


def test_an_item_left_out_never_stands_for_its_duplicate() -> None:
    # The fact restating the turn is excluded by its quota: the turn, its near-duplicate,
    # is then the only item that carries the value, and it goes in.
    items = [
        cand("fact", 0.9, 30, "Decision: MySQL for the database", [1, 0], source="fact"),
        cand("turn", 0.8, 12, "Change of plan: MySQL instead", [0.999, 0.0447]),
        cand("old", 0.5, 10, "We use PostgreSQL", [0, 1]),
    ]
    chosen, excluded = select(items, budget=40, min_score=0.0, dedup_threshold=0.95,
                              quotas={"fact": 0.5})
    assert [c.key for c in chosen] == ["turn", "old"]
    assert {x.candidate.key: x.reason for x in excluded} == {"fact": "quota"}


def test_budget_left_unused_goes_to_quota_excluded_items() -> None:
    items = [
        cand("f1", 0.9, 30, "fact one", [1, 0], source="fact"),
        cand("f2", 0.8, 30, "fact two", [0, 1], source="fact"),
        cand("t1", 0.5, 10, "a turn", [0.6, 0.8]),
    ]
    chosen, excluded = select(items, budget=100, min_score=0.0, dedup_threshold=0.95,
                              quotas={"fact": 0.4})
    assert [c.key for c in chosen] == ["f1", "f2", "t1"] and excluded == []
    chosen, excluded = select(items, budget=60, min_score=0.0, dedup_threshold=0.95,
                              quotas={"fact": 0.5})
    assert [c.key for c in chosen] == ["f1", "t1"]  # 20 left: f2 (30) does not fit
    assert [(x.candidate.key, x.reason) for x in excluded] == [("f2", "quota")]
