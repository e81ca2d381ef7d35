"""Recall policies: what to search, how to weigh it and how to spend the budget.

A policy is plain data. Four presets cover the common cases; `RecallPolicy(...)` or
`PRESETS["balanced"].model_copy(update=...)` makes a custom one.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from hivemem.errors import ValidationError

Fusion = Literal["weighted", "rrf"]


class ScoringWeights(BaseModel):
    """How much each score component counts in `final`.

    Defaults were chosen on the LoCoMo dev split (bench/quality.py, bench/probes/locomo_arms.py),
    never on individual questions: 0.3 x the best neighbour's relevance; with window vectors
    and the speakers' names out of the query vector, 0.25 x lexical (0.6 before them).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    dense: float = 1.0
    # BM25, scaled so the best lexical hit of the call has 1.0. 0.6 ranked best while the
    # dense signal was the raw turn vector of the whole query; with window vectors and the
    # speakers' names out of the query vector, 0.25 does (LoCoMo dev, bench/probes/locomo_arms.py).
    lexical: float = 0.25
    rrf_k: int = Field(default=10, ge=1)  # only for fusion="rrf"
    neighbour: float = 0.3
    # A turn right after a relevant turn that asks something (a '?' in it) is likely its
    # answer, often in words of its own: it gains this x that question's relevance, on top
    # of `neighbour`. LoCoMo dev: the turn before an evidence turn asks in 61-64% of cases,
    # before the turns that outranked evidence in 42%; 0.1 gave R@5 +0.008 and R@10 +0.006
    # in three builds (bench/probes/locomo_arms.py, arms answer-0.1 / -0.15). 0: `neighbour` alone.
    answer: float = Field(default=0.1, ge=0)
    recency: float = 0.05
    # The recency weight when the query asks for the current state ("now", "current",
    # "latest", ...): the newer of two relevant statements should win.
    latest: float = 1.0
    recency_half_life_turns: float = Field(default=8.0, gt=0)
    marker: float = 0.05
    episode: float = 0.05
    confidence: float = 0.1
    conflict: float = 0.0
    # A turn whose fact was superseded sinks a little: it is still the record of what was
    # said then (temporal questions need it); agent_state sinks it further.
    stale: float = 0.15
    session: float = 0.05  # the asked session; a related session gets half
    # A turn by a speaker the query names (by agent id): their own words usually answer.
    # LoCoMo dev, same run (bench/probes/locomo_arms.py): R@1 0.369 -> 0.396, R@5 0.609 -> 0.626
    # (up in every category), R@10 0.714 -> 0.711; 0.1 gave less.
    speaker: float = 0.2
    # A turn's context-window vector (the turn with the ones before it) next to its own:
    # dense similarity = (turn + window x this) / (1 + this). 0: turn vectors only.
    # LoCoMo dev, same run: R@5 0.626 -> 0.645, R@10 0.711 -> 0.732 alone (0.3, 0.5 less).
    window: float = 1.0
    kind: dict[str, float] = Field(default_factory=dict)


class RecallPolicy(BaseModel):
    """Everything one recall does, as data (a preset or your own)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = "custom"
    token_budget: int | None = Field(default=None, ge=1)  # None: the configured default
    reserve_tokens: int = Field(default=0, ge=0)  # held back from the budget for the caller
    min_score: float = 0.0
    limit: int | None = Field(default=None, ge=1)
    # Per retriever (dense, BM25) and source. 20 ranked as well as 40 on LoCoMo (R@10 0.709
    # vs 0.706) and cut p95 from 26.7 to 21.0 ms: fewer distractors, fewer payloads to read.
    search_limit: int = Field(default=20, ge=1, le=1000)
    lexical: bool = True
    # Embed the query without the names of the session's speakers that it mentions: with
    # a name in it, the query vector is close to every turn that person said (their name
    # opens each one) or that mentions them; `weights.speaker` still favours their turns.
    dense_without_speakers: bool = True
    fusion: Fusion = "weighted"
    neighbours: int = Field(default=5, ge=0, le=100)  # add the turns next to the best n hits
    # Search the context-window vectors as a retriever of their own (a second nearest-
    # neighbour search, as costly as the dense one). False: the window similarity of the
    # candidates the other retrievers found only (one exact query over them).
    window_search: bool = True
    recent_turns: int = Field(default=12, ge=0, le=1000)
    fact_limit: int = Field(default=10, ge=0, le=1000)
    include_history: bool = False
    include_archived: bool = False  # archived facts (compacted or retracted), ranked as history
    # Share of the budget each source may take at most (1.0: no cap).
    quotas: dict[str, float] = Field(default_factory=lambda: {"fact": 0.5})
    dedup_threshold: float = Field(default=0.95, gt=0, le=1.0)
    # A fact this similar to a turn it was distilled from says the same thing: the turn
    # leaves the candidates and the fact stands for it (1.0: only `dedup_threshold` applies).
    # LoCoMo dev: the heuristic facts often cut a turn down to a sentence (similarity
    # ~0.6-0.9), and fact and turn then took two of the first ten places.
    restates_threshold: float = Field(default=0.5, gt=0, le=1.0)
    # Boosts scale with relevance (an irrelevant recent turn gains nothing); agent_state
    # turns this off so goals and constraints come first whatever the query.
    gate_boosts: bool = True
    weights: ScoringWeights = ScoringWeights()

    @field_validator("quotas")
    @classmethod
    def _known_sources(cls, value: dict[str, float]) -> dict[str, float]:
        for source, share in value.items():
            if source not in ("turn", "fact", "episode"):
                raise ValueError(f"quotas: unknown source {source!r} (turn, fact or episode)")
            if not 0 < share <= 1:
                raise ValueError(f"quotas: {source} share must be in (0, 1], got {share}")
        return value


_STATE_KINDS = {"goal": 0.5, "constraint": 0.5, "decision": 0.4, "preference": 0.35,
                "failure": 0.25}

PRESETS: dict[str, RecallPolicy] = {
    # One retriever pass, no neighbours, a small budget: the fastest useful context.
    "cheap": RecallPolicy(
        name="cheap", token_budget=1000, search_limit=15, neighbours=0, recent_turns=6,
        fact_limit=5,
    ),
    "balanced": RecallPolicy(name="balanced"),
    # Deeper candidate pools and more context around hits, for long histories.
    "high_recall": RecallPolicy(
        name="high_recall", search_limit=100, neighbours=10, fact_limit=40,
        recent_turns=20, quotas={"fact": 0.6},
    ),
    # The agent's working state first: goals, constraints, decisions, preferences.
    "agent_state": RecallPolicy(
        name="agent_state", fact_limit=60, quotas={"fact": 0.8}, gate_boosts=False,
        neighbours=2, weights=ScoringWeights(kind=_STATE_KINDS, marker=0.3, stale=0.6),
    ),
}

DEFAULT_PRESET = "balanced"


def resolve_policy(
    preset: str | RecallPolicy | None, default: str = DEFAULT_PRESET
) -> RecallPolicy:
    """A preset name or a policy -> the policy (unknown names are a `ValidationError`)."""
    if isinstance(preset, RecallPolicy):
        return preset
    name = default if preset is None else preset
    if not isinstance(name, str) or name not in PRESETS:
        raise ValidationError("preset", f"unknown preset {name!r}; one of {sorted(PRESETS)}"
                              " or a RecallPolicy")
    return PRESETS[name]
