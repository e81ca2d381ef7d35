"""One session's facts indexed for recall's currency questions about single candidates (pure).

`hivemem.domain.recall.currency.stale_statements` and `personal_statements` answer for every
fact of a session at once: their cost grows with the session's facts, and a session that
reflection keeps writing to pays it on every recall. `FactIndex` keeps the facts by id, by
the turns they cite and by owner, and is updated in place as facts are written; `CurrencyLens`
then answers the same two questions for one candidate key at a time (the ~60 a recall
scores), over the index seen through an optional overlay of facts (what the session's
unreflected turns would change) and a visibility filter (the asker's scope). The answers are
the ones the whole-set functions give for the candidate (`tests/unit/test_fact_index.py`
compares them on generated fact sets).
"""

from __future__ import annotations

import itertools
from abc import abstractmethod
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import TypeVar

from hivemem.domain.fact import VISIBLE, Fact, FactKind
from hivemem.domain.recall.currency import (
    answers_questions,
    fact_key,
    marks_history,
    turn_key,
)
from hivemem.domain.slots import canonical_slot, is_personal
from hivemem.domain.values import values_of

Admits = Callable[[Fact], bool]


_V = TypeVar("_V")
_A = TypeVar("_A")  # a lens answer: what replaced a statement, or whose slot it states

# Askers whose chain jumps an index keeps at once (`FactIndex.frontier`): a session is
# asked by a few agents; more and the jumps start over.
_FRONTIER_KEYS = 16
# Candidate keys whose lens answers an index keeps per asker and overlay
# (`FactIndex.kept_answers`), at most: a recall asks ~100; past this they start over.
_KEPT_ANSWERS = 10_000
# (Asker, overlay) pairs an index keeps answers for at once: the oldest go first (an open
# episode's overlay changes with each turn said).
_KEPT_LENSES = 16


def _cited(fact: Fact) -> set[str]:
    return {*fact.source_turn_ids, *fact.mentioned_in, *fact.considered_in}


def _cites(fact: Fact, turn_id: str) -> bool:
    """`turn_id in _cited(fact)`, without making the set."""
    return (turn_id in fact.source_turn_ids or turn_id in fact.mentioned_in
            or turn_id in fact.considered_in)


_NONE: frozenset[str] = frozenset()


def owner_of(fact: Fact) -> str | None:
    """Whose own slot the fact states (lower-cased), or None (`personal_statements`)."""
    owner = (fact.agent_id or "").lower()
    if not owner or not (fact.kind == FactKind.PREFERENCE
                         or is_personal(fact.subject, fact.agent_id)):
        return None
    return owner


def _order(fact: Fact) -> tuple[object, str]:
    return (fact.created_at, fact.fact_id)


def _subject_words(fact: Fact) -> list[str]:
    return canonical_slot(fact.subject).split() if fact.subject else []


def _drop(table: dict[str, dict[str, None]], key: str, fact_id: str) -> None:
    bucket = table.get(key)
    if bucket is not None:
        bucket.pop(fact_id, None)
        if not bucket:
            del table[key]


