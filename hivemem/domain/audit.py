"""Audit events: every change of a fact's status or layer, with who caused it, when and why.

Pure: the models and the events a reflection plan implies. The events are kept append-only in
a Redis stream per session (`hivemem.store.audit`); nothing is ever removed from it.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from hivemem.domain.compaction import CompactionPlan
from hivemem.domain.consolidation import Plan
from hivemem.domain.fact import Fact

AuditAction = Literal[
    "created",  # a new fact (reflection, or an import)
    "reinforced",  # a paraphrase merged into it: more provenance, no new copy
    "superseded",  # a newer version replaced it
    "conflicted",  # it contradicts another fact on the subject
    "archived",  # retracted, stale, or over the session's cap
    "merged",  # a near-duplicate of another fact, which absorbed it
    "moved",  # its memory layer changed (promoted or demoted)
    "imported",  # written by an import or a restore
]
Actor = Literal["reflection", "compaction", "import", "user"]
_EVENT_NAMESPACE = uuid.UUID("9d4c2b1e-6f3a-4e8d-b5c7-2a1f0e9d8c76")


def event_id_for(cause: str, fact_id: str, action: str) -> str:
    """Deterministic: a retried reflection (or compaction) names the same events, and the
    log reads each once (`hivemem.store.audit` keeps the first)."""
    return uuid.uuid5(_EVENT_NAMESPACE, f"{cause}/{fact_id}/{action}").hex


class AuditEvent(BaseModel):
    """One change to one fact. `seq` is its position in the session's audit stream."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    event_id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    seq: int = 0  # assigned when appended (1, 2, ... per session)
    at: datetime
    session_id: str
    # The session's namespace (with `session_id`, which session's log holds the event;
    # events written before it existed are ``default``'s, as their sessions were).
    namespace: str = "default"
    fact_id: str
    action: AuditAction
    actor: Actor
    cause: str = ""  # what ran: "episode <id>", "compaction <run id>", "import <file>"
    reason: str = ""
    from_status: str | None = None
    to_status: str | None = None
    from_layer: str | None = None
    to_layer: str | None = None
    related: list[str] = Field(default_factory=list)  # superseded_by, merged into, rivals

    def describe(self) -> str:
        change = ""
        if self.from_status != self.to_status and self.to_status:
            change = f" {self.from_status or 'new'} -> {self.to_status}"
        elif self.from_layer != self.to_layer and self.to_layer:
            change = f" layer {self.from_layer} -> {self.to_layer}"
        related = f" ({', '.join(self.related)})" if self.related else ""
        return f"{self.action}{change} by {self.actor}{related}: {self.reason}".rstrip(": ")


def reflection_events(
    plan: Plan, prior: Sequence[Fact], *, episode_id: str, at: datetime
) -> list[AuditEvent]:
    """What one reflection changed, as audit events (in the order it happened)."""
    before = {f.fact_id: f for f in prior}
    cause = f"episode {episode_id}"
    events: list[AuditEvent] = []

    def event(fact_id: str, action: AuditAction, reason: str, related: list[str]) -> None:
        after = plan.writes.get(fact_id)
        old = before.get(fact_id)
        if after is None:
            return
        events.append(AuditEvent(
            event_id=event_id_for(cause, fact_id, action),
            at=at, session_id=after.session_id, namespace=after.namespace,
            fact_id=fact_id, action=action,
            actor="reflection", cause=cause, reason=reason or "",
            from_status=old.status.value if old else None, to_status=after.status.value,
            from_layer=old.layer if old else None, to_layer=after.layer, related=related,
        ))

    added = set(plan.added)
    for fact_id in plan.added:
        new = plan.writes[fact_id]
        event(fact_id, "created", new.reason or "reflected from the episode",
              list(new.conflicts_with) + ([new.supersedes] if new.supersedes else []))
    for fact_id in plan.superseded:
        old = plan.writes.get(fact_id)
        event(fact_id, "superseded", (old.reason or "") if old else "",
              [old.superseded_by] if old and old.superseded_by else [])
    for fact_id in dict.fromkeys(plan.conflicted):
        if fact_id in added:
            continue
        rival = plan.writes.get(fact_id)
        event(fact_id, "conflicted", "contradicts a newer statement on the same subject",
              list(rival.conflicts_with) if rival else [])
    for fact_id in plan.archived:
        gone = plan.writes.get(fact_id)
        event(fact_id, "archived", (gone.reason or "") if gone else "", [])
    for _index, into in plan.merged:
        event(into, "reinforced", "restated in the episode: provenance merged", [])
    return events


def compaction_events(
    plan: CompactionPlan, before: Sequence[Fact], *, at: datetime, trigger: str = "on demand"
) -> list[AuditEvent]:
    """Every change a compaction plan makes, as audit events (merges, archives, moves, and
    the keepers that absorbed duplicates)."""
    old = {f.fact_id: f for f in before}
    diff = plan.diff
    cause = f"compaction {diff.run_id} ({trigger})"
    events: list[AuditEvent] = []

    def event(fact_id: str, action: AuditAction, reason: str, related: list[str]) -> None:
        after = plan.writes[fact_id]
        prior = old.get(fact_id)
        events.append(AuditEvent(
            event_id=event_id_for(cause, fact_id, action),
            at=at, session_id=after.session_id, namespace=after.namespace,
            fact_id=fact_id, action=action,
            actor="compaction", cause=cause, reason=reason,
            from_status=prior.status.value if prior else None, to_status=after.status.value,
            from_layer=prior.layer if prior else None, to_layer=after.layer, related=related,
        ))

    for entry in diff.merged:
        event(entry.fact_id, "merged", entry.reason, [entry.into] if entry.into else [])
    for entry in diff.kept:
        if entry.merged_from:
            event(entry.fact_id, "reinforced",
                  f"absorbed {len(entry.merged_from)} near-duplicate(s): provenance merged",
                  list(entry.merged_from))
    for entry in diff.archived:
        event(entry.fact_id, "archived", entry.reason, [])
    for entry in [*diff.promoted, *diff.demoted]:
        event(entry.fact_id, "moved", entry.reason, [])
    return events
