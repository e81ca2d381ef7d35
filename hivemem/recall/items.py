"""What recall's candidate pool holds, and the result items built from what it chose.

A `PoolEntry` is one candidate: a stored turn (its `Turn` built only if chosen), a turn still
in the queue, or a fact. The item builders turn the budget's choices and refusals into the
`ContextItem`s and `ExcludedItem`s a `RecallResult` carries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from hivemem.domain.fact import Fact, FactStatus
from hivemem.domain.models import (
    ContextItem,
    ExcludedItem,
    ScoreComponents,
    Turn,
    trusted_turn_item,
)
from hivemem.domain.recall.budget import Candidate, Excluded
from hivemem.domain.recall.policy import RecallPolicy
from hivemem.domain.recall.score_table import ScoreTable
from hivemem.domain.recall.scoring import Signals
from hivemem.domain.tokens import estimate_tokens
from hivemem.store.vectors.base import FactHit, TurnHit, Vector, turn_item_fields

__all__ = ["PoolEntry", "context_item", "excluded_item", "fact_item", "pool_entry",
           "superseded_item", "unit_vector"]


@dataclass(slots=True)
class PoolEntry:
    """A candidate: a stored turn (`hit`, its Turn built only if chosen), a turn still in
    the queue (`queued`), or a fact."""

    signals: Signals
    vector: Vector | None
    hit: TurnHit | None = None
    queued: Turn | None = None
    fact: Fact | None = None
    # Whether the store was asked for its window similarity (a turn without a window
    # vector keeps None after asking).
    window_asked: bool = False

    @property
    def is_turn(self) -> bool:
        return self.hit is not None or self.queued is not None

    @property
    def turn(self) -> Turn | None:
        if self.queued is not None:
            return self.queued
        return None if self.hit is None else self.hit.turn

    @property
    def turn_id(self) -> str:
        if self.hit is not None:
            return self.hit.turn_id
        return self.queued.turn_id if self.queued is not None else ""

    @property
    def agent_id(self) -> str | None:
        """Who said it (turns only)."""
        if self.hit is not None:
            agent = self.hit.payload.get("agent_id")
            return agent if isinstance(agent, str) else None
        return self.queued.agent_id if self.queued is not None else None

    @property
    def text(self) -> str:
        if self.hit is not None:
            return self.hit.content
        if self.queued is not None:
            return self.queued.content
        assert self.fact is not None
        return self.fact.content

    @property
    def tokens(self) -> int:
        if self.hit is not None:
            return self.hit.token_count
        if self.queued is not None:
            return self.queued.token_count
        return estimate_tokens(self.text)



def unit_vector(vector: Vector | None) -> Vector | None:
    return None if vector is None else np.asarray(vector, dtype=np.float32)



def pool_entry(candidate: Candidate) -> tuple[PoolEntry, ScoreComponents]:
    """The candidate's pool entry and score components (from its payload's `components`,
    or built now from its `scores` table: only for the items shown)."""
    entry = candidate.payload["entry"]
    components = candidate.payload.get("components")
    if components is None:
        scores = candidate.payload["scores"]
        assert isinstance(scores, ScoreTable)
        components = scores[candidate.key]
    assert isinstance(entry, PoolEntry) and isinstance(components, ScoreComponents)
    return entry, components


def context_item(candidate: Candidate) -> ContextItem:
    entry, components = pool_entry(candidate)
    hit = entry.hit
    if hit is not None and entry.queued is None:
        # Straight from the payload (written from a validated turn), not validated again:
        # building the `Turn` first cost twice as much, validating the item 2.5 times.
        return trusted_turn_item(
            score=components.final, components=components, **turn_item_fields(hit.payload))
    if entry.turn is not None:
        turn = entry.turn
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
            namespace=turn.namespace,
            visibility=turn.visibility,
        )
    assert entry.fact is not None
    return fact_item(entry.fact, components, candidate.token_count)


def fact_item(fact: Fact, components: ScoreComponents, token_count: int) -> ContextItem:
    """A fact's `ContextItem`: the instance `ContextItem(...)` validates from these values
    (a `Fact` is validated already), built without validating them again (~3x cheaper;
    recall returns several a call). `tests/unit/test_fact_item.py` compares the two."""
    item = ContextItem.__new__(ContextItem)
    _set(item, "__dict__", {
        "content": fact.content, "role": None, "score": components.final,
        "components": components, "token_count": token_count, "source_type": "fact",
        "source_id": fact.fact_id, "session_id": fact.session_id,
        "agent_id": fact.agent_id, "seq": None, "timestamp": fact.valid_from,
        "markers": (), "metadata": fact_metadata(fact), "namespace": fact.namespace,
        "visibility": fact.visibility,
    })
    _set(item, "__pydantic_fields_set__", set(_FACT_ITEM_FIELDS))
    _set(item, "__pydantic_extra__", None)
    _set(item, "__pydantic_private__", None)
    return item


def fact_metadata(fact: Fact) -> dict[str, Any]:
    """What a fact's item says of it beyond its text."""
    return {
        "kind": fact.kind.value,
        "subject": fact.subject,
        "status": fact.status.value,
        "conflict": fact.status == FactStatus.CONFLICTED,
        # Copies: the fact may be the one the session's known facts hold
        # (`read_already`), and an item's metadata is the caller's to change.
        "conflicts_with": list(fact.conflicts_with),
        "source_turn_ids": list(fact.source_turn_ids),
        "episode_id": fact.episode_id,
        "valid_from": fact.valid_from.isoformat(),
        "valid_to": fact.valid_to.isoformat() if fact.valid_to else None,
        "superseded_by": fact.superseded_by,
        "version": fact.version,
    }


# The fields a fact's item is given (`seq` and `markers` keep their defaults, unset).
_FACT_ITEM_FIELDS = tuple(f for f in ContextItem.model_fields if f not in ("seq", "markers"))
_set = object.__setattr__


def excluded_item(x: Excluded) -> ExcludedItem:
    entry, components = pool_entry(x.candidate)
    turn, fact = entry.turn, entry.fact
    return ExcludedItem(
        source_type=entry.signals.source,
        source_id=turn.turn_id if turn is not None else fact.fact_id if fact else "",
        session_id=entry.signals.session_id,
        content=entry.text,
        score=components.final,
        components=components,
        token_count=x.candidate.token_count,
        reason=x.reason,  # type: ignore[arg-type]
        detail=x.detail,
    )


def superseded_item(hit: FactHit, policy: RecallPolicy) -> ExcludedItem:
    fact = hit.fact
    return ExcludedItem(
        source_type="fact",
        source_id=fact.fact_id,
        session_id=fact.session_id,
        content=fact.content,
        score=hit.score,
        components=ScoreComponents(dense=hit.score, stale=1.0, final=hit.score),
        token_count=estimate_tokens(fact.content),
        reason="superseded",
        detail=f"superseded by {fact.superseded_by}" if fact.superseded_by
        else f"status {fact.status.value}; include_history=True shows it",
    )