@dataclass
class FactIndex:
    """A session's facts (every status and scope), updated in place (`put`, `clear`).
    Not thread-safe: its owner serialises writers and readers."""

    by_id: dict[str, Fact] = field(default_factory=dict)
    cites: dict[str, set[str]] = field(default_factory=dict)  # turn id -> fact ids citing it
    owners: dict[str, set[str]] = field(default_factory=dict)  # owner -> their personal facts
    # Subject word / value -> fact ids, oldest first (dicts as ordered sets): where the
    # facts that a new statement may change are found without reading every fact.
    subject_words: dict[str, dict[str, None]] = field(default_factory=dict)
    values: dict[str, dict[str, None]] = field(default_factory=dict)
    # Per asker (an admission key, see `frontier`): a history fact's id -> the fact its
    # chain of versions reaches (path-compressed). A slot changed a thousand times is a
    # chain a thousand long, and recall asks for the ends of many of its versions: walked
    # anew each recall, that made idle recall grow with the session's history (85 ms p50
    # at 100k turns, measured). Valid until a history fact itself changes (`put`).
    _frontiers: dict[Hashable, dict[str, str]] = field(
        default_factory=dict, repr=False, compare=False)
    # Per asker (as `_frontiers`) and overlay (its facts' identities): what a lens over this
    # index alone answered per candidate key (`KeptAnswers`), for the next recalls while
    # no fact changes. Valid until any `put` or `clear` (each drops them all).
    _answers: dict[tuple[Hashable, tuple[int, ...]], KeptAnswers] = field(
        default_factory=dict, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.by_id)

    def put(self, fact: Fact) -> None:
        """Add `fact`, or replace the stored version of it."""
        self._answers.clear()  # any change may change any answer
        old = self.by_id.get(fact.fact_id)
        if old is not None:
            self._unlink(old)
            if old.status not in VISIBLE:
                # A version already history changed (re-pointed, made visible again): a
                # path through it may be gone. A new fact, or a current one superseded
                # now, only lengthens chains at their ends: every jump still lands on
                # the chain, and the walk goes on from there.
                self._frontiers.clear()
        self.by_id[fact.fact_id] = fact
        for turn_id in _cited(fact):
            self.cites.setdefault(turn_id, set()).add(fact.fact_id)
        owner = owner_of(fact)
        if owner is not None:
            self.owners.setdefault(owner, set()).add(fact.fact_id)
        for word in _subject_words(fact):
            self.subject_words.setdefault(word, {})[fact.fact_id] = None
        for value in values_of(fact.content):
            self.values.setdefault(value, {})[fact.fact_id] = None

    def _unlink(self, fact: Fact) -> None:
        for turn_id in _cited(fact):
            ids = self.cites.get(turn_id)
            if ids is not None:
                ids.discard(fact.fact_id)
                if not ids:
                    del self.cites[turn_id]
        owner = owner_of(fact)
        if owner is not None and owner in self.owners:
            self.owners[owner].discard(fact.fact_id)
            if not self.owners[owner]:
                del self.owners[owner]
        for word in _subject_words(fact):
            _drop(self.subject_words, word, fact.fact_id)
        for value in values_of(fact.content):
            _drop(self.values, value, fact.fact_id)

    def clear(self) -> None:
        self._answers.clear()
        self._frontiers.clear()
        self.by_id.clear()
        self.cites.clear()
        self.owners.clear()
        self.subject_words.clear()
        self.values.clear()

    def near(self, words: Iterable[str], values: Iterable[str], *, recent: int,
             per_key: int) -> list[Fact]:
        """A bounded neighbourhood of facts for statements with these content `words` and
        `values`: the `recent` newest facts, and per word (of a subject) or value the
        `per_key` newest facts that have it. Oldest first (the index's order)."""
        ids: dict[str, None] = dict.fromkeys(
            itertools.islice(reversed(self.by_id), recent))
        for table, keys in ((self.subject_words, words), (self.values, values)):
            for key in keys:
                bucket = table.get(key)
                if bucket:
                    ids.update(dict.fromkeys(itertools.islice(reversed(bucket), per_key)))
        facts = [self.by_id[i] for i in ids if i in self.by_id]
        return sorted(facts, key=_order)

    def frontier(self, fact_id: str, key: Hashable, admits: Admits | None) -> str:
        """How far the stored chain of versions from `fact_id` (a stored fact `admits`
        lets the asker see) goes: the first current version on it, or the last version
        whose successor is not stored, not admitted or already on the path (the caller
        goes on from there). `key` names the asker's admission (facts `admits` lets
        through): jumps are kept per key."""
        cache = self._frontiers.get(key)
        if cache is None:
            if len(self._frontiers) >= _FRONTIER_KEYS:
                self._frontiers.clear()
            cache = self._frontiers[key] = {}
        path: dict[str, None] = {}  # an ordered set
        current = fact_id
        while True:
            jump = cache.get(current)
            if jump is not None:
                current = jump
                break
            fact = self.by_id.get(current)
            if fact is None or fact.status in VISIBLE:
                break
            nxt = self.by_id.get(fact.superseded_by or "")
            if nxt is None or nxt.fact_id in path or nxt.fact_id == current or (
                    admits is not None and not admits(nxt)):
                break
            path[current] = None
            current = nxt.fact_id
        for step in path:
            cache[step] = current
        return current

    def kept_answers(self, key: Hashable, overlay: tuple[Fact, ...] = ()) -> KeptAnswers:
        """The lens answers kept for the asker `key` (an admission key, as `frontier`'s)
        over this index through `overlay` (the very fact objects: an overlay made anew is
        another one, even if equal), made empty when missing or grown past
        `_KEPT_ANSWERS`. Asked under the owner's lock, as `put` is (which drops them)."""
        # The ids name the objects while the answers hold them (no id is reused meanwhile).
        at = (key, tuple(map(id, overlay)))
        kept = self._answers.get(at)
        if kept is None or len(kept) > _KEPT_ANSWERS:
            while len(self._answers) >= _KEPT_LENSES:
                del self._answers[next(iter(self._answers))]
            kept = self._answers[at] = KeptAnswers(overlay)
        return kept

    def sorted_facts(self) -> tuple[Fact, ...]:
        """Every fact, by creation (as `list_facts` sorts them): O(n log n), not for recall."""
        return tuple(sorted(self.by_id.values(), key=_order))


