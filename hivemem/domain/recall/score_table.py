"""The scoring model over arrays: every candidate's components at once (pure).

`score_candidates` (hivemem.domain.recall.scoring) is the model written out candidate by
candidate, with a `ScoreComponents` model per candidate. `score_table` computes the same
numbers as numpy columns in one pass (`tests/unit/test_score_table.py` holds the two to the
same floats) and builds a candidate's `ScoreComponents` only when asked (`components`): for
the items that make the context or are explained, not for the ~60-100 recall scores.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np
import numpy.typing as npt

from hivemem.domain.models import ScoreComponents, trusted_components
from hivemem.domain.recall.intent import QueryIntent, read_query
from hivemem.domain.recall.policy import RecallPolicy
from hivemem.domain.recall.scoring import Signals

F64 = npt.NDArray[np.float64]
_FIELDS = tuple(ScoreComponents.model_fields)
_NAN = float("nan")
_NO_QUERY = read_query("")
# The columns of `ScoreComponents` a table keeps (all but `restates`, set afterwards).
COLUMNS = ("dense", "lexical", "relevance", "neighbour", "answer", "recency", "marker", "kind",
           "episode", "confidence", "conflict", "stale", "other_person", "session", "final")


class ScoreTable(Mapping[str, ScoreComponents]):
    """Candidate key -> its `ScoreComponents`, built on first access from the columns."""

    def __init__(self, keys: list[str], columns: dict[str, F64]) -> None:
        self.keys_ = keys
        self.at = {k: i for i, k in enumerate(keys)}
        self.columns = columns
        self.restates: dict[str, float] = {}
        self._built: dict[str, ScoreComponents] = {}
        # Every candidate's components as Python floats in field order, made on the first
        # item asked for (one conversion of the block, not fifteen scalars per item).
        self._rows: list[list[float]] | None = None

    @property
    def final(self) -> F64:
        return self.columns["final"]

    def final_of(self, key: str) -> float:
        return float(self.columns["final"][self.at[key]])

    def restate(self, key: str, value: float) -> None:
        """A fact that restates a turn ranks with it: `final` and `restates` become
        `value`."""
        self.columns["final"][self.at[key]] = value
        self.restates[key] = value
        self._built.pop(key, None)
        self._rows = None

    def rescore(self, key: str, value: float) -> None:
        """`final` becomes `value` (a statement moved above an older one on the same thing:
        `hivemem.domain.recall.newer_first`)."""
        self.columns["final"][self.at[key]] = value
        self._built.pop(key, None)
        self._rows = None

    def __getitem__(self, key: str) -> ScoreComponents:
        built = self._built.get(key)
        if built is None:
            if self._rows is None:
                self._rows = self._block().tolist()
            built = self._built[key] = trusted_components(
                dict(zip(_FIELDS, self._rows[self.at[key]], strict=True)))
        return built

    def _block(self) -> F64:
        """The components of every candidate, a row each, `ScoreComponents`' fields in
        order (a field the table has no column for: 0.0, as its default)."""
        n = len(self.keys_)
        restates = np.zeros(n)
        for key, value in self.restates.items():
            restates[self.at[key]] = value
        zeros = np.zeros(n)
        return np.stack([restates if name == "restates" else self.columns.get(name, zeros)
                         for name in _FIELDS], axis=1).astype(np.float64, copy=False)

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys_)

    def __len__(self) -> int:
        return len(self.keys_)


def score_table(
    signals: Sequence[Signals],
    policy: RecallPolicy,
    *,
    current_session: str,
    newest_seq: int,
    intent: QueryIntent = _NO_QUERY,
) -> ScoreTable:
    """`score_candidates`, as columns (see it for the model)."""
    latest, past = intent.latest, intent.past
    w = policy.weights
    n = len(signals)
    a = _columns(signals, policy, current_session)
    bits = a["flags"].astype(np.int64)
    marker = (bits & 1 > 0).astype(np.float64)
    conflicted = bits & 2 > 0
    stale = bits & 4 > 0
    history = bits & 8 > 0
    other = bits & 32 > 0
    current = bits & 256 > 0
    seqs = a["seq"]

    lexical, rel = _relevance(a, policy)
    neighbour, answer = _context(a, rel, bits, policy)
    rec = np.zeros(n)
    recent = current & ~np.isnan(seqs)
    if newest_seq > 0 and recent.any():
        distance = np.maximum(0.0, newest_seq - np.where(recent, seqs, newest_seq))
        rec = np.where(recent, 0.5 ** (distance / w.recency_half_life_turns), 0.0)
    episode = ((bits & 16 > 0) & current).astype(np.float64)
    session = np.where(current, 1.0, 0.5)
    gate = np.ones(n)
    if policy.gate_boosts:
        best = max(float(rel.max()) if n else 0.0, 0.0)
        gate = np.clip(rel / best, 0.0, 1.0) if best > 0 else np.zeros(n)
    recency_weight = max(w.recency, w.latest) if latest or intent.asks_state else w.recency
    boosts = gate * (recency_weight * rec + w.marker * marker + w.episode * episode
                     + w.confidence * a["conf"] + w.session * session
                     + w.speaker * (bits & 64 > 0) + a["kind"])
    final = rel + w.neighbour * neighbour + w.answer * answer + boosts + w.conflict * conflicted
    if not past:
        final = np.where(history, final - 1.0, np.where(stale, final - w.stale, final))
    final = np.where(other, final - 1.0, final)
    table = ScoreTable([s.key for s in signals], {
        "dense": a["dense"], "lexical": lexical, "relevance": rel, "neighbour": neighbour,
        "answer": answer, "recency": rec, "marker": marker, "kind": a["kind"],
        "episode": episode, "confidence": a["conf"],
        "conflict": conflicted.astype(np.float64),
        "stale": (stale | history).astype(np.float64), "other_person": other.astype(np.float64),
        "session": session, "final": np.array(final, dtype=np.float64)})
    if not past:
        _below_successors(signals, table, promote=intent.current)
    return table


_NAMES = ("dense", "lex_raw", "d_rank", "l_rank", "window", "w_rank", "seq", "conf", "kind",
          "flags", "codes", "turn")


def _columns(signals: Sequence[Signals], policy: RecallPolicy, current_session: str
             ) -> dict[str, F64]:
    """One pass over the candidates per column into floats (None as NaN; the booleans as
    bits of `flags`; `codes`: the session's number): the only per-candidate Python. A
    comprehension per column: ~2x cheaper than one loop appending to twelve lists."""
    kind_weights = policy.weights.kind
    session_ids = [s.session_id for s in signals]
    # Each session's number: the order it first appears in.
    code_of = {sid: i for i, sid in enumerate(dict.fromkeys(session_ids))}
    cols: dict[str, list[float] | list[int]] = {
        "dense": [s.dense for s in signals],
        "lex_raw": [_NAN if s.lexical_raw is None else s.lexical_raw for s in signals],
        "d_rank": [_NAN if s.dense_rank is None else s.dense_rank for s in signals],
        "l_rank": [_NAN if s.lexical_rank is None else s.lexical_rank for s in signals],
        "window": [_NAN if s.window is None else s.window for s in signals],
        "w_rank": [_NAN if s.window_rank is None else s.window_rank for s in signals],
        "seq": [_NAN if s.seq is None else s.seq for s in signals],
        "conf": [s.confidence for s in signals],
        "kind": [
            (kind_weights.get(s.kind, 0.0) if s.kind
             else max(kind_weights.get(m, 0.0) for m in s.markers) if s.markers else 0.0)
            for s in signals] if kind_weights else [0.0] * len(signals),
        "flags": [float(
            1 * bool(s.markers) | 2 * s.conflicted | 4 * s.stale | 8 * s.history
            | 16 * s.in_current_episode | 32 * s.other_person | 64 * s.by_asked_speaker
            | 128 * s.asks | 256 * (s.session_id == current_session)) for s in signals],
        "codes": [code_of[sid] for sid in session_ids],
        "turn": [float(s.source == "turn") for s in signals],
    }
    return {name: np.array(cols[name], dtype=np.float64) for name in _NAMES}


def _context(a: dict[str, F64], rel: F64, bits: npt.NDArray[np.int64], policy: RecallPolicy
             ) -> tuple[F64, F64]:
    """(neighbour, answer) per candidate: the relevance of the turn beside it (seq +-1,
    same session), and of the turn right before it when that one asks something."""
    w = policy.weights
    n = len(rel)
    neighbour, answer = np.zeros(n), np.zeros(n)
    seqs = a["seq"]
    positioned = (a["turn"] > 0) & ~np.isnan(seqs)
    if not n or not positioned.any():
        return neighbour, answer
    # Positions as one number per (session, seq): session code * 2^32 + seq.
    pos = np.where(positioned, a["codes"] * 2.0**32 + _zero_nan(seqs), _NAN)
    rel_at = _last_by_position(pos[positioned], rel[positioned])
    if w.neighbour:
        neighbour = np.where(positioned, np.maximum(rel_at(pos - 1.0), rel_at(pos + 1.0)),
                             0.0)
    asks = positioned & (bits & 128 > 0)
    if w.answer and asks.any():
        before = pos - 1.0
        # (A set of the few positions that ask: `np.isin` costs ~10x more on ~100 values.)
        asked = set(pos[asks].tolist())
        after_question = np.array([b in asked for b in before.tolist()], dtype=bool)
        answer = np.where(positioned & after_question, rel_at(before), 0.0)
    return neighbour, answer


def _zero_nan(x: F64) -> F64:
    """NaN as 0.0 (`np.nan_to_num` without its checks: ~10x cheaper on small columns)."""
    return np.where(np.isnan(x), 0.0, x)


def _relevance(a: dict[str, F64], policy: RecallPolicy) -> tuple[F64, F64]:
    """(lexical in [0, 1], fused relevance) per candidate (`scoring.relevance`)."""
    w = policy.weights
    raw = a["lex_raw"]
    has_lex = ~np.isnan(raw)
    # (No NaN left to skip: `max`, not `np.nanmax`, which copies and checks.)
    lexical_max = max(float(np.where(has_lex, raw, 0.0).max(initial=0.0)), 0.0)
    lexical = np.where(has_lex & (lexical_max > 0),
                       np.maximum(0.0, _zero_nan(raw) / (lexical_max or 1.0)), 0.0)
    if policy.fusion == "rrf":
        k = w.rrf_k
        total = (w.dense + w.lexical) or 1.0
        d_rank = a["d_rank"]
        dense = np.where(np.isnan(d_rank), 0.0, (k + 1) / (k + _zero_nan(d_rank)))
        window_rank = np.where(np.isnan(a["window"]), d_rank, a["w_rank"])
        if w.window:
            dense = np.where(
                np.isnan(window_rank), dense / (1.0 + w.window),
                (dense + w.window * (k + 1) / (k + _zero_nan(window_rank)))
                / (1.0 + w.window))
        fused = w.dense * dense
        l_rank = a["l_rank"]
        fused = np.where(np.isnan(l_rank), fused,
                         fused + w.lexical * (k + 1) / (k + _zero_nan(l_rank)))
        return lexical, fused / total
    window = a["window"]
    similarity = a["dense"]
    if w.window:
        similarity = np.where(np.isnan(window), similarity,
                              (similarity + w.window * _zero_nan(window))
                              / (1.0 + w.window))
    return lexical, w.dense * similarity + w.lexical * lexical


def _last_by_position(pos: F64, rel: F64) -> Callable[[F64], F64]:
    """A lookup position -> the relevance of the last candidate there (0.0: none), as the
    per-candidate dict (a later candidate at one position overwrites an earlier one)."""
    # The last occurrence of each position: unique over the reversed order.
    order = np.arange(len(pos))[::-1]
    uniq, first = np.unique(pos[order], return_index=True)
    values = rel[order][first]

    def lookup(q: F64) -> F64:
        i = np.searchsorted(uniq, q)
        i = np.minimum(i, len(uniq) - 1)  # (never below 0: `np.clip` costs ~5x more)
        hit = uniq[i] == q
        return np.where(hit, values[i], 0.0)

    return lookup


def _below_successors(signals: Sequence[Signals], table: ScoreTable, *,
                      promote: bool) -> None:
    """Current state first: a stale statement ranks just below its best-scored successor
    among the candidates (in candidate order, each seeing the changes before it);
    `promote` (a question about what holds now): the successor also takes its place
    (as `scoring._below_successors`)."""
    final, at = table.final, table.at
    for i, s in enumerate(signals):
        if not s.successors:
            continue
        rivals = [at[k] for k in s.successors if k in at and k != s.key]
        if not rivals:
            continue
        best = max(rivals, key=lambda j: final[j])
        if final[i] >= final[best]:
            if promote:
                final[best] = final[i] + 1e-3
            final[i] = final[best] - 1e-3
