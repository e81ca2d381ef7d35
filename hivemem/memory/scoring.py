"""The scoring model: every candidate gets named components and one final score."""

from __future__ import annotations

from dataclasses import dataclass

from hivemem.models import ScoreComponents


@dataclass(frozen=True, slots=True)
class ScoringWeights:
    dense: float = 1.0
    recency: float = 0.1
    marker: float = 0.1
    episode: float = 0.1
    recency_half_life_turns: float = 8.0
    # A marked turn gets its boost only when it is relevant at all, and only the
    # `marker_cap` most relevant marked turns do: marks must not crowd out the budget.
    marker_min_dense: float = 0.2
    marker_cap: int = 5


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
    in_current_episode: bool = False,
) -> ScoreComponents:
    """`marked` means the marker boost applies (see `marker_boosted`)."""
    rec = recency(seq, newest_seq, weights.recency_half_life_turns)
    mark = 1.0 if marked else 0.0
    episode = 1.0 if in_current_episode else 0.0
    final = (
        weights.dense * dense
        + weights.recency * rec
        + weights.marker * mark
        + weights.episode * episode
    )
    return ScoreComponents(dense=dense, recency=rec, marker=mark, episode=episode, final=final)


def marker_boosted(marked_dense: dict[str, float], weights: ScoringWeights) -> set[str]:
    """Of the marked candidates (key -> dense similarity), the ones that get the boost."""
    relevant = [(d, k) for k, d in marked_dense.items() if d >= weights.marker_min_dense]
    relevant.sort(reverse=True)
    return {k for _, k in relevant[: weights.marker_cap]}
