"""Which statements are history, and whose slots they state, for one recall (nothing stored).

`hivemem.domain.recall.currency` derives both from all of the asked sessions' facts plus what
the asking session's unreflected turns change (`UnreflectedView`). Deriving them costs
milliseconds per call at a few hundred facts, and reading the facts costs more, so both are
kept: the facts by `KnownFacts` (which re-reads only what was written since), the answer
until a session's facts, the unreflected turns or the asker's scope change.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from hivemem.config import ReflectionSettings
from hivemem.domain.fact import Fact
from hivemem.domain.models import Turn
from hivemem.domain.recall.currency import personal_statements, stale_statements
from hivemem.domain.scope import Scope
from hivemem.recall.known_facts import KnownFacts, SessionFacts
from hivemem.recall.provisional import UnreflectedView
from hivemem.store.vectors.base import VectorStore


@dataclass(frozen=True, slots=True)
class Currency:
    # Candidate key -> the keys of what replaced it (see `stale_statements`).
    replaced: dict[str, tuple[str, ...]]
    # Candidate key -> whose own slot it states (see `personal_statements`).
    personal: dict[str, str]


class CurrencyView:
    def __init__(
        self, vectors: VectorStore, reflection: ReflectionSettings, size: int = 256
    ) -> None:
        self.known = KnownFacts(vectors)
        self.unreflected = UnreflectedView(reflection)
        self.size = size
        self._seen: OrderedDict[tuple[object, ...], Currency] = OrderedDict()
        self._lock = threading.Lock()

    def facts(self, sessions: Sequence[str]) -> list[tuple[str, SessionFacts]]:
        """Each session's facts now (every status and scope)."""
        return [(s, self.known.get(s)) for s in sessions]

    def __call__(
        self,
        session_id: str,
        sessions: Sequence[str],
        access: Scope | None,
        unreflected: Sequence[Turn],
        snapshots: Sequence[tuple[str, SessionFacts]] | None = None,
    ) -> Currency:
        """For a recall in `session_id` over `sessions` (it first), by `access`;
        `unreflected`: that session's turns no reflection has seen yet; `snapshots`: what
        `facts(sessions)` returned earlier in the same recall (read now if not given)."""
        if snapshots is None:
            snapshots = self.facts(sessions)
        key = (
            tuple((s, snap.revision) for s, snap in snapshots),
            access,
            tuple((t.session_id, t.turn_id, t.seq, t.content) for t in unreflected),
        )
        with self._lock:
            seen = self._seen.get(key)
            if seen is not None:
                self._seen.move_to_end(key)
                return seen
        visible = {s: [f for f in snap.facts if _admits(access, f)] for s, snap in snapshots}
        known = [
            *(f for s in sessions if s != session_id for f in visible[s]),
            *self.unreflected(visible.get(session_id, []), unreflected),
        ]
        answer = Currency(stale_statements(known), personal_statements(known))
        with self._lock:
            self._seen[key] = answer
            while len(self._seen) > self.size:
                self._seen.popitem(last=False)
        return answer


def _admits(access: Scope | None, fact: Fact) -> bool:
    """The store's scope filter, applied to a fact already read (the same rule)."""
    return access is None or access.admits(fact.namespace, fact.visibility, fact.agent_id)
