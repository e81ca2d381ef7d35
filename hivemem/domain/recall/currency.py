"""Which statements are history: turns whose facts were all superseded or retracted (pure).

A turn is stale when every fact that cites it is superseded or archived and no current fact
cites it (so the statement that made a switch never counts as stale because an older fact
in the chain cites it too), and only on plain evidence, as the currency keeper reads the
same chains (`marks_history`, `answers_questions`): consolidation also links facts by
resemblance, which in a chat between people ("I'm allergic to reptiles", later "I'm lactose
intolerant") mostly joins two statements that both still hold. Each stale statement knows
its successors: the current head of each of its facts' version chains, and the turns that
stated that head (a superseded fact itself is history by its status, whatever the
evidence). Recall uses this in the one scoring model: for a question about the present, a
stale statement ranks below its successor, and is left out when the successor is in the
context.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from hivemem.domain.fact import VISIBLE, Fact, FactKind, FactStatus
from hivemem.domain.plain_change import plainly_replaces
from hivemem.domain.slots import is_personal
from hivemem.domain.values import named_values, values_of


def fact_key(fact_id: str) -> str:
    return f"fact:{fact_id}"


def turn_key(session_id: str, turn_id: str) -> str:
    return f"turn:{session_id}:{turn_id}"


def answers_questions(fact: Fact) -> bool:
    """Whether the questions and dropped proposals linked to `fact` (`considered_in`) are
    history beside it: only a settled fact on a slot answers them. A conflicted fact settles
    nothing, and one without a subject was linked by resemblance alone ("Hey John, how's it
    going?" to a greeting)."""
    return fact.status == FactStatus.ACTIVE and bool(fact.subject)


def marks_history(fact: Fact, head: Fact | None) -> bool:
    """Whether the statements of the replaced `fact` are history, `head` being the current
    version at the end of its chain (None: withdrawn, or not known): a withdrawal is plain,
    a replacement only when the head plainly replaces it (`plainly_replaces`) or moves a
    measure of it (`_moves_a_measure`)."""
    return head is None or plainly_replaces(head, fact) or _moves_a_measure(head, fact)


def _moves_a_measure(new: Fact, old: Fact) -> bool:
    """Both carry a number, amount, date or version, and `new` does not repeat all of
    `old`'s ("estimate is now £215 back" after "about £640 back"): on a chain consolidation
    made, that is a value moved on. Names are not measures: in a chat, another name is
    mostly another thing ("Ireland next month" after "Edinburgh would be great")."""
    before = values_of(old.content) - named_values(old.content)
    after = values_of(new.content) - named_values(new.content)
    return bool(before) and bool(after) and not before <= after


def _head(fact: Fact, by_id: dict[str, Fact], memo: dict[str, Fact | None]) -> Fact | None:
    """The current version at the end of `fact`'s chain (None: retracted, or not known).
    `memo` keeps every answer found on the way: a long chain is walked once, not once per
    version (a slot that changed a thousand times stays linear)."""
    path: list[str] = []
    seen: set[str] = set()
    head: Fact | None = fact
    while head is not None and head.status not in VISIBLE:
        if head.fact_id in memo:
            head = memo[head.fact_id]
            break
        path.append(head.fact_id)
        seen.add(head.fact_id)
        nxt = by_id.get(head.superseded_by or "")
        head = None if nxt is None or nxt.fact_id in seen else nxt
    for fact_id in path:
        memo[fact_id] = head
    return head


def stale_statements(facts: Iterable[Fact]) -> dict[str, tuple[str, ...]]:
    """Candidate key (turn or non-current fact) -> the keys of what replaced it (empty for
    a retraction). Current facts and turns that state something current are not in it."""
    facts = list(facts)
    by_id = {f.fact_id: f for f in facts}
    current_turns = {(f.session_id, t) for f in facts if f.status in VISIBLE
                     for t in f.source_turn_ids}
    out: dict[str, set[str]] = {}
    heads: dict[str, Fact | None] = {}
    for fact in facts:
        if fact.status in VISIBLE:
            # A question or a dropped proposal about the slot is answered by its current fact.
            answer = {fact_key(fact.fact_id)} | {
                turn_key(fact.session_id, t) for t in fact.source_turn_ids}
            for turn_id in fact.considered_in if answers_questions(fact) else ():
                if (fact.session_id, turn_id) not in current_turns:
                    out.setdefault(turn_key(fact.session_id, turn_id), set()).update(answer)
            continue
        head = _head(fact, by_id, heads)
        successors: set[str] = set()
        if head is not None:
            successors.add(fact_key(head.fact_id))
            successors.update(turn_key(head.session_id, t) for t in head.source_turn_ids)
        elif fact.retracted_by:
            # A withdrawn fact's successor is the statement that withdrew it.
            successors.update(turn_key(fact.session_id, t) for t in fact.retracted_by)
        out.setdefault(fact_key(fact.fact_id), set()).update(successors)
        if not marks_history(fact, head):
            continue
        for turn_id in [*fact.source_turn_ids, *fact.mentioned_in]:
            if (fact.session_id, turn_id) in current_turns:
                continue
            key = turn_key(fact.session_id, turn_id)
            out.setdefault(key, set()).update(successors - {key})
    return {k: tuple(sorted(v)) for k, v in out.items()}


def personal_statements(facts: Iterable[Fact]) -> dict[str, str]:
    """Candidate key (fact or turn) -> whose own slot it states (a preference, a home)."""
    out: dict[str, str] = {}
    for fact in facts:
        owner = (fact.agent_id or "").lower()
        if not owner or not (fact.kind == FactKind.PREFERENCE
                             or is_personal(fact.subject, fact.agent_id)):
            continue
        out[fact_key(fact.fact_id)] = owner
        for turn_id in fact.source_turn_ids:
            out.setdefault(turn_key(fact.session_id, turn_id), owner)
    return out


def without_people(query: str, people: Iterable[str]) -> str:
    """The query with these names (and their possessive) taken out: "What did Sam paint?"
    -> "What did paint?". The query itself when nothing else would be left."""
    names = sorted({p for p in people if p}, key=len, reverse=True)
    if not names:
        return query
    alternatives = "|".join(re.escape(n) for n in names)
    pattern = r"(?<![\w-])(?:" + alternatives + r")(?:'s|\u2019s)?(?![\w-])"
    stripped = " ".join(re.sub(pattern, " ", query, flags=re.IGNORECASE).split())
    return stripped if re.search(r"\w", stripped) else query
