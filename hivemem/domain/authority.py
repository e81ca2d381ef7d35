"""Authority: whose a new fact is, and which known facts its statement may change (pure).

A fact is as private as the turns it came from (`hivemem.domain.provenance`): the turns that
state it, whatever a model claims. A statement then changes (supersedes, retracts, conflicts,
annotates) only facts in a scope its author may write to: a shared statement the shared
facts and its speaker's own private ones; a private statement of agent X only X's private
facts. Everyone else's current fact stays current for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hivemem.domain.fact import Fact
from hivemem.domain.models import Turn
from hivemem.domain.provenance import contributors, sources_of, stating
from hivemem.domain.scope import PRIVATE, SHARED, Visibility, owner_of

__all__ = ["Author", "author_of", "episode_author"]


@dataclass(frozen=True, slots=True)
class Author:
    """Who makes a statement: its visibility, and the agent (the owner of a private
    statement, the speaker of a shared one; None when unknown or several)."""

    visibility: Visibility = SHARED
    agent_id: str | None = None

    def may_change(self, fact: Fact) -> bool:
        if (fact.visibility or SHARED) == SHARED:
            return self.visibility == SHARED
        return fact.agent_id is not None and fact.agent_id == self.agent_id

    def may_see(self, fact: Fact) -> bool:
        if (fact.visibility or SHARED) == SHARED:
            return True
        return fact.agent_id is not None and fact.agent_id == self.agent_id


def _owner(turns: Sequence[Turn], speaker: str | None) -> Author:
    owner = owner_of({"visibility": t.visibility, "agent_id": t.agent_id} for t in turns)
    if owner.visibility == PRIVATE:
        return Author(PRIVATE, owner.agent_id)
    return Author(SHARED, speaker)


def author_of(content: str, claimed: Sequence[str], turns: Sequence[Turn],
              speaker: str | None) -> Author:
    """The most private of the turns `content` came from, of every turn that states it and
    of every turn that gave it a word those lack; the whole episode's when no turn supports
    it. Without turns (a caller that has none),
    the speaker's shared statement."""
    if not turns:
        return Author(SHARED, speaker)
    found = {t.turn_id for t in [*sources_of(content, claimed, turns),
                                 *stating(content, turns)]}
    sources = [t for t in turns if t.turn_id in found]
    if not sources:
        return _owner(turns, speaker)
    return _owner([*sources, *contributors(content, sources, turns)], speaker)


def episode_author(turns: Sequence[Turn]) -> Author:
    """Who speaks for the episode as a whole (an action that names no content: a remove)."""
    return _owner(turns, None)