@dataclass(eq=False)
class KeptAnswers:
    """One asker's lens answers over one index and `overlay`, per candidate key (None kept
    too: most keys are no history and no one's own slot)."""

    overlay: tuple[Fact, ...] = ()  # held: its ids name it (`FactIndex.kept_answers`)
    replaced: dict[str, tuple[str, ...] | None] = field(default_factory=dict)
    owner: dict[str, str | None] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.replaced) + len(self.owner)


@dataclass(frozen=True)
class _View:
    """One session's index through an overlay and a visibility filter."""

    session_id: str
    index: FactIndex
    overlay: Mapping[str, Fact]
    overlay_cites: Mapping[str, frozenset[str]]
    admits: Admits | None
    lock: AbstractContextManager[object]
    prefix: str  # its turns' candidate keys start with this
    # What `admits` lets through, as a key for the index's chain jumps (None: no jumps).
    admit_key: Hashable | None = None

    def cited(self, turn_id: str) -> bool:
        """Whether any fact (stored or overlay) cites the turn at all (a dict lookup)."""
        return turn_id in self.index.cites or turn_id in self.overlay_cites

    def fact(self, fact_id: str) -> Fact | None:
        """The fact as the asker sees it: the overlay's version (made from what the asker
        sees), else the stored one if the asker's scope admits it."""
        fact = self.overlay.get(fact_id)
        if fact is not None:
            return fact
        fact = self.index.by_id.get(fact_id)
        if fact is None or (self.admits is not None and not self.admits(fact)):
            return None
        return fact

    def citing(self, turn_id: str) -> list[Fact]:
        """The visible facts that cite the turn (source, mention or consideration), in the
        order the whole-set functions meet them (by creation; overlay facts last when new)."""
        ids = self.index.cites.get(turn_id, _NONE)
        if turn_id in self.overlay_cites:
            ids = ids | self.overlay_cites[turn_id]
        out = [f for i in ids if (f := self.fact(i)) is not None and (
            # A stored fact is in `cites` under the turns it cites; an overlay version
            # of it may no longer cite this one.
            i not in self.overlay or _cites(f, turn_id))]
        stored = self.index.by_id
        return sorted(out, key=lambda f: (f.fact_id not in stored, f.created_at, f.fact_id))


