"""What the session's not-yet-reflected turns change, for recall (nothing is stored).

Reflection runs when an episode closes; until then a change stated in the open episode ("we
switch the database to MySQL") would leave the older statement current in recall. Recall
therefore runs the same consolidation step on those turns with the deterministic
heuristic reflector, on top of the session's stored facts, and reads currency from the
result. The stored facts stay what reflection makes of the episode when it closes (with an
LLM, if one is configured); this view is never written.

Consolidation compares each statement with every known fact, so doing it over all of a
session's facts on the recall's path cost what the session holds (hundreds of ms at a few
thousand facts, on every recall while reflection was writing). `UnreflectedView` does it on
the recall's path over a bounded neighbourhood only (the newest facts, and those whose
subject words or values the turns name: `FactIndex.near`), and over every fact in the
background, where the exact answer then replaces it; an answer is kept until the turns
change, and refined in the background when the facts have changed since.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime

from hivemem.config import ReflectionSettings
from hivemem.domain.consolidation import PlanContext, plan_actions
from hivemem.domain.episode import Episode
from hivemem.domain.fact import VISIBLE, Fact
from hivemem.domain.models import Turn
from hivemem.domain.slots import canonical_slot
from hivemem.domain.values import values_of
from hivemem.providers.heuristic import HeuristicReflector
from hivemem.providers.reflector import ReflectionRequest
from hivemem.recall.foreground import Foreground
from hivemem.recall.known_facts import SessionFacts

_HEURISTIC = HeuristicReflector()


def with_unreflected(
    facts: Sequence[Fact], turns: Sequence[Turn], settings: ReflectionSettings
) -> list[Fact]:
    """`facts` (one session's, every status) as they would be once `turns` (that session's
    turns not yet reflected, any order) are: changed versions replace their stored ones, new
    facts are added. Without such turns, `facts` unchanged."""
    merged = {f.fact_id: f for f in facts}
    merged.update(unreflected_writes(facts, turns, settings))
    return list(merged.values())


def unreflected_writes(
    facts: Sequence[Fact], turns: Sequence[Turn], settings: ReflectionSettings
) -> dict[str, Fact]:
    """What `turns` (one session's, not yet reflected) change among `facts`: the changed
    and new facts by id (`with_unreflected` merges them)."""
    if not turns:
        return {}
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
        return {}
    plan = plan_actions(list(facts), result.actions, PlanContext(
        session_id=first.session_id, episode_id=episode.episode_id,
        namespace=first.namespace, now=datetime.now(UTC), valid_from=last.timestamp,
        # No embeddings here: slots and values decide, as they do for the heuristic itself.
        similarity=lambda _content, _fact: 0.0,
        dedup_threshold=settings.dedup_threshold, min_confidence=settings.min_confidence,
    ))
    return dict(plan.writes)


Admits = Callable[[Fact], bool]
_WORD = re.compile(r"[a-z][a-z0-9+#-]{2,}")


@dataclass(frozen=True, slots=True)
class _Answer:
    writes: dict[str, Fact]
    revision: int  # of the session's facts it was made from
    exact: bool  # from every fact (else from a neighbourhood)


class UnreflectedView:
    """What a session's unreflected turns change, per (turns, asker): on the caller from a
    bounded neighbourhood of the facts (exact when the session has at most `recent`), then
    in the background from all of them. A remembered answer is used while the turns are the
    same, and refined in the background (at most every `refine_every_s`) once the facts
    changed. `foreground`: the background work waits while recalls run."""

    def __init__(self, settings: ReflectionSettings, size: int = 256, *,
                 recent: int = 256, per_key: int = 64, refine_every_s: float = 1.0,
                 foreground: Foreground | None = None) -> None:
        self.settings = settings
        self.size = size
        self.recent = recent
        self.per_key = per_key
        self.refine_every_s = refine_every_s
        self.foreground = foreground
        self._seen: OrderedDict[tuple[object, ...], _Answer] = OrderedDict()
        self._refining: dict[tuple[object, ...], float] = {}  # key -> when it was sent
        self._lock = threading.Lock()
        self._background = ThreadPoolExecutor(max_workers=1,
                                              thread_name_prefix="hivemem-unreflected")

    def close(self) -> None:
        self._background.shutdown(wait=False, cancel_futures=True)

    def writes(self, facts: SessionFacts, turns: Sequence[Turn], access: object,
               admits: Admits) -> dict[str, Fact]:
        """The changed and new facts of `turns` over `facts` as the asker (`access`,
        whose scope `admits` applies) sees them."""
        if not turns:
            return {}
        key = (tuple((t.session_id, t.turn_id, t.seq, t.content) for t in turns), access)
        with self._lock:
            known = self._seen.get(key)
            if known is not None:
                self._seen.move_to_end(key)
        if known is None:
            with facts.lock:
                revision = facts.revision
                exact = len(facts.index) <= self.recent
                if exact:
                    prior = [f for f in facts.index.sorted_facts() if admits(f)]
                else:
                    text = " ".join(t.content for t in turns)
                    words = {canonical_slot(w) for w in _WORD.findall(text.lower())}
                    prior = [f for f in facts.index.near(
                        words, values_of(text), recent=self.recent, per_key=self.per_key)
                        if admits(f)]
            known = self._keep(key, _Answer(
                unreflected_writes(prior, turns, self.settings), revision, exact))
        if not known.exact or known.revision != facts.revision:
            self._refine(key, facts, list(turns), admits)
        return known.writes

    def _keep(self, key: tuple[object, ...], answer: _Answer) -> _Answer:
        with self._lock:
            self._seen[key] = answer
            self._seen.move_to_end(key)
            while len(self._seen) > self.size:
                self._seen.popitem(last=False)
        return answer

    def _refine(self, key: tuple[object, ...], facts: SessionFacts, turns: list[Turn],
                admits: Admits) -> None:
        now = time.monotonic()
        with self._lock:
            if now - self._refining.get(key, -1e9) < self.refine_every_s:
                return
            self._refining[key] = now
            while len(self._refining) > self.size:
                del self._refining[next(iter(self._refining))]
        with contextlib.suppress(RuntimeError):  # closed
            self._background.submit(self._exact, key, facts, turns, admits)

    def _exact(self, key: tuple[object, ...], facts: SessionFacts, turns: list[Turn],
               admits: Admits) -> None:
        if self.foreground is not None:
            self.foreground.pause()
        with facts.lock:
            revision = facts.revision
            prior = [f for f in facts.index.sorted_facts() if admits(f)]
        self._keep(key, _Answer(unreflected_writes(prior, turns, self.settings), revision,
                                True))
