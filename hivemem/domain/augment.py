"""A second reflector's actions on top of the rules' (pure): an LLM may add, never undo.

The deterministic reflector's actions are planned first, exactly as they would be alone; an
LLM's actions are then tried one by one on top of that plan, through the same consolidation
step, and each is kept only when it adds something:

- it cites turns of the episode that state it (`hivemem.domain.provenance.sources_of`); an
  action without provenance loses (a copy of the prompt, an invented fact);
- it changes the status of no fact the rules left (a prior fact, or one the deterministic
  reflector wrote): it may not supersede, retract, archive or conflict them. An explicit
  ``update`` of such a fact becomes an add on its slot, which the change rules then judge;
- it does not restate a value the rules hold (a duplicate would outlive their next change of
  it) or retired (an old statement read again);
- it is not a word-for-word cut of one turn that says more: it adds no word the turn lacks,
  and in recall a fact stands for the turn it restates (`RecallPolicy.restates_threshold`),
  so the cut would hand over less than the turn ("Load test cancelled, not rescheduled."
  for "Load test cancelled, not rescheduled. I posted ... that Tuesday's test is off.").
Among themselves the LLM's new facts follow the change rules as usual (an LLM may find both
the old and the new value of a slot the rules missed). So a weak model (hallucinating,
dropping updates, answering nothing) leaves the rules' result as it is, and a good one adds
the facts they missed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hivemem.domain.consolidation import History, Plan, PlanContext, Planner
from hivemem.domain.fact import VISIBLE, Fact, FactAction, FactStatus
from hivemem.domain.models import Turn
from hivemem.domain.provenance import sources_of, words_of
from hivemem.domain.values import restates

__all__ = ["plan_with_additions"]

_RETIRED = (FactStatus.SUPERSEDED, FactStatus.ARCHIVED)


def _standing(fact: Fact) -> tuple[Any, ...]:
    """What an addition may not change about a fact the rules left."""
    return (fact.status, fact.superseded_by, tuple(fact.conflicts_with), fact.valid_to,
            tuple(fact.retracted_by))


def _renamed(target: str | None, offset: int) -> str | None:
    """``new:<k>`` in the LLM's list is ``new:<offset + k>`` in the combined batch."""
    if target is not None and target.startswith("new:") and target[4:].isdigit():
        return f"new:{offset + int(target[4:])}"
    return target


def plan_with_additions(
    prior: Sequence[Fact],
    actions: Sequence[FactAction],
    additions: Sequence[FactAction],
    context: PlanContext,
    history: History | None = None,
) -> Plan:
    """The plan of `actions` (the rules), plus what `additions` (an LLM's) add to it.
    `history`: the superseded facts, as `plan_actions` takes them (read once per planner
    that needs them: pass one that reads the store once).

    Fact ids of `actions` are those they would have alone (``fact_id_for(episode, i)``);
    addition ``j`` is number ``len(actions) + j`` of the batch.
    """
    def planned(llm: Sequence[tuple[int, FactAction]]) -> Planner:
        """The rules' actions in their order, each LLM action placed before the first rule
        action said after it: every statement acts in the order it was said."""
        planner = Planner(prior, context, history)
        batch = [(when(a), 0, i, a) for i, a in enumerate(actions)]
        placed = sorted(llm, key=lambda item: when(item[1]))
        merged: list[tuple[int, FactAction]] = []
        for position, _, index, action in batch:
            while placed and when(placed[0][1]) < position:
                merged.append(placed.pop(0))
            merged.append((index, action))
        merged.extend(placed)
        for index, action in merged:
            planner.apply(index, action)
        return planner

    turns = context.turns
    order = {t.turn_id: t.seq for t in turns}

    def when(action: FactAction) -> int:
        return max((order.get(t, 0) for t in action.source_turn_ids), default=0)

    alone = planned([])
    if not additions:
        return alone.plan  # (the history is read only for additions to judge)
    left = alone.known()
    standing = {fact_id: _standing(f) for fact_id, f in left.items()}
    offset = len(actions)
    kept: list[tuple[int, FactAction]] = []
    why: list[str] = []
    for j, proposed in sorted(enumerate(additions), key=lambda item: when(item[1])):
        admitted = _admitted(proposed, alone, left, turns, offset)
        if isinstance(admitted, str):
            if admitted:
                why.append(f"llm {j}: {admitted}")
            continue
        trial = planned([*kept, (offset + j, admitted)])
        changed = sorted(fact_id for fact_id, fact in trial.plan.writes.items()
                         if fact_id in standing and _standing(fact) != standing[fact_id])
        if changed:
            why.append(f"llm {j}: would change {changed[0]} against the rules")
            continue
        kept.append((offset + j, admitted))
    plan = planned(kept).plan if kept else alone.plan
    plan.dropped.extend(why)
    return plan


def _cut_of(content: str, turn_text: str) -> bool:
    """Is `content` a word-for-word part of `turn_text`, which says more than it?"""
    part, whole = words_of(content), words_of(turn_text)
    if not part or len(part) >= len(whole):
        return False
    n = len(part)
    return any(whole[i:i + n] == part for i in range(len(whole) - n + 1))


def _admitted(action: FactAction, rules: Planner, left: dict[str, Fact],
              turns: Sequence[Turn], offset: int) -> FactAction | str:
    """The action as it may be tried on top of the rules, or why not ("" to skip quietly).
    `left` is every fact as the rules alone leave it."""
    action = action.model_copy(update={"target": _renamed(action.target, offset)})
    target = rules.resolve(action.target)
    if action.op == "keep":
        return ""  # keeping changes nothing the rules did not already keep
    if target in left:
        if action.op == "remove":
            return f"remove of {target}: the rules decide retraction"
        # The change rules decide whether the statement replaces the slot's fact.
        action = action.model_copy(update={"op": "add", "target": None})
    if action.op == "remove":
        return action
    content = action.content or ""
    sources = sources_of(content, action.source_turn_ids, turns)
    if not sources:
        return "no turn of the episode states it"
    # A value the rules already hold adds nothing, and a second copy of it would outlive
    # the rules' next change of that value (they replace one fact per statement).
    cut = next((t for t in sources if _cut_of(content, t.content)), None)
    if cut is not None:
        return f"copies part of turn {cut.turn_id}"
    held = [f.fact_id for f in left.values() if f.status in VISIBLE and restates(content, f)]
    if held:
        return f"restates {held[0]}"
    # An old value read again: the rules retired it.
    retired = [f.fact_id for f in left.values() if f.status in _RETIRED and restates(content, f)]
    if retired:
        return f"restates retired {retired[0]}"
    return action.model_copy(update={"source_turn_ids": [t.turn_id for t in sources]})
