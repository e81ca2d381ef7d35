"""What the session's not-yet-reflected turns change, for recall (nothing is stored).

Reflection runs when an episode closes; until then a change stated in the open episode ("we
switch the database to MySQL") would leave the older statement current in recall. Recall
therefore runs the same consolidation step on those turns with the deterministic
heuristic reflector, on top of the session's stored facts, and reads currency from the
result. The stored facts stay what reflection makes of the episode when it closes (with an
LLM, if one is configured); this view is recomputed on every recall and never written.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from datetime import UTC, datetime

from hivemem.config import ReflectionSettings
from hivemem.domain.consolidation import PlanContext, plan_actions
from hivemem.domain.episode import Episode
from hivemem.domain.fact import VISIBLE, Fact
from hivemem.domain.models import Turn
from hivemem.providers.heuristic import HeuristicReflector
from hivemem.providers.reflector import ReflectionRequest

_HEURISTIC = HeuristicReflector()


def with_unreflected(
    facts: Sequence[Fact], turns: Sequence[Turn], settings: ReflectionSettings
) -> list[Fact]:
    """`facts` (one session's, every status) as they would be once `turns` (that session's
    turns not yet reflected, any order) are: changed versions replace their stored ones, new
    facts are added. Without such turns, `facts` unchanged."""
    if not turns:
        return list(facts)
    ordered = sorted(turns, key=lambda t: t.seq)
    first, last = ordered[0], ordered[-1]
    episode = Episode(
        episode_id=f"unreflected:{first.session_id}:{first.seq}",
        session_id=first.session_id, index=0,
        turn_ids=tuple(t.turn_id for t in ordered),
        seq_start=first.seq, seq_end=last.seq,
        started_at=first.timestamp, ended_at=last.timestamp, close_reason="manual",
        namespace=first.namespace,
    )
    current = [f for f in facts if f.status in VISIBLE]
    result = _HEURISTIC.reflect(ReflectionRequest(
        session_id=first.session_id, episode=episode, turns=ordered, prior_facts=current,
        max_facts=settings.max_facts_per_episode,
    ))
    if not result.actions:
        return list(facts)
    plan = plan_actions(list(facts), result.actions, PlanContext(
        session_id=first.session_id, episode_id=episode.episode_id,
        namespace=first.namespace, now=datetime.now(UTC), valid_from=last.timestamp,
        # No embeddings here: slots and values decide, as they do for the heuristic itself.
        similarity=lambda _content, _fact: 0.0,
        dedup_threshold=settings.dedup_threshold, min_confidence=settings.min_confidence,
    ))
    merged = {f.fact_id: f for f in facts}
    merged.update(plan.writes)
    return list(merged.values())


class UnreflectedView:
    """`with_unreflected`, remembered for the last few (turns, facts) states it saw: an
    agent recalls many times between two turns, and the answer only changes when a turn
    arrives or a fact changes. The key holds every input that decides the answer, so a
    remembered one is never stale (the callers' scope filters are in what they pass)."""

    def __init__(self, settings: ReflectionSettings, size: int = 256) -> None:
        self.settings = settings
        self.size = size
        self._seen: OrderedDict[tuple[object, ...], list[Fact]] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, facts: Sequence[Fact], turns: Sequence[Turn]) -> list[Fact]:
        if not turns:
            return list(facts)
        key = (
            tuple((t.session_id, t.turn_id, t.seq, t.content) for t in turns),
            tuple((f.fact_id, f.status, f.superseded_by, f.valid_to) for f in facts),
        )
        with self._lock:
            known = self._seen.get(key)
            if known is not None:
                self._seen.move_to_end(key)
                return known
        result = with_unreflected(facts, turns, self.settings)
        with self._lock:
            self._seen[key] = result
            while len(self._seen) > self.size:
                self._seen.popitem(last=False)
        return result
