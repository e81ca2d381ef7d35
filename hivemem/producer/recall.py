"""Recall: the read path. Query vector search + the recent window, scored, deduped, packed.

Writes nothing.
"""

from __future__ import annotations

import numpy as np

from hivemem.config import RecallSettings
from hivemem.memory.budget import Candidate, drop_near_duplicates, pack
from hivemem.memory.facts import VISIBLE, Fact, FactStatus
from hivemem.memory.scoring import ScoringWeights, marker_boosted, score
from hivemem.memory.tokens import estimate_tokens
from hivemem.models import ContextItem, ScoreComponents, Turn
from hivemem.providers.embedders import Embedder
from hivemem.store.episodes import EpisodeStore
from hivemem.store.state import SessionState
from hivemem.store.vectors import Vector, VectorStore


class Recaller:
    def __init__(
        self,
        state: SessionState,
        episodes: EpisodeStore,
        vectors: VectorStore,
        embedder: Embedder,
        settings: RecallSettings,
    ) -> None:
        self.state = state
        self.episodes = episodes
        self.vectors = vectors
        self.embedder = embedder
        self.settings = settings
        self.weights = ScoringWeights(
            dense=settings.weight_dense,
            recency=settings.weight_recency,
            marker=settings.weight_marker,
            episode=settings.weight_episode,
            marker_min_dense=settings.marker_min_dense,
            marker_cap=settings.marker_cap,
            recency_half_life_turns=settings.recency_half_life_turns,
        )

    def recall(
        self,
        session_id: str,
        query: str,
        token_budget: int,
        *,
        limit: int | None = None,
        include_history: bool = False,
    ) -> list[ContextItem]:
        s = self.settings
        query_vector = self.embedder.embed_query(query)
        facts, stale_turns = self._fact_candidates(session_id, query_vector, include_history)
        hits = self.vectors.search_turns(
            session_id, query_vector, max(s.search_limit, limit or 0)
        )
        recent = self.state.recent_turns(session_id, s.recent_turns)
        newest = max([t.seq for t in recent] + [h.turn.seq for h in hits] + [0])

        found: dict[str, tuple[Turn, float, Vector | None]] = {
            h.turn.turn_id: (h.turn, h.score, h.vector) for h in hits
        }
        # Recent turns outside the hits still compete; those already embedded get their real
        # similarity, those still queued score on recency alone.
        missing = [t for t in recent if t.turn_id not in found]
        if missing:
            for hit in self.vectors.get_turns(session_id, [t.turn_id for t in missing]):
                dense = float(hit.vector @ query_vector) if hit.vector is not None else 0.0
                found[hit.turn.turn_id] = (hit.turn, dense, hit.vector)
            for turn in missing:
                found.setdefault(turn.turn_id, (turn, 0.0, None))

        # The open episode: turns from its first seq on (and any not yet assigned).
        assigned, _closed, open_ep, _markers = self.episodes.progress(session_id)
        current_from = open_ep.seq_start if open_ep and open_ep.turn_ids else assigned + 1
        boosted = marker_boosted(
            {tid: d for tid, (t, d, _v) in found.items() if t.markers}, self.weights
        )
        candidates: list[Candidate] = []
        for turn_id, (turn, dense, vector) in found.items():
            components = score(
                dense=dense,
                seq=turn.seq,
                newest_seq=newest,
                marked=turn_id in boosted,
                weights=self.weights,
                in_current_episode=turn.seq >= current_from,
            )
            if turn_id in stale_turns:
                # The fact this turn stated has been superseded: it is history now.
                components = components.model_copy(
                    update={"stale": 1.0, "final": components.final - s.weight_stale}
                )
            if components.final < s.min_score:
                continue
            candidates.append(
                Candidate(
                    key=turn_id,
                    text=turn.content,
                    score=components.final,
                    token_count=turn.token_count,
                    vector=None if vector is None else np.asarray(vector, dtype=np.float32),
                    payload={"turn": turn, "components": components},
                )
            )
        kept, _duplicates = drop_near_duplicates(candidates + facts, s.dedup_threshold)
        if limit is not None:
            kept = kept[:limit]
        chosen, _over_budget = pack(kept, token_budget)
        return [_item(c) if "turn" in c.payload else _fact_item(c) for c in chosen]

    def _fact_candidates(
        self, session_id: str, query_vector: Vector, include_history: bool
    ) -> tuple[list[Candidate], set[str]]:
        """Active (and conflicted, flagged) facts; with history, superseded versions too.

        Also returns the turns that stated only superseded facts: they are stale.
        """
        statuses = [st.value for st in FactStatus]
        hits = self.vectors.search_facts(
            session_id, query_vector, self.settings.fact_limit, statuses
        )
        current_sources = {t for h in hits if h.fact.status in VISIBLE
                           for t in h.fact.source_turn_ids}
        stale = {t for h in hits if h.fact.status == FactStatus.SUPERSEDED
                 for t in h.fact.source_turn_ids} - current_sources
        out: list[Candidate] = []
        for hit in hits:
            fact = hit.fact
            if fact.status not in VISIBLE and not include_history:
                continue
            marked = fact.kind.value in _STATE_KINDS and hit.score >= self.weights.marker_min_dense
            components = score(
                dense=hit.score, seq=None, newest_seq=0, marked=marked, weights=self.weights
            )
            final = components.final + self.settings.weight_fact * fact.confidence
            if fact.status not in VISIBLE:
                final -= 1.0  # history ranks below everything current
            components = components.model_copy(update={"final": final})
            out.append(
                Candidate(
                    key=f"fact:{fact.fact_id}",
                    text=fact.content,
                    score=final,
                    token_count=estimate_tokens(fact.content),
                    vector=hit.vector,
                    payload={"fact": fact, "components": components},
                )
            )
        return out, stale


_STATE_KINDS = frozenset({"decision", "constraint", "goal", "preference", "failure"})


def _fact_item(candidate: Candidate) -> ContextItem:
    fact = candidate.payload["fact"]
    components = candidate.payload["components"]
    assert isinstance(fact, Fact) and isinstance(components, ScoreComponents)
    return ContextItem(
        content=fact.content,
        role=None,
        score=components.final,
        components=components,
        token_count=candidate.token_count,
        source_type="fact",
        source_id=fact.fact_id,
        session_id=fact.session_id,
        agent_id=fact.agent_id,
        timestamp=fact.valid_from,
        metadata={
            "kind": fact.kind.value,
            "subject": fact.subject,
            "status": fact.status.value,
            "conflict": fact.status == FactStatus.CONFLICTED,
            "conflicts_with": fact.conflicts_with,
            "source_turn_ids": fact.source_turn_ids,
            "episode_id": fact.episode_id,
            "valid_from": fact.valid_from.isoformat(),
            "valid_to": fact.valid_to.isoformat() if fact.valid_to else None,
            "superseded_by": fact.superseded_by,
            "version": fact.version,
        },
    )


def _item(candidate: Candidate) -> ContextItem:
    turn = candidate.payload["turn"]
    components = candidate.payload["components"]
    assert isinstance(turn, Turn) and isinstance(components, ScoreComponents)
    return ContextItem(
        content=turn.content,
        role=turn.role,
        score=components.final,
        components=components,
        token_count=turn.token_count,
        source_type="turn",
        source_id=turn.turn_id,
        session_id=turn.session_id,
        agent_id=turn.agent_id,
        seq=turn.seq,
        timestamp=turn.timestamp,
        markers=turn.markers,
        metadata=turn.metadata,
    )