class CurrencyLens:
    """`stale_statements` and `personal_statements` of the asked sessions' visible facts,
    answered per candidate key. Build one per recall (cheap: nothing is copied)."""

    def __init__(self) -> None:
        self._views: list[_View] = []
        self._heads: dict[str, Fact | None] = {}
        # Per view (by `id`) and turn: the facts citing it (`_View.citing`), which both
        # questions read for the same candidates.
        self._citing: dict[tuple[int, str], list[Fact]] = {}
        # Per view (by `id`): whether the index's chain jumps hold through its overlay.
        self._jumps: dict[int, bool] = {}
        # The answers the index keeps for this asker (`_kept`), once looked up.
        self._kept_answers: KeptAnswers | None = None
        self._kept_known = False

    def add(self, session_id: str, index: FactIndex, *, admits: Admits | None = None,
            overlay: Iterable[Fact] = (),
            lock: AbstractContextManager[object] | None = None,
            admit_key: Hashable | None = None) -> None:
        """A session's facts: `index` seen through `overlay` (facts that replace or join
        the stored ones) and `admits` (the asker's scope); `lock`: held while the index is
        read (its writers hold it too). `admit_key`: names what `admits` lets through
        (equal keys, equal admissions; `admits` None: any key), so the index's chain jumps
        (`FactIndex.frontier`) serve every recall of that asker; None: no jumps."""
        writes = {f.fact_id: f for f in overlay}
        cites: dict[str, set[str]] = {}
        for fact in writes.values():
            for turn_id in _cited(fact):
                cites.setdefault(turn_id, set()).add(fact.fact_id)
        self._kept_known = False  # one more view: kept answers no longer hold
        self._views.append(_View(session_id, index, writes,
                                 {t: frozenset(ids) for t, ids in cites.items()}, admits,
                                 lock or nullcontext(), f"turn:{session_id}:",
                                 admit_key))

    # -- the two questions --------------------------------------------------------------

    def replaced(self, key: str) -> tuple[str, ...] | None:
        """What replaced the statement `key` (sorted keys; empty for a retraction), or None
        when it is not history (`stale_statements(...).get(key)`)."""
        kept = self._kept()
        return self._answer(key, None if kept is None else kept.replaced, self._replaced)

    def _answer(self, key: str, kept: dict[str, _A | None] | None,
                work: Callable[[str], _A | None]) -> _A | None:
        """`work(key)` under the views' locks (None for a key no view knows), from and
        into `kept` (the answers kept for this asker, None: none kept)."""
        if kept is not None and key in kept:
            return kept[key]
        if self._unknown(key):
            answer = None
        else:
            with _Locks(self._views):
                answer = work(key)
        if kept is not None:
            kept[key] = answer
        return answer

    def _kept(self) -> KeptAnswers | None:
        """The answers the index keeps for this asker and overlay, when the lens answers
        from it alone (one view, an admission key): the same index, asker and overlay
        objects (`UnreflectedView` hands out the same while the turns and facts stay), the
        same answers, for every recall until a fact changes (`FactIndex.put` drops them).
        An answer kept after a change lands in answers the index no longer hands out.
        The candidates' answers cost ~11% of a LoCoMo recall where a session's facts
        did not change since its last recall (the idle case, and most recalls)."""
        if not self._kept_known:
            self._kept_known = True
            self._kept_answers = None
            if len(self._views) == 1:
                view = self._views[0]
                if view.admit_key is not None:
                    with view.lock:
                        self._kept_answers = view.index.kept_answers(
                            view.admit_key, tuple(view.overlay.values()))
        return self._kept_answers

    def _unknown(self, key: str) -> bool:
        """Whether no fact can say anything about `key`: a turn no fact cites, or a fact
        that is in no index (most candidates; answered without a lock)."""
        if key.startswith("fact:"):
            fact_id = key[5:]
            return not any(fact_id in v.overlay or fact_id in v.index.by_id
                           for v in self._views)
        place = self._turn(key)
        return place is None or not place[0].cited(place[1])

    def _replaced(self, key: str) -> tuple[str, ...] | None:
        if key.startswith("fact:"):
            found = self._fact(key[5:])
            if found is None:
                return None
            view, fact = found
            if fact.status in VISIBLE:
                return None
            return tuple(sorted(self._successors(view, fact)))
        place = self._turn(key)
        if place is None:
            return None
        view, turn_id = place
        citing = self._citing_of(view, turn_id)
        if not citing or any(f.status in VISIBLE and turn_id in f.source_turn_ids
                             for f in citing):
            return None  # no fact about it, or something current states it
        out: set[str] | None = None
        for fact in citing:
            if fact.status in VISIBLE:
                if turn_id in fact.considered_in and answers_questions(fact):
                    out = (out or set()) | {fact_key(fact.fact_id)} | {
                        turn_key(fact.session_id, t) for t in fact.source_turn_ids}
            elif ((turn_id in fact.source_turn_ids or turn_id in fact.mentioned_in)
                  and marks_history(fact, self._head(view, fact))):
                out = (out or set()) | (self._successors(view, fact) - {key})
        return None if out is None else tuple(sorted(out))

    def owner(self, key: str) -> str | None:
        """Whose own slot `key` states (`personal_statements(...).get(key)`); kept as
        `replaced` is."""
        kept = self._kept()
        return self._answer(key, None if kept is None else kept.owner, self._owner)

    def _owner(self, key: str) -> str | None:
        if key.startswith("fact:"):
            found = self._fact(key[5:])
            return None if found is None else owner_of(found[1])
        place = self._turn(key)
        if place is None:
            return None
        view, turn_id = place
        for fact in self._citing_of(view, turn_id):
            owner = owner_of(fact)
            if owner is not None and turn_id in fact.source_turn_ids:
                return owner
        return None

    def owners(self) -> set[str]:
        """Everyone whose own slot some visible fact states (the values of
        `personal_statements`): per owner, until one of their facts is visible."""
        with _Locks(self._views):
            return self._owners()

    def _owners(self) -> set[str]:
        out: set[str] = set()
        for view in self._views:
            for fact in view.overlay.values():
                if owner := owner_of(fact):
                    out.add(owner)
            for owner, ids in view.index.owners.items():
                if owner not in out and any(
                        (f := view.fact(i)) is not None and owner_of(f) == owner
                        for i in ids):
                    out.add(owner)
        return out

    # -- helpers ----------------------------------------------------------------------------

    def _fact(self, fact_id: str) -> tuple[_View, Fact] | None:
        for view in self._views:
            fact = view.fact(fact_id)
            if fact is not None:
                return view, fact
        return None

    def _citing_of(self, view: _View, turn_id: str) -> list[Fact]:
        """`view.citing(turn_id)`, worked out once per lens (asked under the view's lock)."""
        at = (id(view), turn_id)
        found = self._citing.get(at)
        if found is None:
            found = self._citing[at] = view.citing(turn_id)
        return found

    def _turn(self, key: str) -> tuple[_View, str] | None:
        for view in self._views:
            if key.startswith(view.prefix):
                return view, key[len(view.prefix):]
        return None

    def _successors(self, view: _View, fact: Fact) -> set[str]:
        head = self._head(view, fact)
        if head is not None:
            return {fact_key(head.fact_id)} | {
                turn_key(head.session_id, t) for t in head.source_turn_ids}
        if fact.retracted_by:
            return {turn_key(fact.session_id, t) for t in fact.retracted_by}
        return set()

    def _head(self, view: _View, fact: Fact) -> Fact | None:
        """The current version at the end of `fact`'s chain (None: retracted or unknown).
        Over stored versions it jumps as far as the index's kept jumps go
        (`FactIndex.frontier`), then steps on through the overlay as before."""
        path: list[str] = []
        seen: set[str] = set()
        head: Fact | None = fact
        jumps = self._can_jump(view)
        while head is not None and head.status not in VISIBLE:
            if head.fact_id in self._heads:
                head = self._heads[head.fact_id]
                break
            path.append(head.fact_id)
            seen.add(head.fact_id)
            ahead = head.superseded_by or ""
            if jumps and head.fact_id not in view.overlay:
                reached = view.index.frontier(head.fact_id, view.admit_key, view.admits)
                if reached != head.fact_id:
                    ahead = reached
            nxt = view.fact(ahead)
            head = None if nxt is None or nxt.fact_id in seen else nxt
        for fact_id in path:
            self._heads[fact_id] = head
        return head

    def _can_jump(self, view: _View) -> bool:
        """Whether the index's jumps are the view's: an asker key is given and the overlay
        rewrites no stored history version (it changes current ones and adds new ones,
        which the walk steps through after a jump). Asked under the view's lock."""
        known = self._jumps.get(id(view))
        if known is None:
            stored = view.index.by_id
            known = self._jumps[id(view)] = view.admit_key is not None and not any(
                (old := stored.get(fact_id)) is not None and old.status not in VISIBLE
                for fact_id in view.overlay)
        return known


