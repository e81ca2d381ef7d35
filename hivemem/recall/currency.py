"""Which statements are history, and whose slots they state, for one recall (nothing stored).

`hivemem.domain.recall.currency` derives both from all of the asked sessions' facts plus what
the asking session's unreflected turns change (`UnreflectedView`). Deriving them for every
fact cost what the sessions hold on every recall whose facts had changed (every recall while
reflection writes), so recall asks per candidate instead: the facts are kept indexed by
`KnownFacts` (which re-reads only what was written since), and `CurrencyLens` answers for
the keys recall scores, over that index, the unreflected turns' changes and the asker's
scope.

The slot table (`SlotView`) is read the same way: per candidate key, never whole. A long
session's table holds every statement it replaced (~25k at 100k turns) in chains of one
slot's versions thousands long; spelling out every entry's whole chain on every recall cost
seconds (the sum of the chains' squares: 100k turns, recall p95 over 10 s). `TableChains`
answers per turn and keeps its answers while the view is the same (`SlotTableStore` hands
out the same view until the table changes).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hivemem.config import ReflectionSettings
from hivemem.domain.fact import VISIBLE, Fact
from hivemem.domain.lineage import GoneValues
from hivemem.domain.models import Turn
from hivemem.domain.names import session_name
from hivemem.domain.recall.currency import turn_key
from hivemem.domain.recall.fact_index import (
    CurrencyLens,
    LensMapping,
    Lookup,
    OwnerMapping,
    PerKey,
    find,
)
from hivemem.domain.scope import DEFAULT_NAMESPACE, Scope
from hivemem.domain.slot_table import SlotView
from hivemem.domain.value_clauses import ValueParts
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
    # The asking session's values moved on from (`SlotView.gone`), read for candidates'
    # texts: one carrying such a value without its successor is history too
    # (`hivemem.domain.lineage.GoneValues.stale`). None: no value moved on from.
    gone: GoneValues | None = None
    # Candidate key -> which of its values went and which it still carries, for a turn the
    # slot table made history only in part (`Replacement.partial`): it is stale only for a
    # question about a gone value. None: no such turn.
    parts: Callable[[str], ValueParts | None] | None = None


class CurrencyView:
    def __init__(
        self, vectors: VectorStore, reflection: ReflectionSettings, size: int = 256,
        foreground: Foreground | None = None,
    ) -> None:
        self.known = KnownFacts(vectors)
        self.unreflected = UnreflectedView(reflection, size, foreground=foreground)
        self._chains: OrderedDict[str, TableChains] = OrderedDict()
        self._chains_lock = threading.Lock()
        self._chains_size = size

    def chains(self, session_id: str, table: SlotView) -> TableChains:
        """The answers kept for `table` (new ones when the session's table changed)."""
        with self._chains_lock:
            kept = self._chains.get(session_id)
            if kept is None or kept.view is not table:
                kept = self._chains[session_id] = TableChains(table)
            self._chains.move_to_end(session_id)
            while len(self._chains) > self._chains_size:
                self._chains.popitem(last=False)
            return kept

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
                     overlay=overlay.values(), lock=snap.lock,
                     admit_key=_ANYONE if access is None else access)
        answer = Currency({}, {}) if empty else Currency(LensMapping(lens), OwnerMapping(lens))
        if table is None:
            return answer
        own = next((snap for s, snap in snapshots if s == session_id), None)
        return with_table(answer, session_id, _fact_of(own, admits), table, access,
                          chains=self.chains(session_id, table))


# The chain-jump key of a recall with no asker's scope (every fact admitted).
_ANYONE = "anyone"

# Turns on the way from a replaced statement to what is current, at most, besides what is
# current (a chain of one slot's versions can be thousands long; its nearest and its
# end are what recall compares a candidate with).
NEAR_SUCCESSORS = 16


class TableChains:
    """Per turn of one `SlotView`: the turns on the way to what is current (`chain`);
    every owner of a personal statement; the values moved on from, read for texts
    (`gone`): each answer computed once for the view (not on every recall: the values
    moved on from grow with the session's history)."""

    def __init__(self, view: SlotView) -> None:
        self.view = view
        self._heads: dict[str, frozenset[str]] = {}
        self._chains: dict[str, tuple[str, ...]] = {}
        self._owners: frozenset[str] | None = None
        self._gone: GoneValues | None = None
        self._parts: dict[str, ValueParts | None] = {}
        self._lock = threading.Lock()

    def chain(self, turn_id: str) -> tuple[str, ...]:
        """As `SlotView.chain`: the turns that replaced `turn_id`, then what replaced them,
        in that order, but at most `NEAR_SUCCESSORS` of them before what is current now
        (the chain's ends, always there)."""
        with self._lock:
            got = self._chains.get(turn_id)
            if got is None:
                got = self._chains[turn_id] = self._chain(turn_id)
            return got

    def _chain(self, turn_id: str) -> tuple[str, ...]:
        replaced = self.view.replaced
        out: list[str] = []
        seen = {turn_id}
        todo = [turn_id]
        cut = False
        while todo:
            entry = replaced.get(todo.pop())
            if entry is None:
                continue
            for nxt in entry.by:
                if nxt in seen:
                    continue
                if len(out) >= NEAR_SUCCESSORS:
                    cut = True
                    break
                seen.add(nxt)
                out.append(nxt)
                todo.append(nxt)
            if cut:
                break
        if cut:  # the chain goes on: its ends
            out += sorted(self._ends(turn_id) - seen)
        return tuple(out)

    def _ends(self, turn_id: str) -> frozenset[str]:
        """The turns at the end of `turn_id`'s chains (not replaced themselves), each
        turn's kept: every chain of the view walked once at most."""
        heads, replaced = self._heads, self.view.replaced
        stack: list[tuple[str, bool]] = [(turn_id, False)]
        on_path: set[str] = set()
        while stack:
            node, expanded = stack.pop()
            if node in heads:
                continue
            entry = replaced.get(node)
            if entry is None:
                heads[node] = frozenset((node,))
                continue
            if expanded:
                on_path.discard(node)
                ends: set[str] = set()
                for nxt in entry.by:
                    ends |= heads.get(nxt, frozenset())  # a cycle's way back: nothing
                heads[node] = frozenset(ends)
                continue
            on_path.add(node)
            stack.append((node, True))
            stack += [(nxt, False) for nxt in entry.by if nxt not in heads
                      and nxt not in on_path]
        return heads[turn_id] - {turn_id}

    def parts(self, turn_id: str) -> ValueParts | None:
        """The values of a turn the table made history only in part (None: not such a turn),
        read once for the view."""
        with self._lock:
            if turn_id in self._parts:
                return self._parts[turn_id]
        entry = self.view.replaced.get(turn_id)
        got = ValueParts.of(entry.gone, entry.kept) if entry is not None and entry.partial \
            else None
        with self._lock:
            self._parts[turn_id] = got
        return got

    def owners(self) -> frozenset[str]:
        with self._lock:
            if self._owners is None:
                self._owners = frozenset(self.view.personal.values())
            return self._owners

    def gone(self) -> GoneValues | None:
        """The view's values moved on from, read once (None: none)."""
        if not self.view.gone:
            return None
        with self._lock:
            if self._gone is None:
                self._gone = GoneValues(self.view.gone)
            return self._gone


