"""Consolidation: apply a reflector's actions to the known facts, as a plan (pure).

One step for every reflector, heuristic and LLM alike. Each new statement is classified
(`hivemem.domain.change.intent_of`) and placed on its subject slot
(`hivemem.domain.slots`); then:

- a question, a hypothetical or a rejected proposal creates and changes nothing; it is
  linked to the fact that answers it (`considered_in`), so recall shows that fact instead;
- a retraction ("scrap that", "X is dropped", "no longer required") archives the fact it
  withdraws, without a successor;
- a newer statement of a slot with another value supersedes the slot's current fact
  (`superseded_by`, `valid_to`, reason), with update language, or without it when the same
  speaker says it; two speakers stating different values without update language is a
  conflict (both `conflicted`, both visible); a personal slot (a preference, a home) is
  changed only by its owner;
- an addition ("we also use X") never supersedes;
- a paraphrase of an active fact merges into it (provenance and confidence grow);
- update: the target is superseded (an explicit target wins over the slot);
- remove: the target is archived (never deleted); keep: nothing changes.
A revert (A, then B, then A again) is a new version superseding B; history stays intact
("back to A" names A, whose chain leads to B). A statement that only repeats a known value
("Done, the hook runs autopep8") is a mention of that fact (`mentioned_in`): history with it.
Targets may name a fact added earlier in the same batch as ``new:<index of its action>``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from hivemem.domain.authority import Author, author_of, episode_author
from hivemem.domain.change import UPDATE_LANGUAGE, Intent, has_update_language, intent_of
from hivemem.domain.fact import Fact, FactAction, FactKind, FactStatus, fact_id_for
from hivemem.domain.models import Turn
from hivemem.domain.scope import PRIVATE
from hivemem.domain.slots import canonical_slot, is_personal
from hivemem.domain.values import (
    contradicts,
    contrast,
    differs,
    holds,
    named_values,
    normalise,
    overlap,
    restates,
    shape_of,
    values_of,
)

__all__ = [
    "UPDATE_LANGUAGE",
    "History",
    "Plan",
    "Planner",
    "contradicts",
    "differs",
    "has_update_language",
    "named_values",
    "normalise",
    "plan_actions",
    "restates",
    "values_of",
]

_CONTENT_WORD = re.compile(r"[a-z][a-z0-9+#-]{2,}")
_BARE_INSTEAD = re.compile(r"\binstead\b(?! of)", re.IGNORECASE)
_FILLER = frozenset(re.findall(r"\w+", (
    "the and that this those these with from for our your their them they have has had was "
    "were are will would should could can not now also just then than what when which who "
    "scrap scratch forget never mind doing going dropped lifted again fine longer required "
    "needed anymore any more we're let's it's that's")))


def _content_words(text: str) -> set[str]:
    return {canonical_slot(w) for w in _CONTENT_WORD.findall(text.lower())} - _FILLER


@dataclass
class Plan:
    """What one reflection changes: facts to write (new and changed) and what happened."""

    writes: dict[str, Fact] = field(default_factory=dict)
    added: list[str] = field(default_factory=list)
    superseded: list[str] = field(default_factory=list)
    archived: list[str] = field(default_factory=list)
    conflicted: list[str] = field(default_factory=list)
    merged: list[tuple[str, str]] = field(default_factory=list)  # (new action index, into id)
    kept: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)  # actions that could not apply, and why
    retracted: list[str] = field(default_factory=list)  # archived by a retraction (no successor)


# similarity(new content, existing fact) -> cosine in [-1, 1]
Similarity = Callable[[str, Fact], float]
# slot_similarity(subject a, subject b) -> cosine of the subject phrases' embeddings
SlotSimilarity = Callable[[str, str], float]


@dataclass(frozen=True)
class PlanContext:
    """Where a batch of actions applies, and how its facts are compared: the episode and its
    clock, the similarity functions and the thresholds. `turns`: the episode's, to decide
    whose each new fact is and what its statement may change (`hivemem.domain.authority`);
    without them every statement is its speaker's, shared."""

    session_id: str
    episode_id: str
    namespace: str
    now: datetime
    valid_from: datetime
    similarity: Similarity
    dedup_threshold: float = 0.9
    min_confidence: float = 0.0
    slot_similarity: SlotSimilarity | None = None
    turns: Sequence[Turn] = ()
