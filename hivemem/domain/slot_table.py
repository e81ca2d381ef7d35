"""The slot table: per session, what is current on each slot and what it replaced (pure).

Kept by the pipeline as turns arrive (`hivemem.workers.currency`), read by recall, so a
change is current the moment it is embedded, whether or not its episode has closed.

Two parts, both in Redis (`hivemem.store.currency`):

- `SlotState`: what the keeper needs for the next turn: the last seq applied (a replay at
  or below it changes nothing), the previous turn (an acknowledgement names the slot of the
  statement before it) and the session's current statements as provisional facts (their
  slots, values, speakers and turns: what the change rules compare a new statement with).
- `Replacement`s, one per statement that is history now (keyed by its turn id): the turns
  that replaced it, the rule that fired, the slot, and who may see the replacement (recall
  only treats a turn as history for an asker who may see what replaced it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from hivemem.domain.fact import VISIBLE, Fact
from hivemem.domain.lineage import Lineage
from hivemem.domain.models import Turn
from hivemem.domain.scope import Scope

Rule = Literal["superseded", "retracted", "answered"]

# Current statements the keeper compares a new one with, at most (the newest kept).
MAX_CURRENT = 200
# Replaced statements it keeps (a revert, "back to Black", names a value of one of them).
MAX_HISTORY = 100


class Replacement(BaseModel):
    """What made one statement history."""

    model_config = ConfigDict(frozen=True)

    by: tuple[str, ...]  # the turn ids that replaced it (none: withdrawn by nothing named)
    rule: Rule
    slot: str = ""
    seq: int = 0  # the seq of the turn whose arrival made it history
    # Who may see the replacement (the successor's scope).
    namespace: str = "default"
    visibility: Literal["private", "shared"] = "shared"
    agent_id: str | None = None
    # Which of its values went, each -> the words of the clause it was said in (and of the
    # values that replaced it), and the values it still carries, each -> its clause's words
    # (`hivemem.domain.lineage.parts`). With values kept, the statement is history only for
    # a question about a gone one. Both empty: history as a whole (an entry written before
    # them, a rule that names no value).
    gone: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    kept: dict[str, tuple[str, ...]] = Field(default_factory=dict)

    @property
    def partial(self) -> bool:
        """Some of its values went and some are still current."""
        return bool(self.gone) and bool(self.kept)

    def visible_to(self, access: Scope | None) -> bool:
        return access is None or access.admits(self.namespace, self.visibility, self.agent_id)


class SlotState(BaseModel):
    """The keeper's working state for one session (its statements as provisional facts:
    what consolidation compares a new statement with)."""

    applied: int = 0  # the last seq applied (turns, controls and skips alike)
    prev: Turn | None = None
    current: list[Fact] = Field(default_factory=list)  # active or conflicted, oldest first
    history: list[Fact] = Field(default_factory=list)  # superseded or withdrawn, oldest first
    # The embedding of each current statement's turn (the embedded stream's encoding):
    # where two statements share no words, their turns' similarity decides.
    vectors: dict[str, str] = Field(default_factory=dict)
    speakers: list[str] = Field(default_factory=list)  # lower-cased agent ids, first seen first
    # The values the session moved on from, read off the values (`hivemem.domain.lineage`).
    lineage: Lineage = Field(default_factory=Lineage)

    def keep(self, facts: Iterable[Fact], vectors: Mapping[str, str]) -> SlotState:
        """This state with `facts`' visible ones (the newest `MAX_CURRENT`) as current, and
        the vectors of their turns (from `vectors` or kept)."""
        facts = list(facts)
        current = [f for f in facts if f.status in VISIBLE][-MAX_CURRENT:]
        history = [f for f in facts if f.status not in VISIBLE][-MAX_HISTORY:]
        known = {**self.vectors, **vectors}
        turns = {t for f in current for t in f.source_turn_ids}
        return self.model_copy(update={
            "current": current, "history": history,
            "vectors": {t: v for t, v in known.items() if t in turns}})


@dataclass(frozen=True, slots=True)
class SlotView:
    """What recall reads: the session's replaced statements and whose own slots turns
    state, as of seq `applied`."""

    applied: int = 0
    replaced: Mapping[str, Replacement] = field(default_factory=dict)  # turn id -> entry
    personal: Mapping[str, str] = field(default_factory=dict)  # turn id -> owner (lowercase)
    # Value key -> (the turn that moved on from it, its successors' keys): the lineage's
    # values moved on from, as shared turns said it (`hivemem.domain.lineage.GoneValues.stale`).
    gone: Mapping[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)

    def chain(self, turn_id: str) -> tuple[str, ...]:
        """Every turn on the way from `turn_id` to what is current now (A was replaced by B,
        B by C: A's chain is B and C)."""
        out: list[str] = []
        seen = {turn_id}
        todo = [turn_id]
        while todo:
            entry = self.replaced.get(todo.pop())
            if entry is None:
                continue
            for nxt in entry.by:
                if nxt not in seen:
                    seen.add(nxt)
                    out.append(nxt)
                    todo.append(nxt)
        return tuple(out)
