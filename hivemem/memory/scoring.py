"""The scoring model: every candidate gets named components and one final score."""

from __future__ import annotations

from dataclasses import dataclass

from hivemem.models import ScoreComponents


@dataclass(frozen=True, slots=True)
class ScoringWeights:
    dense: float = 1.0
    recency: float = 0.1
    marker: float = 0.1
    recency_half_life_turns: float = 8.0


def recency(seq: int | None, newest_seq: int, half_life_turns: float) -> float:
    """1.0 for the newest turn, halving every `half_life_turns` turns back."""
    if seq is None or newest_seq <= 0:
        return 0.0
    distance = max(0, newest_seq - seq)
    return float(0.5 ** (distance / half_life_turns))


def score(
    *,
    dense: float,
    seq: int | None,
    newest_seq: int,
    marked: bool,
    weights: ScoringWeights,
) -> ScoreComponents:
    rec = recency(seq, newest_seq, weights.recency_half_life_turns)
    mark = 1.0 if marked else 0.0
    final = weights.dense * dense + weights.recency * rec + weights.marker * mark
    return ScoreComponents(dense=dense, recency=rec, marker=mark, final=final)
