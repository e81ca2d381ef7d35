"""The scoring model: every candidate (turn or fact) gets named components and one final score.

Pure: the recall path gathers `Signals` from the stores and this module turns them into
`ScoreComponents`. One model for every source, so turns and facts compete on one scale.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hivemem.domain.models import ScoreComponents, SourceType
from hivemem.domain.recall.intent import QueryIntent, read_query
from hivemem.domain.recall.policy import RecallPolicy


@dataclass(slots=True)
class Signals:
    """What the stores said about one candidate."""

    key: str
    source: SourceType
    session_id: str
    dense: float = 0.0
    lexical_raw: float | None = None  # BM25 score (None: not among the lexical hits)
    dense_rank: int | None = None  # 1-based rank among the dense hits of its source
    lexical_rank: int | None = None
    # A turn's context-window similarity (None: no window vector; it ranks on `dense`).
    window: float | None = None
    window_rank: int | None = None
    seq: int | None = None
    markers: tuple[str, ...] = ()
    kind: str | None = None  # a fact's kind
    confidence: float = 0.0
    conflicted: bool = False
    stale: bool = False  # superseded history, or a turn that stated only superseded facts
    history: bool = False  # a superseded fact shown because history was asked for
    in_current_episode: bool = False
    # Another person's own slot, when the query asks about someone named.
    other_person: bool = False
    # A turn said by a speaker the query names ("what did Caroline research?").
    by_asked_speaker: bool = False
    # A turn that asks something (a question mark in it): the turn after it may answer.
    asks: bool = False
    # Keys of the candidates that replaced this one (its facts' current versions and the
    # turns that stated them); set for stale statements only.
    successors: tuple[str, ...] = ()


def recency(seq: int | None, newest_seq: int, half_life_turns: float) -> float:
    """1.0 for the newest turn, halving every `half_life_turns` turns back."""
    if seq is None or newest_seq <= 0:
        return 0.0
    distance = max(0, newest_seq - seq)
    return float(0.5 ** (distance / half_life_turns))


def relevance(signal: Signals, lexical_max: float, policy: RecallPolicy) -> tuple[float, float]:
    """(lexical in [0, 1], fused relevance) for one candidate."""
    w = policy.weights
    lexical = 0.0
    if signal.lexical_raw is not None and lexical_max > 0:
        lexical = max(0.0, signal.lexical_raw / lexical_max)
    if policy.fusion == "rrf":
        # Reciprocal rank fusion, scaled so rank 1 in every list gives 1.0.
        # The window list shares the dense weight, as in the weighted fusion; a candidate
        # without a window vector ranks there as it ranks on its own vector.
        k = w.rrf_k
        total = (w.dense + w.lexical) or 1.0
        dense = 0.0
        if signal.dense_rank is not None:
            dense = (k + 1) / (k + signal.dense_rank)
        window_rank = signal.window_rank if signal.window is not None else signal.dense_rank
        if w.window and window_rank is not None:
            dense = (dense + w.window * (k + 1) / (k + window_rank)) / (1.0 + w.window)
        elif w.window:
            dense /= 1.0 + w.window
        fused = w.dense * dense
        if signal.lexical_rank is not None:
            fused += w.lexical * (k + 1) / (k + signal.lexical_rank)
        return lexical, fused / total
    return lexical, w.dense * dense_similarity(signal, w.window) + w.lexical * lexical


def dense_similarity(signal: Signals, window_weight: float) -> float:
    """The turn's similarity and its window's, averaged with `window_weight` for the window
    (on the scale of one cosine, so facts, which have no window, compete on equal terms)."""
    if signal.window is None or not window_weight:
        return signal.dense
    return (signal.dense + window_weight * signal.window) / (1.0 + window_weight)


# Scoring without a question (nothing asked about the past or the latest state).
_NO_QUERY = read_query("")


def score_candidates(
    signals: Sequence[Signals],
    policy: RecallPolicy,
    *,
    current_session: str,
    newest_seq: int,
    intent: QueryIntent = _NO_QUERY,
) -> dict[str, ScoreComponents]:
    """`intent.latest` (the query says it asks for the current state) or
    `intent.asks_state` (it asks what holds now of a thing): recency weighs
    `weights.latest`. `intent.past`: it asks what was true before; stale statements are the
    answer, not history. Otherwise a stale statement never outranks a successor of it that
    is a candidate."""
    latest, past = intent.latest, intent.past
    w = policy.weights
    recency_weight = max(w.recency, w.latest) if latest or intent.asks_state else w.recency
    lexical_max = max((s.lexical_raw or 0.0 for s in signals), default=0.0)
    fused = {s.key: relevance(s, lexical_max, policy) for s in signals}
    # Context around hits: a turn next to a relevant turn (same session, seq +-1) gains part
    # of that turn's relevance; an answer often sits right after the turn that matched.
    by_position = {
        (s.session_id, s.seq): fused[s.key][1]
        for s in signals
        if s.source == "turn" and s.seq is not None
    }
    # Where the questions among the turns are: the turn right after one may be its answer.
    questions = {
        (s.session_id, s.seq) for s in signals
        if s.asks and s.source == "turn" and s.seq is not None
    } if w.answer else set()
    best = max((rel for _lex, rel in fused.values()), default=0.0)
    kind_weights = w.kind
    out: dict[str, ScoreComponents] = {}
    for s in signals:
        lexical, rel = fused[s.key]
        neighbour = 0.0
        if s.source == "turn" and s.seq is not None and w.neighbour:
            neighbour = max(
                by_position.get((s.session_id, s.seq - 1), 0.0),
                by_position.get((s.session_id, s.seq + 1), 0.0),
            )
        answer = 0.0
        if questions and s.source == "turn" and s.seq is not None and (
                before := (s.session_id, s.seq - 1)) in questions:
            answer = by_position[before]
        current = s.session_id == current_session
        rec = recency(s.seq, newest_seq, w.recency_half_life_turns) if current else 0.0
        marker = 1.0 if s.markers else 0.0
        # A fact's kind, else the best of the turn's markers (most policies weigh none).
        kind = 0.0
        if kind_weights:
            if s.kind:
                kind = kind_weights.get(s.kind, 0.0)
            elif s.markers:
                kind = max(kind_weights.get(k, 0.0) for k in s.markers)
        episode = 1.0 if s.in_current_episode and current else 0.0
        session = 1.0 if current else 0.5
        gate = 1.0
        if policy.gate_boosts:
            gate = min(1.0, max(0.0, rel / best)) if best > 0 else 0.0
        boosts = gate * (
            recency_weight * rec
            + w.marker * marker
            + w.episode * episode
            + w.confidence * s.confidence
            + w.session * session
            + w.speaker * s.by_asked_speaker
            + kind
        )
        final = (rel + w.neighbour * neighbour + w.answer * answer + boosts
                 + w.conflict * s.conflicted)
        if past:
            pass  # the old value is what is asked for
        elif s.history:
            final -= 1.0  # superseded versions rank below everything current
        elif s.stale:
            final -= w.stale
        if s.other_person:
            final -= 1.0  # "which city is Sam in?": Priya's home answers nothing
        out[s.key] = ScoreComponents(
            dense=s.dense,
            lexical=lexical,
            relevance=rel,
            neighbour=neighbour,
            answer=answer,
            recency=rec,
            marker=marker,
            kind=kind,
            episode=episode,
            confidence=s.confidence,
            conflict=1.0 if s.conflicted else 0.0,
            stale=1.0 if (s.stale or s.history) else 0.0,
            other_person=1.0 if s.other_person else 0.0,
            session=session,
            final=final,
        )
    if not past:
        _below_successors(signals, out, promote=intent.current)
    return out


def _below_successors(signals: Sequence[Signals], out: dict[str, ScoreComponents], *,
                      promote: bool) -> None:
    """Current state first: a stale statement ranks just below its best-scored successor
    among the candidates. `promote` (a question about what holds now): the successor also
    takes the stale one's place (the turn that says MySQL where the one that chose
    PostgreSQL would have ranked, and that one right after it); for any other question
    (an event, a person) the successor keeps its own rank (measured on LoCoMo: promotion
    there moved evidence out of the first ten)."""
    for s in signals:
        if not s.successors:
            continue
        rivals = [k for k in s.successors if k in out and k != s.key]
        if not rivals:
            continue
        best = max(rivals, key=lambda k: out[k].final)
        if out[s.key].final >= out[best].final:
            if promote:
                out[best] = out[best].model_copy(update={"final": out[s.key].final + 1e-3})
            out[s.key] = out[s.key].model_copy(update={"final": out[best].final - 1e-3})