class _Locks:
    """Every view's lock, in order (one recall's sessions; released in reverse)."""

    def __init__(self, views: list[_View]) -> None:
        self._locks = [v.lock for v in views]

    def __enter__(self) -> None:
        for lock in self._locks:
            lock.__enter__()

    def __exit__(self, *exc: object) -> None:
        for lock in reversed(self._locks):
            lock.__exit__(None, None, None)


class Lookup(Mapping[str, _V]):
    """A read-only mapping read per key: `find` answers a key in one pass (None: not
    there), and `in`, `[]` and `get` go through it. Recall reads each candidate's currency
    of a stack of such views (the slot table's over the facts', the answers found at
    recall over both): asked by `in` and then `[]`, every layer was walked twice."""

    @abstractmethod
    def find(self, key: str) -> _V | None:
        """The value of `key`, or None."""

    def __getitem__(self, key: str) -> _V:
        value = self.find(key)
        if value is None:
            raise KeyError(key)
        return value

    def get(self, key: str, default: object = None) -> object:  # type: ignore[override]
        value = self.find(key)
        return default if value is None else value

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.find(key) is not None


def find(mapping: Mapping[str, _V], key: str) -> _V | None:
    """`mapping.get(key)`: a `Lookup` by its `find`, any other mapping by `in`, then `[]`
    (a lazy view's `Mapping.get` raises and catches a KeyError for each key it has
    nothing for)."""
    # (By the method, not `isinstance`: against an ABC that is a Python-level call.)
    finds: Callable[[str], _V | None] | None = getattr(mapping, "find", None)
    if finds is not None:
        return finds(key)
    if key not in mapping:
        return None
    return mapping[key]


