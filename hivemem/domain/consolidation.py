"""Consolidation: apply a reflector's actions to the known facts, as a plan (pure).

- add: a new fact, unless it paraphrases an active fact on the same subject (then it merges
  into that fact: provenance and confidence grow, no copy is stored). A new fact that
  contradicts an active one on the same subject without update language marks both
  `conflicted`; recall shows both, flagged.
- update: a new version supersedes the target (`superseded_by`, `valid_to`, reason).
- remove: the target is archived (never deleted).
- keep: nothing changes.
Targets may name a fact added earlier in the same batch as ``new:<index of its action>``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from hivemem.domain.fact import Fact, FactAction, FactStatus, fact_id_for

# Words that say a statement replaces an earlier one.
UPDATE_LANGUAGE = re.compile(
    r"\b(switch(?:ed|ing)? (?:to|over)|chang(?:e|ed|ing) (?:it )?to|no longer|actually|instead"
    r"|from now on|moving to|move to|migrat(?:e|ed|ing) to|replac(?:e|ed|ing)|now (?:use|we|it|"
    r"the|is|are)|going forward|rather than|not .{1,30} anymore|updated?)\b",
    re.IGNORECASE,
)


def has_update_language(text: str) -> bool:
    return bool(UPDATE_LANGUAGE.search(text))


_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b([A-Z][A-Za-z0-9.+#-]*[A-Za-z0-9+#]|[A-Z]{2,})\b")


def named_values(text: str) -> set[str]:
    """Proper names and acronyms in a statement (PostgreSQL, MySQL, GraphQL, AWS...)."""
    # Short all-caps words are mostly generic (API, GET, VM): they name no choice.
    return {
        m.group(1).lower()
        for m in _NAME.finditer(text.strip())
        if not (m.group(1).isupper() and len(m.group(1)) <= 4)
    }


def contradicts(a: str, b: str) -> bool:
    """Two statements on one subject contradict when each names something and none of the
    names match (allowing a prefix: "Postgres" and "PostgreSQL" are one value)."""
    va, vb = named_values(a), named_values(b)
    if not va or not vb:
        return False
    return not any(x.startswith(y) or y.startswith(x) for x in va for y in vb)


def normalise(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


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


# similarity(new content, existing fact) -> cosine in [-1, 1]
Similarity = Callable[[str, Fact], float]


class _Planner:
    def __init__(self, prior: Sequence[Fact], similarity: Similarity, dedup_threshold: float,
                 valid_from: datetime) -> None:
        self.plan = Plan()
        self.facts: dict[str, Fact] = {f.fact_id: f for f in prior}
        self.new_ids: dict[int, str] = {}
        self.similarity = similarity
        self.dedup_threshold = dedup_threshold
        self.valid_from = valid_from

    def current(self, fact_id: str | None) -> Fact | None:
        if fact_id is None:
            return None
        fact = self.plan.writes.get(fact_id) or self.facts.get(fact_id)
        if fact is None or fact.status not in (FactStatus.ACTIVE, FactStatus.CONFLICTED):
            return None
        return fact

    def write(self, fact: Fact) -> None:
        self.plan.writes[fact.fact_id] = fact

    def resolve(self, target: str | None) -> str | None:
        if target is not None and target.startswith("new:") and target[4:].isdigit():
            return self.new_ids.get(int(target[4:]))
        return target

    def active_on(self, subject: str, excluding: str | None) -> list[Fact]:
        if not subject:
            return []
        pool = {**self.facts, **self.plan.writes}
        return [
            f for f in pool.values()
            if f.subject == subject and f.fact_id != excluding and self.current(f.fact_id)
        ]

    def twin_of(self, new: Fact, same_subject: list[Fact]) -> Fact | None:
        """An active fact `new` paraphrases (same subject, or any when it has none)."""
        pool = same_subject if new.subject else [self.current(i) for i in self.facts]
        for fact in pool:
            if fact is not None and (
                normalise(fact.content) == normalise(new.content)
                or self.similarity(new.content, fact) >= self.dedup_threshold
            ):
                return fact
        return None

    def supersede(self, old: Fact, new: Fact, reason: str) -> Fact:
        self.write(old.model_copy(update={
            "status": FactStatus.SUPERSEDED, "superseded_by": new.fact_id,
            "valid_to": self.valid_from, "reason": reason}))
        self.plan.superseded.append(old.fact_id)
        return new.model_copy(update={"supersedes": old.fact_id, "version": old.version + 1})

    def conflict(self, new: Fact, rivals: list[Fact]) -> Fact:
        for rival in rivals:
            self.write(rival.model_copy(update={
                "status": FactStatus.CONFLICTED,
                "conflicts_with": sorted(set(rival.conflicts_with) | {new.fact_id})}))
            self.plan.conflicted.append(rival.fact_id)
        self.plan.conflicted.append(new.fact_id)
        return new.model_copy(update={
            "status": FactStatus.CONFLICTED, "conflicts_with": sorted(r.fact_id for r in rivals)})

    def remove(self, index: int, action: FactAction) -> None:
        old = self.current(self.resolve(action.target))
        if old is None:
            self.plan.dropped.append(f"{index}: remove of unknown or inactive {action.target}")
            return
        self.write(old.model_copy(update={
            "status": FactStatus.ARCHIVED, "valid_to": self.valid_from,
            "reason": action.reason or "no longer true"}))
        self.plan.archived.append(old.fact_id)

    def add_or_update(self, index: int, action: FactAction, new: Fact) -> None:
        old = self.current(self.resolve(action.target)) if action.op == "update" else None
        if action.op == "update" and old is None:
            self.plan.dropped.append(f"{index}: update of unknown or inactive {action.target}")
        same_subject = self.active_on(new.subject, old.fact_id if old else None)
        twin = None if old is not None else self.twin_of(new, same_subject)
        if twin is not None:
            # Store-level dedup: a paraphrase merges into the fact it repeats.
            self.write(twin.model_copy(update={
                "source_turn_ids": sorted(set(twin.source_turn_ids) | set(new.source_turn_ids)),
                "confidence": max(twin.confidence, new.confidence)}))
            self.plan.merged.append((str(index), twin.fact_id))
            self.new_ids[index] = twin.fact_id
            return
        rivals = [f for f in same_subject if f.kind == new.kind]
        updating = has_update_language(new.content)
        if old is not None:
            new = self.supersede(old, new, action.reason or "updated")
        if rivals and updating:
            # A change replaces what was said on the subject, named as target or not.
            for rival in sorted(rivals, key=lambda f: f.valid_from):
                new = self.supersede(rival, new, "updated: " + new.content[:120])
        elif old is None and (
            clashing := [f for f in rivals if contradicts(f.content, new.content)]
        ):
            new = self.conflict(new, clashing)
        self.write(new)
        self.plan.added.append(new.fact_id)
        self.new_ids[index] = new.fact_id


def plan_actions(
    prior: Sequence[Fact],
    actions: Sequence[FactAction],
    *,
    session_id: str,
    episode_id: str,
    namespace: str,
    now: datetime,
    valid_from: datetime,
    similarity: Similarity,
    dedup_threshold: float = 0.9,
    min_confidence: float = 0.0,
) -> Plan:
    planner = _Planner(prior, similarity, dedup_threshold, valid_from)
    plan = planner.plan
    for index, action in enumerate(actions):
        if action.op == "keep":
            target = planner.resolve(action.target)
            if planner.current(target):
                plan.kept.append(str(target))
        elif action.op == "remove":
            planner.remove(index, action)
        elif not action.content or not action.content.strip():
            plan.dropped.append(f"{index}: {action.op} without content")
        elif action.confidence < min_confidence:
            plan.dropped.append(f"{index}: confidence {action.confidence} below {min_confidence}")
        else:
            new = Fact(
                fact_id=fact_id_for(episode_id, index),
                namespace=namespace,
                session_id=session_id,
                agent_id=action.agent_id,
                content=action.content.strip(),
                kind=action.kind,
                subject=action.subject.strip().lower(),
                confidence=action.confidence,
                source_turn_ids=list(action.source_turn_ids),
                episode_id=episode_id,
                created_at=now,
                valid_from=valid_from,
                reason=action.reason,
            )
            planner.add_or_update(index, action, new)
    return plan
