"""Which statements are history, and whose slots they state, for one recall (nothing stored).

`hivemem.domain.recall.currency` derives both from all of the asked sessions' facts plus what
the asking session's unreflected turns change (`UnreflectedView`). Deriving them for every
fact cost what the sessions hold on every recall whose facts had changed (every recall while
reflection writes), so recall asks per candidate instead: the facts are kept indexed by
`KnownFacts` (which re-reads only what was written since), and `CurrencyLens` answers for
the keys recall scores, over that index, the unreflected turns' changes and the asker's
scope.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hivemem.config import ReflectionSettings
from hivemem.domain.fact import Fact
from hivemem.domain.models import Turn
from hivemem.domain.recall.fact_index import CurrencyLens, LensMapping, OwnerMapping
from hivemem.domain.scope import Scope
from hivemem.recall.foreground import Foreground
from hivemem.recall.known_facts import KnownFacts, SessionFacts
from hivemem.recall.provisional import UnreflectedView
from hivemem.store.vectors.base import VectorStore


@dataclass(frozen=True, slots=True)
class Currency:
    # Candidate key -> the keys of what replaced it (see `stale_statements`).
    replaced: Mapping[str, tuple[str, ...]]
    # Candidate key -> whose own slot it states (see `personal_statements`).
    personal: Mapping[str, str]


class CurrencyView:
    def __init__(
        self, vectors: VectorStore, reflection: ReflectionSettings, size: int = 256,
        foreground: Foreground | None = None,
    ) -> None:
        self.known = KnownFacts(vectors)
        self.unreflected = UnreflectedView(reflection, size, foreground=foreground)

    def close(self) -> None:
        self.unreflected.close()

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
        `facts(sessions)` returned earlier in the same recall (read now if not given).
        The answer is read per candidate key as recall asks (it holds no copy of the
        facts)."""
        if snapshots is None:
            snapshots = self.facts(sessions)

        def admits(fact: Fact) -> bool:
            return _admits(access, fact)

        lens = CurrencyLens()
        empty = True
        for session, snap in snapshots:
            overlay = self.unreflected.writes(snap, unreflected, access, admits) if (
                session == session_id) else {}
            empty = empty and not overlay and not len(snap)
            lens.add(session, snap.index, admits=None if access is None else admits,
                     overlay=overlay.values(), lock=snap.lock)
        if empty:  # no facts and no unreflected changes: nothing is history
            return Currency({}, {})
        return Currency(LensMapping(lens), OwnerMapping(lens))


def _admits(access: Scope | None, fact: Fact) -> bool:
    """The store's scope filter, applied to a fact already read (the same rule)."""
    return access is None or access.admits(fact.namespace, fact.visibility, fact.agent_id)