class PerKey(Lookup[_V]):
    """A lens answer as the read-only mapping recall reads (`get`, `in`), each key looked
    up once. Iterating it is not supported: it would cost what the lens avoids."""

    def __init__(self, lookup: Callable[[str], _V | None]) -> None:
        self._lookup = lookup
        self._memo: dict[str, _V | None] = {}

    def find(self, key: str) -> _V | None:
        memo = self._memo
        if key in memo:
            return memo[key]
        value = memo[key] = self._lookup(key)
        return value

    def __iter__(self) -> Iterator[str]:
        raise TypeError("a currency lens answers per key; it does not list its keys")

    def __len__(self) -> int:
        raise TypeError("a currency lens answers per key; it does not count its keys")


class LensMapping(PerKey[tuple[str, ...]]):
    """`CurrencyLens.replaced` per key."""

    def __init__(self, lens: CurrencyLens) -> None:
        super().__init__(lens.replaced)


class OwnerMapping(PerKey[str]):
    """`CurrencyLens.owner` per key, and `values()`: every owner."""

    def __init__(self, lens: CurrencyLens) -> None:
        super().__init__(lens.owner)
        self._lens = lens
        self._owners: set[str] | None = None

    def values(self) -> set[str]:  # type: ignore[override]
        if self._owners is None:
            self._owners = self._lens.owners()
        return self._owners