SLOT_MATCH = 0.85  # subject phrases this similar name one slot ("the database", "our DB")
RETRACT_MATCH = 0.5  # a retraction without a slot withdraws the fact it resembles this much
# A slotless statement this similar to a fact, with another value, is its new version.
RESTATE_MATCH = 0.8
ASKED_MATCH = 0.35  # a question or proposal this much about a fact is answered by it


# The session's retired history (superseded facts), read only if a statement needs it.
History = Callable[[], Sequence[Fact]]


class Planner:
    """Applies actions one by one to the known facts; `plan` is what they changed.

    `history`: more known facts, superseded ones, that only a revert ("back to Jenkins")
    and the LLM's additions (`hivemem.domain.augment`) look at, so it is read at the first
    statement that needs it, not for every episode: a session's history grows with it. The
    known facts are `prior` then `history`, in that order (a fact is in one of them)."""

    def __init__(self, prior: Sequence[Fact], context: PlanContext,
                 history: History | None = None) -> None:
        self.plan = Plan()
        self.context = context
        # The episode's turns decide whose each new fact is (`hivemem.domain.authority`).
        self.turns = list(context.turns)
        # Who makes the statement being applied: only facts it may change are candidates
        # (or, while `seeing`, the facts it may see).
        self.author = Author()
        self.seeing = False
        self.facts: dict[str, Fact] = {f.fact_id: f for f in prior}
        self._history = history
        self._retired: dict[str, Fact] | None = None if history is not None else {}
        self.new_ids: dict[int, str] = {}
        self.similarity = context.similarity
        self.slot_similarity = context.slot_similarity
        self.dedup_threshold = context.dedup_threshold
        self.valid_from = context.valid_from
        self.order: dict[str, int] = {}  # fact id -> when this batch wrote it
        # `active()` as last computed, under (author, seeing, writes so far): a statement
        # asks for it several times, and a session's keeper holds ~200 facts.
        self._writes = 0
        self._active: tuple[tuple[Author, bool, int], list[Fact]] | None = None

    def current(self, fact_id: str | None) -> Fact | None:
        if fact_id is None:
            return None
        fact = self.plan.writes.get(fact_id) or self.facts.get(fact_id)
        if fact is None or fact.status not in (FactStatus.ACTIVE, FactStatus.CONFLICTED):
            return None
        allowed = self.author.may_see if self.seeing else self.author.may_change
        return fact if allowed(fact) else None

    def known(self) -> dict[str, Fact]:
        """Every known fact (`prior`, then the history) as this plan leaves it."""
        if self._retired is None:
            assert self._history is not None
            self._retired = {f.fact_id: f for f in self._history()}
        return {**self.facts, **self._retired, **self.plan.writes}

    def active(self) -> list[Fact]:
        key = (self.author, self.seeing, self._writes)
        if self._active is None or self._active[0] != key:
            pool = {**self.facts, **self.plan.writes}
            self._active = (key, [f for f in pool.values()
                                  if self.current(f.fact_id) is not None])
        return list(self._active[1])

    def write(self, fact: Fact) -> None:
        self._writes += 1
        self.plan.writes[fact.fact_id] = fact
        self.order[fact.fact_id] = len(self.order)

    def resolve(self, target: str | None) -> str | None:
        if target is not None and target.startswith("new:") and target[4:].isdigit():
            return self.new_ids.get(int(target[4:]))
        return target

    def same_slot(self, a: str, b: str) -> bool:
        ca, cb = canonical_slot(a), canonical_slot(b)
        if not ca or not cb:
            return False
        if ca == cb:
            return True
        # "standup" and "daily standup", "timeout" and "request timeout": one names the
        # other more precisely.
        wa, wb = set(ca.split()), set(cb.split())
        if wa <= wb or wb <= wa:
            return True
        return (self.slot_similarity is not None
                and self.slot_similarity(ca, cb) >= SLOT_MATCH)

    def on_slot(self, new: Fact, excluding: str | None) -> list[Fact]:
        """Active facts on `new`'s slot. A personal slot (a preference, a person's own
        attribute) is its owner's: another speaker's statement is on another slot."""
        if not new.subject:
            return []
        out = []
        for fact in self.active():
            if fact.fact_id == excluding or not self.same_slot(fact.subject, new.subject):
                continue
            if self.owned_by_other(fact, new):
                continue
            out.append(fact)
        return out

    @staticmethod
    def owned_by_other(fact: Fact, new: Fact) -> bool:
        """`fact` is someone's own (a preference, their home) and `new` is someone else's."""
        personal = fact.kind == FactKind.PREFERENCE or is_personal(fact.subject, fact.agent_id)
        return bool(personal and fact.agent_id and new.agent_id
                    and fact.agent_id != new.agent_id)

    def twin_of(self, new: Fact, same_subject: list[Fact]) -> Fact | None:
        """An active fact `new` paraphrases (same subject, or any when it has none)."""
        pool = same_subject if new.subject else self.active()
        for fact in pool:
            if fact is None or differs(fact.content, new.content):
                continue  # "limit is 100/min" and "limit is 600/min" are two versions
            if (normalise(fact.content) == normalise(new.content)
                    or self.similarity(new.content, fact) >= self.dedup_threshold):
                return fact
        return None

    def supersede(self, old: Fact, new: Fact) -> Fact:
        # The reason names the successor, never its content: whoever may see the old fact
        # may not see the new one.
        self.write(old.model_copy(update={
            "status": FactStatus.SUPERSEDED, "superseded_by": new.fact_id,
            "valid_to": self.valid_from, "reason": f"superseded_by:{new.fact_id}"}))
        self.plan.superseded.append(old.fact_id)
        return new.model_copy(update={
            "supersedes": old.fact_id, "version": max(new.version, old.version + 1),
            "subject": new.subject or old.subject})

    def conflict(self, new: Fact, rivals: list[Fact]) -> Fact:
        for rival in rivals:
            self.write(rival.model_copy(update={
                "status": FactStatus.CONFLICTED,
                "conflicts_with": sorted(set(rival.conflicts_with) | {new.fact_id})}))
            self.plan.conflicted.append(rival.fact_id)
        self.plan.conflicted.append(new.fact_id)
        return new.model_copy(update={
            "status": FactStatus.CONFLICTED, "conflicts_with": sorted(r.fact_id for r in rivals)})

    def archive(self, old: Fact, reason: str, by_turns: Sequence[str] = ()) -> None:
        self.write(old.model_copy(update={
            "status": FactStatus.ARCHIVED, "valid_to": self.valid_from, "reason": reason,
            "retracted_by": sorted(set(old.retracted_by) | set(by_turns))}))
        self.plan.archived.append(old.fact_id)

    def hidden_on_slot(self, new: Fact) -> list[Fact]:
        """Active facts on `new`'s slot its author may see but not change (the shared ones,
        for a private statement)."""
        self.seeing = True
        try:
            pool = self.on_slot(new, None)
        finally:
            self.seeing = False
        return [f for f in pool if not self.author.may_change(f)]

    def private_successor(self, new: Fact, intent: Intent) -> Fact:
        """A private change of a slot whose current fact is shared: the new fact succeeds it
        for its owner only (`supersedes` names it; the shared fact stays current)."""
        replaced = [f for f in self.hidden_on_slot(new)
                    if intent == Intent.UPDATE or (differs(f.content, new.content)
                                                   and f.agent_id == new.agent_id)]
        if not replaced:
            return new
        old = max(replaced, key=self.recency)
        return new.model_copy(update={"supersedes": old.fact_id, "version": old.version + 1})

    def remove(self, index: int, action: FactAction) -> None:
        old = self.current(self.resolve(action.target))
        if old is None:
            self.plan.dropped.append(f"{index}: remove of unknown or inactive {action.target}")
            return
        self.archive(old, "removed")

    def recency(self, fact: Fact) -> tuple[int, datetime, int]:
        written = self.order.get(fact.fact_id)
        return (0 if written is None else 1, fact.valid_from, written or 0)

    def mentioned_in(self, text: str) -> list[Fact]:
        """Active facts whose values (names, numbers) `text` mentions."""
        said = values_of(text)
        return [f for f in self.active() if said and overlap(values_of(f.content), said)]

    def withdrawn_by(self, new: Fact) -> Fact | None:
        """The fact a retraction withdraws: its slot's, the one whose value it names, the
        one whose words it repeats, the most similar; a bare "scrap that" the latest."""
        active = self.active()
        if not active:
            return None
        latest = sorted(active, key=self.recency, reverse=True)
        for pool in (self.on_slot(new, None), self.mentioned_in(new.content)):
            if pool:
                return max(pool, key=self.recency)
        words = _content_words(new.content)
        if words:
            scored = [(len(words & _content_words(f.content)), f) for f in latest]
            best_overlap, best = max(scored, key=lambda p: p[0])
            if best_overlap:
                return best
            similar = max(latest, key=lambda f: self.similarity(new.content, f))
            if self.similarity(new.content, similar) >= RETRACT_MATCH:
                return similar
            return None
        return latest[0]

    def replaced_by_value(self, new: Fact) -> Fact | None:
        """For a change on no known slot: the fact whose value it replaces ("move from
        Jenkins to ..."), else the one it resembles most (same kind)."""
        named = [f for f in self.mentioned_in(new.content) if f.kind == new.kind]
        if named:
            return max(named, key=self.recency)
        # A revert names an old value ("back to Jenkins"): what replaced that value since.
        said = values_of(new.content)
        everything = self.known()
        for old in sorted(everything.values(), key=self.recency, reverse=True):
            if old.status != FactStatus.SUPERSEDED or not overlap(values_of(old.content), said):
                continue
            head = self.head_of(old, everything)
            if (head is not None and differs(head.content, new.content)
                    and not self.owned_by_other(head, new)):
                return head
        # The kind of a plain statement says little ("CI runs on Jenkins" is a fact, the
        # switch a decision): any fact setting another value of what the change is about.
        pool = [f for f in self.active() if not self.owned_by_other(f, new)
                and (not values_of(f.content) or differs(f.content, new.content))]
        if not pool:
            return None
        best = max(pool, key=lambda f: (self.about(new.content, f), self.recency(f)))
        if self.about(new.content, best) >= RETRACT_MATCH:
            return best
        # "MySQL instead", "let's use RQ instead": a bare "instead" names the new choice and
        # leaves the old one implied: the fact naming another choice it is most about.
        said = named_values(new.content)
        if said and _BARE_INSTEAD.search(new.content):
            named = [f for f in pool if named_values(f.content)
                     and not overlap(named_values(f.content), said)]
            if named:
                return max(named, key=lambda f: (self.about(new.content, f), self.recency(f)))
        return None

    def replaced(self, new: Fact, intent: Intent) -> tuple[Fact | None, Intent]:
        """What a statement naming no target replaces (None: its slot decides), and its
        intent (a statement saying a value is gone is a change)."""
        if intent in (Intent.UPDATE, Intent.STATE):
            # "1000 rows per page, not 200", "teal instead of amber": the fact that holds
            # the value a statement says is gone is what it replaces, whatever the slots.
            old = self.named_as_old(new)
            if old is not None:
                return old, Intent.UPDATE
        if intent == Intent.UPDATE and not self.on_slot(new, None):
            # A change on no known slot replaces the value it names or resembles.
            return self.replaced_by_value(new), intent
        return None, intent

    def named_as_old(self, new: Fact) -> Fact | None:
        """The newest current fact holding a value `new` says is gone ("not 200", "no more
        teal", "from Jenkins to ..."); a bare number must come with a word or the slot of
        that fact too ("200" alone is too common to name one)."""
        fresh, gone = contrast(new.content)
        if not gone:
            return None
        fresh = (values_of(new.content) - gone) or fresh
        words = _content_words(new.content)
        found = []
        for fact in self.active():
            if self.owned_by_other(fact, new):
                continue
            held = [v for v in gone if holds(fact.content, v)]
            if not held or any(holds(fact.content, v) for v in fresh):
                continue
            if all(v[:1].isdigit() or v[:1] == "$" for v in held) and not (
                    words & _content_words(fact.content) - {"not", "instead"}
                    or self.same_slot(fact.subject, new.subject)):
                continue
            found.append(fact)
        return max(found, key=self.recency) if found else None

    def head_of(self, fact: Fact, everything: dict[str, Fact]) -> Fact | None:
        """The current version at the end of `fact`'s chain."""
        seen: set[str] = set()
        while fact.status == FactStatus.SUPERSEDED and fact.superseded_by not in seen:
            seen.add(fact.fact_id)
            nxt = everything.get(fact.superseded_by or "")
            if nxt is None:
                return None
            fact = nxt
        return self.current(fact.fact_id)

    def restated_slot(self, new: Fact) -> list[Fact]:
        """For a plain statement on no known slot: the facts it restates with another value
        ("Product pages are cached for 1 hour", later "... for 15 minutes")."""
        if not values_of(new.content):
            return []
        return [f for f in self.active()
                if differs(f.content, new.content) and not self.owned_by_other(f, new)
                and self.similarity(new.content, f) >= RESTATE_MATCH]

    def answered(self, asked: Fact) -> None:
        """Link a question or a proposal that changed nothing to the fact that answers it
        (its slot's, else the one it resembles most), so recall shows that fact instead."""
        if not asked.source_turn_ids:
            return
        said = values_of(asked.content)
        pool = self.on_slot(asked, None) or [
            f for f in self.active() if self.about(asked.content, f) >= ASKED_MATCH] or [
            # "...and rejected the Unleash proposal": the fact an earlier question or
            # proposal naming the same value was about.
            f for f in self.active() if set(f.considered_values) & said]
        if not pool:
            return
        fact = max(pool, key=lambda f: (self.about(asked.content, f), self.recency(f)))
        if set(asked.source_turn_ids) & set(fact.source_turn_ids):
            return
        self.write(fact.model_copy(update={
            "considered_in": sorted(set(fact.considered_in) | set(asked.source_turn_ids)),
            "considered_values": sorted(
                set(fact.considered_values) | (said - values_of(fact.content)))}))

    def about(self, text: str, fact: Fact) -> float:
        """How much `text` is about what `fact` says: similarity, plus the words they share
        ("flags", "review") and values of one shape ("3.13" beside "3.11")."""
        shared = len(_content_words(text) & _content_words(fact.content))
        shapes = ({shape_of(v) for v in values_of(text)}
                  & {shape_of(v) for v in values_of(fact.content)})
        return self.similarity(text, fact) + 0.2 * shared + 0.3 * bool(shapes - {""})

    def merge(self, index: int, new: Fact, twin: Fact) -> None:
        """Store-level dedup: a paraphrase merges into the fact it repeats."""
        self.write(twin.model_copy(update={
            "source_turn_ids": sorted(set(twin.source_turn_ids) | set(new.source_turn_ids)),
            "confidence": max(twin.confidence, new.confidence)}))
        self.plan.merged.append((str(index), twin.fact_id))
        self.new_ids[index] = twin.fact_id

    def apply(self, index: int, action: FactAction) -> None:
        """One action: `index` is its place in the batch (its new fact's id and ``new:``
        name)."""
        plan = self.plan
        ctx = self.context
        min_confidence = ctx.min_confidence
        if action.op == "keep":
            target = self.resolve(action.target)
            if self.current(target):
                plan.kept.append(str(target))
        elif action.op == "remove":
            self.author = episode_author(self.turns) if self.turns else Author()
            self.remove(index, action)
        elif not action.content or not action.content.strip():
            plan.dropped.append(f"{index}: {action.op} without content")
        elif action.confidence < min_confidence:
            plan.dropped.append(f"{index}: confidence {action.confidence} below {min_confidence}")
        else:
            self.author = author_of(action.content, action.source_turn_ids, self.turns,
                                    action.agent_id)
            private = self.author.visibility == PRIVATE
            new = Fact(
                fact_id=fact_id_for(ctx.episode_id, index),
                namespace=ctx.namespace,
                session_id=ctx.session_id,
                agent_id=self.author.agent_id if private else action.agent_id,
                visibility=self.author.visibility,
                content=action.content.strip(),
                kind=action.kind,
                subject=canonical_slot(action.subject),
                confidence=action.confidence,
                source_turn_ids=list(action.source_turn_ids),
                episode_id=ctx.episode_id,
                created_at=ctx.now,
                valid_from=self.valid_from,
                # A model's free-text reason stays in the trace: it may quote anything.
            )
            self.add_or_update(index, action, new)

    def add_or_update(self, index: int, action: FactAction, new: Fact) -> None:
        intent = intent_of(new.content)
        if intent == Intent.NON_ASSERTION:
            self.plan.dropped.append(f"{index}: a question, hypothetical or rejected proposal")
            self.answered(new)
            return
        old = self.current(self.resolve(action.target)) if action.op == "update" else None
        if action.op == "update" and old is None:
            self.plan.dropped.append(f"{index}: update of unknown or inactive {action.target}")
        if intent == Intent.RETRACT:
            gone = old or self.withdrawn_by(new)
            if gone is not None and not (values_of(new.content) - values_of(gone.content)
                                         and differs(new.content, gone.content)):
                self.archive(gone, "retracted_by:" + ",".join(sorted(new.source_turn_ids)),
                             new.source_turn_ids)
                self.plan.retracted.append(gone.fact_id)
                return
            if gone is None:
                self.plan.dropped.append(f"{index}: retraction of nothing known")
                return
            intent = Intent.UPDATE  # "no longer X, we use Y": a change, not a withdrawal
        if old is None:
            old, intent = self.replaced(new, intent)
        if old is not None and old.subject:
            new = new.model_copy(update={"subject": old.subject})
        same_subject = self.on_slot(new, old.fact_id if old else None)
        if not same_subject and old is None and intent == Intent.STATE:
            same_subject = self.restated_slot(new)
            # "Done, the hook runs autopep8": a statement that only repeats the values of a
            # known fact is a mention of it (history with it when it changes).
            repeated = [f for f in self.active() if restates(new.content, f)]
            if not same_subject and repeated:
                fact = max(repeated, key=self.recency)
                self.write(fact.model_copy(update={"mentioned_in": sorted(
                    set(fact.mentioned_in) | set(new.source_turn_ids))}))
                self.plan.merged.append((str(index), fact.fact_id))
                self.new_ids[index] = fact.fact_id
                return
        twin = None if old is not None else self.twin_of(new, same_subject)
        if twin is not None:
            self.merge(index, new, twin)
            return
        # A change replaces its slot's value whatever the kinds ("CI runs on Jenkins" is a
        # plain fact, the switch a decision); a plain statement replaces its own kind, or
        # a plain fact.
        rivals = [f for f in same_subject
                  if f.kind == new.kind or action.op == "update" or intent == Intent.UPDATE
                  or FactKind.FACT in (f.kind, new.kind)]
        if action.op != "update" and intent == Intent.UPDATE:
            # "Switching the database to MySQL then" after "switch to MySQL": the same value
            # restated with change words is a restatement, not one more version.
            same = [f for f in ([old] if old else []) + rivals if restates(new.content, f)]
            if same:
                self.merge(index, new, same[0])
                return
        if old is not None:
            new = self.supersede(old, new)
        if intent == Intent.ADDITION:
            rivals = []  # "we also use X": one more value beside the known ones
        elif intent == Intent.STATE:
            # Without update words only a different value replaces (or clashes).
            rivals = [f for f in rivals if differs(f.content, new.content)]
        # Only the same known speaker restating a slot replaces it without change words;
        # anyone else (or nobody known) stating another value makes a visible conflict.
        speakers_differ = [f for f in rivals
                           if not (f.agent_id and new.agent_id and f.agent_id == new.agent_id)]
        if rivals and intent == Intent.STATE and speakers_differ:
            new = self.conflict(new, speakers_differ)
            rivals = [f for f in rivals if f not in speakers_differ]
        for rival in sorted(rivals, key=lambda f: f.valid_from):
            # A change replaces what was said on the slot, named as target or not.
            new = self.supersede(rival, new)
        self.save_new(index, new, intent)

    def save_new(self, index: int, new: Fact, intent: Intent) -> None:
        if self.author.visibility == PRIVATE and new.supersedes is None:
            new = self.private_successor(new, intent)
        self.write(new)
        self.plan.added.append(new.fact_id)
        self.new_ids[index] = new.fact_id


def plan_actions(
    prior: Sequence[Fact], actions: Sequence[FactAction], context: PlanContext,
    history: History | None = None,
) -> Plan:
    """What `actions`, in their order, change among the `prior` facts (and the `history`,
    read when needed: `Planner`)."""
    planner = Planner(prior, context, history)
    for index, action in enumerate(actions):
        planner.apply(index, action)
    return planner.plan
