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
from hivemem.domain.fact import VISIBLE, Fact
from hivemem.domain.models import Turn
from hivemem.domain.recall.currency import (
    fact_key,
    personal_statements,
    stale_statements,
    turn_key,
)
from hivemem.domain.scope import Scope
from hivemem.domain.slot_table import SlotView
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
        table: SlotView | None = None,
    ) -> Currency:
        """For a recall in `session_id` over `sessions` (it first), by `access`;
        `snapshots`: what `facts(sessions)` returned earlier in the same recall (read now if
        not given). `table`: the session's slot table, kept by the pipeline per turn; without
        one, what `unreflected` (that session's turns no reflection has seen yet) change is
        derived here."""
        if snapshots is None:
            snapshots = self.facts(sessions)
        key = (
            tuple((s, snap.revision) for s, snap in snapshots),
            access,
            ("table", table.applied, len(table.replaced), len(table.personal))
            if table is not None
            else tuple((t.session_id, t.turn_id, t.seq, t.content) for t in unreflected),
        )
        with self._lock:
            seen = self._seen.get(key)
            if seen is not None:
                self._seen.move_to_end(key)
                return seen
        visible = {s: [f for f in snap.facts if _admits(access, f)] for s, snap in snapshots}
        own = visible.get(session_id, [])
        if table is None:
            own = self.unreflected(own, unreflected)
        known = [*(f for s in sessions if s != session_id for f in visible[s]), *own]
        answer = Currency(stale_statements(known), personal_statements(known))
        if table is not None:
            answer = with_table(answer, session_id, own, table, access)
        with self._lock:
            self._seen[key] = answer
            while len(self._seen) > self.size:
                self._seen.popitem(last=False)
        return answer


def with_table(
    currency: Currency, session_id: str, facts: Sequence[Fact], table: SlotView,
    access: Scope | None,
) -> Currency:
    """`currency` (from the stored facts) with what the slot table says on top: every turn
    it made history (for an asker who may see what replaced it), with every turn on the way
    to what is current; and a current fact whose statement is history now."""
    replaced = dict(currency.replaced)
    stale_turns: dict[str, tuple[str, ...]] = {}
    for turn_id, entry in table.replaced.items():
        if not entry.visible_to(access):
            continue
        chain = table.chain(turn_id)
        key = turn_key(session_id, turn_id)
        successors = tuple(turn_key(session_id, t) for t in chain)
        stale_turns[turn_id] = successors
        replaced[key] = tuple(sorted({*replaced.get(key, ()), *successors}))
    for fact in facts:
        if fact.status not in VISIBLE or not fact.source_turn_ids:
            continue
        # Its statement is history (a fact also cites the acknowledgement after it).
        gone = [t for t in fact.source_turn_ids if t in stale_turns]
        if gone:
            key = fact_key(fact.fact_id)
            replaced[key] = tuple(sorted({
                *replaced.get(key, ()), *(k for t in gone for k in stale_turns[t])}))
    personal = dict(currency.personal)
    for turn_id, owner in table.personal.items():
        personal.setdefault(turn_key(session_id, turn_id), owner)
    return Currency(replaced, personal)


def _admits(access: Scope | None, fact: Fact) -> bool:
    """The store's scope filter, applied to a fact already read (the same rule)."""
    return access is None or access.admits(fact.namespace, fact.visibility, fact.agent_id)