def with_table(
    currency: Currency, session_id: str, fact_of: Callable[[str], Fact | None],
    table: SlotView, access: Scope | None, *, chains: TableChains | None = None,
) -> Currency:
    """`currency` (from the stored facts) with what the slot table says on top, per key:
    every turn it made history (for an asker who may see what replaced it), with the turns
    on the way to what is current (`TableChains.chain`); and a current fact whose statement
    is history now (`fact_of`: the session's fact by id, as the asker may see it)."""
    chains = chains if chains is not None and chains.view is table else TableChains(table)
    replaced = _TablePerKey(_replaced_lookup(session_id, fact_of, table, access, chains))
    prefix = turn_key(session_id, "")
    personal = _TablePerKey(
        lambda key: table.personal.get(key[len(prefix):]) if key.startswith(prefix) else None,
        chains.owners)
    parts = chains.parts

    def parts_of(key: str) -> ValueParts | None:
        return parts(key[len(prefix):]) if key.startswith(prefix) else None

    return Currency(_Layered(replaced, currency.replaced, merge=True),
                    _Layered(personal, currency.personal, merge=False), gone=chains.gone(),
                    parts=parts_of)


def _replaced_lookup(
    session_id: str, fact_of: Callable[[str], Fact | None], table: SlotView,
    access: Scope | None, chains: TableChains,
) -> Callable[[str], tuple[str, ...] | None]:
    prefix = turn_key(session_id, "")

    def successors(turn_id: str) -> tuple[str, ...] | None:
        entry = table.replaced.get(turn_id)
        if entry is None or not entry.visible_to(access):
            return None
        return tuple(turn_key(session_id, t) for t in chains.chain(turn_id))

    def lookup(key: str) -> tuple[str, ...] | None:
        if key.startswith(prefix):
            return successors(key[len(prefix):])
        if not key.startswith("fact:"):
            return None
        fact = fact_of(key[len("fact:"):])
        if fact is None or fact.status not in VISIBLE:
            return None
        # Its statement is history (a fact also cites the acknowledgement after it).
        found = [s for t in fact.source_turn_ids if (s := successors(t)) is not None]
        return tuple(sorted({k for s in found for k in s})) if found else None

    return lookup


class _TablePerKey(PerKey[Any]):
    """A slot-table answer read per key (`get`, `in`), each key looked up once; `values()`
    when given (every owner). Not iterable: it would cost the whole table."""

    def __init__(self, lookup: Callable[[str], Any],
                 values: Callable[[], frozenset[str]] | None = None) -> None:
        super().__init__(lookup)
        self._values = values

    def values(self) -> Any:
        if self._values is None:
            raise TypeError("the slot table is read per key")
        return self._values()


class _Layered(Lookup[Any]):
    """The slot table's answers over the stored facts' (read per key, as recall asks):
    `merge` joins both answers' successors, else the base answer wins."""

    def __init__(self, top: Mapping[str, Any], base: Mapping[str, Any], *, merge: bool
                 ) -> None:
        self._top = top
        self._base = base
        self._merge = merge

    def find(self, key: str) -> Any:
        below = find(self._base, key)
        above = find(self._top, key)
        if above is None:
            return below
        if below is None:
            return above
        return tuple(sorted({*above, *below})) if self._merge else below

    def __iter__(self) -> Iterator[str]:
        raise TypeError("the currency of a recall is read per key")

    def __len__(self) -> int:
        raise TypeError("the currency of a recall is read per key")

    def values(self) -> Any:
        return {*self._top.values(), *self._base.values()}


def _fact_of(
    snap: SessionFacts | None, admits: Callable[[Fact], bool]
) -> Callable[[str], Fact | None]:
    """The session's fact by id, as the asker may see it (None: none such)."""
    def fact_of(fact_id: str) -> Fact | None:
        if snap is None:
            return None
        with snap.lock:
            fact = snap.index.by_id.get(fact_id)
        return fact if fact is not None and admits(fact) else None
    return fact_of


def _admits(access: Scope | None, fact: Fact) -> bool:
    """The store's scope filter, applied to a fact already read (the same rule)."""
    return access is None or access.admits(fact.namespace, fact.visibility, fact.agent_id)
