"""The deterministic reflector: the default when no LLM is configured.

It reads an episode sentence by sentence. A sentence becomes a candidate fact when it is
marked (by the caller or the marker detector), states a preference or a plain personal or
project fact, or says that something changed or was withdrawn. Its slot comes from the
sentence itself (`hivemem.domain.slots.slot_of`: "switch the X to", "for the X", "the X
is", a speaker's own preference); its kind follows the marker, or the slot's known fact.
What a statement does to the known facts (supersede, retract, conflict, add beside) is
decided by consolidation, the same step the LLM reflectors' actions go through.
Deterministic: the same episode and facts give the same actions.
"""

from __future__ import annotations

import re

from hivemem.domain.change import Intent, intent_of
from hivemem.domain.fact import Fact, FactAction, FactKind, FactStatus
from hivemem.domain.markers import detect_markers
from hivemem.domain.slots import canonical_slot, slot_of
from hivemem.domain.values import names_and_numbers, normalise, values_of
from hivemem.providers.reflector import ReflectionRequest, ReflectionResult

_PREFERENCE = re.compile(
    r"\b(?:i|we) (?:really |strongly |much |would )?(?:prefer|like|love|hate|dislike|enjoy"
    r"|favou?r|'d rather|would rather)\b|\bmy favou?rite\b|\bi'm (?:a fan|not a fan) of\b",
    re.IGNORECASE,
)
_PLAIN_FACT = re.compile(
    r"\b(?:my name is|i live in|i work (?:at|as|for)|i'm a |i am a |we have|our team (?:is|has)"
    r"|i have (?:a|two|three)|i moved to|i'm from|i am from|the deadline is)\b",
    re.IGNORECASE,
)
# "Let's add a dark mode toggle", "We'll build the portal with Vue": a commitment a later
# "scrap that" or "instead" can withdraw or replace. Agenda talk ("let's talk about") is not.
_COMMITMENT = re.compile(
    r"^(?:[A-Z][a-z]+:\s+)?(?:let's|let us|we'll|we will|we're going to|we are going to"
    r"|we'll be) (?!talk|discuss|see|check|go over|review|look|think|start with|get back"
    r"|fill in|keep|not)\w+", re.IGNORECASE)
# "Don't use the staging cluster", "Never deploy on Fridays": a rule until it is lifted.
_PROHIBITION = re.compile(r"^(?:[A-Z][a-z]+:\s+)?(?:don't|do not|never|avoid|stop) [a-z]+",
                          re.IGNORECASE)
_ONLY_UPDATED = re.compile(r"\bupdated?\b", re.IGNORECASE)
_LABEL = re.compile(r"^\s*(?:decision|constraint|failure|goal|note|update)\s*:\s*", re.IGNORECASE)
_SENTENCES = re.compile(r"(?<=[.!?])\s+|\n+")
_KIND_BY_MARKER = {
    "decision": FactKind.DECISION,
    "constraint": FactKind.CONSTRAINT,
    "failure": FactKind.FAILURE,
    "goal": FactKind.GOAL,
}


def subject_of(sentence: str, kind: FactKind, speaker: str | None = None) -> str:
    """The sentence's slot ("" when it names none: consolidation then versions the fact by
    the values it names). `kind` is kept for callers; the slot does not depend on it."""
    del kind
    return slot_of(sentence, speaker)


def _states_value(content: str, slotted: bool = False) -> bool:
    """A plain statement that sets something: it names a value, a name or a number ("The
    weekly deploy is on Tuesday", "Product pages are cached for 1 hour", "Jonas owns the
    billing service"); later statements of its slot replace it. A slot alone ("Recorded as
    the messaging decision") sets nothing. `slotted` (the currency keeper): every value
    `values_of` reads; else (reflection) names and numbers only."""
    return bool(values_of(content) if slotted else names_and_numbers(content))


def _kind(sentence: str, role: str, marked: list[str], alone: bool,
          changes: bool, known: Fact | None, states: bool = False) -> FactKind | None:
    detected = detect_markers(sentence, role)
    if detected:
        return _KIND_BY_MARKER[detected[0]]
    if _PREFERENCE.search(sentence):
        return FactKind.PREFERENCE
    if _PLAIN_FACT.search(sentence):
        return FactKind.FACT
    if _COMMITMENT.search(sentence):
        return FactKind.DECISION
    if _PROHIBITION.search(sentence):
        return FactKind.CONSTRAINT
    if marked and alone:
        return _KIND_BY_MARKER[marked[0]]
    if changes:  # a change or a withdrawal: of the slot's fact, or a decision
        return known.kind if known is not None else FactKind.DECISION
    if states:  # a plain statement of a value: what later changes replace
        return known.kind if known is not None else FactKind.FACT
    return None


# "Noted as the logging standard.", "Recorded as the messaging decision.": the assistant
# names what the previous statement was about.
_ACK = re.compile(r"^(?:noted|recorded|logged|saved|filed)\b(?:[^.]*?\bas (?:the |a |an |our )?"
                  r"(?P<slot>[a-z][\w -]{1,40}?))?[.!]?$", re.IGNORECASE)
_ACK_KINDS = {"decision": FactKind.DECISION, "constraint": FactKind.CONSTRAINT,
              "goal": FactKind.GOAL, "standard": FactKind.DECISION, "rule": FactKind.CONSTRAINT}

