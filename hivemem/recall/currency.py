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

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hivemem.config import ReflectionSettings
from hivemem.domain.fact import VISIBLE, Fact
from hivemem.domain.models import Turn
from hivemem.domain.names import session_name
from hivemem.domain.recall.currency import fact_key, turn_key
from hivemem.domain.recall.fact_index import CurrencyLens, LensMapping, OwnerMapping
from hivemem.domain.scope import DEFAULT_NAMESPACE, Scope
from hivemem.domain.slot_table import SlotView
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
    # The asking session's values moved on from (`SlotView.gone`): a candidate carrying
    # one without its successor is history too (`hivemem.domain.lineage.stale_value`).
    gone: Mapping[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)


class CurrencyView:
    def __init__(
        self, vectors: VectorStore, reflection: ReflectionSettings, size: int = 256,
        foreground: Foreground | None = None,
    ) -> None:
        self.known = KnownFacts(vectors)
        self.unreflected = UnreflectedView(reflection, size, foreground=foreground)

    def close(self) -> None:
        self.unreflected.close()

    def facts(self, sessions: Sequence[str], namespace: str = DEFAULT_NAMESPACE
              ) -> list[tuple[str, SessionFacts]]:
        """Each of `namespace`'s sessions' facts now (every status and scope), by id."""
        return [(s, self.known.get(session_name(namespace, s))) for s in sessions]

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
        `unreflected`: that session's turns no reflection has seen yet; `snapshots`: what
        `facts(sessions)` returned earlier in the same recall (read now if not given);
        `table`: the session's slot table, kept by the pipeline per turn (it says what the
        unreflected turns change, so they are not derived here). The answer is read per
        candidate key as recall asks (it holds no copy of the facts)."""
        if snapshots is None:
            snapshots = self.facts(
                sessions, DEFAULT_NAMESPACE if access is None else access.namespace)

        def admits(fact: Fact) -> bool:
            return _admits(access, fact)

        lens = CurrencyLens()
        empty = True
        for session, snap in snapshots:
            overlay = self.unreflected.writes(snap, unreflected, access, admits) if (
                session == session_id and table is None) else {}
            empty = empty and not overlay and not len(snap)
            lens.add(session, snap.index, admits=None if access is None else admits,
                     overlay=overlay.values(), lock=snap.lock)
        answer = Currency({}, {}) if empty else Currency(LensMapping(lens), OwnerMapping(lens))
        if table is None:
            return answer
        own = next((snap for s, snap in snapshots if s == session_id), None)
        return with_table(answer, session_id, _citing(own, admits), table, access)


def with_table(
    currency: Currency, session_id: str, citing: Callable[[str], Sequence[Fact]],
    table: SlotView, access: Scope | None,
) -> Currency:
    """`currency` (from the stored facts) with what the slot table says on top: every turn
    it made history (for an asker who may see what replaced it), with every turn on the way
    to what is current; and a current fact whose statement is history now (`citing`: the
    session's facts that cite a turn, as the asker may see them)."""
    replaced: dict[str, tuple[str, ...]] = {}
    stale_turns: dict[str, tuple[str, ...]] = {}
    for turn_id, entry in table.replaced.items():
        if not entry.visible_to(access):
            continue
        key = turn_key(session_id, turn_id)
        successors = tuple(turn_key(session_id, t) for t in table.chain(turn_id))
        stale_turns[turn_id] = successors
        replaced[key] = successors
    for turn_id, successors in stale_turns.items():
        for fact in citing(turn_id):
            # Its statement is history (a fact also cites the acknowledgement after it).
            if fact.status in VISIBLE and turn_id in fact.source_turn_ids:
                key = fact_key(fact.fact_id)
                replaced[key] = tuple(sorted({*replaced.get(key, ()), *successors}))
    personal = {turn_key(session_id, t): owner for t, owner in table.personal.items()}
    return Currency(_Layered(replaced, currency.replaced, merge=True),
                    _Layered(personal, currency.personal, merge=False), gone=table.gone)


class _Layered(Mapping[str, Any]):
    """The slot table's answers over the stored facts' (read per key, as recall asks):
    `merge` joins both answers' successors, else the base answer wins."""

    def __init__(self, top: dict[str, Any], base: Mapping[str, Any], *, merge: bool) -> None:
        self._top = top
        self._base = base
        self._merge = merge

    def __getitem__(self, key: str) -> Any:
        below = self._base.get(key)
        above = self._top.get(key)
        if above is None and below is None:
            raise KeyError(key)
        if above is None:
            return below
        if below is None:
            return above
        return tuple(sorted({*above, *below})) if self._merge else below

    def __contains__(self, key: object) -> bool:
        return key in self._top or key in self._base

    def __iter__(self) -> Iterator[str]:
        raise TypeError("the currency of a recall is read per key")

    def __len__(self) -> int:
        raise TypeError("the currency of a recall is read per key")

    def values(self) -> Any:
        return {*self._top.values(), *self._base.values()}


def _citing(
    snap: SessionFacts | None, admits: Callable[[Fact], bool]
) -> Callable[[str], Sequence[Fact]]:
    def citing(turn_id: str) -> Sequence[Fact]:
        if snap is None:
            return []
        with snap.lock:
            index = snap.index
            return [f for i in index.cites.get(turn_id, ()) if (f := index.by_id.get(i))
                    and admits(f)]
    return citing


def _admits(access: Scope | None, fact: Fact) -> bool:
    """The store's scope filter, applied to a fact already read (the same rule)."""
    return access is None or access.admits(fact.namespace, fact.visibility, fact.agent_id)