Candidate = tuple[FactKind, str, str, str | None, list[str]]


def _acknowledged(ack: str, previous: Candidate | None, prev_turn: str | None,
                  prev_content: str, turn_id: str, agent: str | None) -> Candidate | None:
    """The statement an acknowledgement confirms, with the slot and kind it names."""
    match = _ACK.match(ack.strip())
    if match is None or prev_turn is None:
        return None
    named = match.group("slot") or ""
    words = named.lower().split()
    kind = next((_ACK_KINDS[w] for w in reversed(words) if w in _ACK_KINDS), None)
    slot = canonical_slot(" ".join(w for w in words if w not in ("decision", "constraint",
                                                                "goal", "rule", "item")))
    if previous is not None:
        k, subject, content, who, turns = previous
        return (kind or k, subject or slot, content, who, sorted({*turns, turn_id}))
    if intent_of(prev_content) != Intent.STATE:
        return None
    # A bare "Recorded." confirms a statement of something: kept when it names its slot.
    slot = slot or slot_of(prev_content, agent)
    if not (slot or kind):
        return None
    return (kind or FactKind.FACT, slot, prev_content, agent, [prev_turn, turn_id])


def _candidates(
    request: ReflectionRequest, active: dict[str, Fact], slotted: bool = False
) -> list[tuple[FactKind, str, str, str | None, list[str]]]:
    """(kind, subject, content, agent, turn ids) for every sentence worth keeping."""
    out: list[Candidate] = []
    prev_turn: str | None = None
    prev_content = ""
    prev_agent: str | None = None
    for turn in request.turns:
        if turn.role.value == "assistant" and prev_turn is not None:
            index = next((i for i in range(len(out) - 1, -1, -1) if prev_turn in out[i][4]),
                         None)
            confirmed = _acknowledged(turn.content, None if index is None else out[index],
                                      prev_turn, prev_content, turn.turn_id, prev_agent)
            if confirmed is not None:
                if index is None:
                    out.append(confirmed)
                else:
                    out[index] = confirmed
                prev_turn = None
                continue
        prev_turn = turn.turn_id if turn.role.value == "user" else None
        prev_content = _LABEL.sub("", turn.content).strip()
        prev_agent = turn.agent_id or turn.role.value
        marked_turn = [m for m in turn.markers if m in _KIND_BY_MARKER]
        sentences = [s.strip() for s in _SENTENCES.split(turn.content) if s.strip()]
        agent = turn.agent_id or turn.role.value
        for sentence in sentences:
            content = _LABEL.sub("", sentence).strip()
            intent = intent_of(content)
            subject = slot_of(content, agent)
            if intent == Intent.NON_ASSERTION:
                # Kept so consolidation links it to the fact that answers it; it never
                # becomes a fact itself.
                if values_of(content) or subject:
                    out.append((FactKind.FACT, subject, content, agent, [turn.turn_id]))
                continue
            if (intent == Intent.UPDATE and not subject and not values_of(content)
                    and (turn.role.value == "assistant" or _ONLY_UPDATED.search(content))):
                # "Updated your entry.", "I'll update the doc": an acknowledgement names
                # neither what changed nor its new value; the statement it follows does.
                continue
            changes = intent in (Intent.UPDATE, Intent.RETRACT)
            states = intent in (Intent.STATE, Intent.ADDITION) and (
                _states_value(content, slotted) or (slotted and bool(subject)))
            kind = _kind(sentence, turn.role.value, marked_turn, len(sentences) == 1,
                         changes, active.get(subject), states)
            if kind is None:
                continue
            if len(content) < 8 and intent != Intent.RETRACT:
                continue
            out.append((kind, subject, content, agent, [turn.turn_id]))
    return out


class HeuristicReflector:
    name = "heuristic"

    def __init__(self, *, slotted: bool = False) -> None:
        # Also keep plain statements that fill a slot without a value it can read ("the
        # client wants amber as the primary brand colour"): what a later change names. The
        # per-turn currency keeper does (its statements only decide what is history);
        # reflection does not (a fact is what recall hands over).
        self.slotted = slotted

    def reflect(self, request: ReflectionRequest) -> ReflectionResult:
        active: dict[str, Fact] = {}
        for fact in sorted(request.prior_facts, key=lambda f: f.valid_from):
            if fact.status in (FactStatus.ACTIVE, FactStatus.CONFLICTED) and fact.subject:
                active[canonical_slot(fact.subject)] = fact
        actions: list[FactAction] = []
        seen: set[str] = set()
        for kind, subject, content, agent, turn_ids in _candidates(request, active, self.slotted):
            key = normalise(content)
            if key in seen:
                continue
            seen.add(key)
            known = active.get(subject)
            if known is not None and normalise(known.content) == key:
                actions.append(FactAction(op="keep", target=known.fact_id))
                continue
            # Consolidation decides what the statement changes (supersede, retract,
            # conflict, add beside): one set of rules for every reflector.
            actions.append(FactAction(
                op="add", content=content, kind=kind, subject=subject, confidence=0.8,
                source_turn_ids=turn_ids, agent_id=agent,
            ))
            # Questions and proposals only link to facts: they do not use up the cap.
            if len([a for a in actions if a.op != "keep" and a.content
                    and intent_of(a.content) != Intent.NON_ASSERTION]) >= request.max_facts:
                break
        return ReflectionResult(actions=actions, model=self.name)
