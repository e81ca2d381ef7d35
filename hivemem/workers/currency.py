"""Currency, kept per turn: the slot table (`hivemem.domain.slot_table`) as turns arrive.

Runs inside the boundary stage, which already sees every embedded turn of a session once,
in seq order, under the session's lease: each turn goes through the same change rules as
reflection (the heuristic reflector's statements, then consolidation) against the session's
current statements, and what it makes history is written to the slot table before the
boundary commit. A replay (a crash before the commit, a lost lease) offers turns at or
below the stored `applied` seq again: they are skipped, and the store's write is
conditional on the `applied` it read, so two holders never both apply a turn.

Reflection at episode close still writes the facts (with an LLM if one is configured);
recall reads both, and a reflected fact whose statements the table made history is history
too.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt
import structlog

from hivemem.config import ReflectionSettings
from hivemem.domain import lineage
from hivemem.domain.consolidation import PlanContext, plan_actions
from hivemem.domain.episode import Episode
from hivemem.domain.fact import VISIBLE, Fact, FactKind
from hivemem.domain.models import Turn
from hivemem.domain.names import SessionName
from hivemem.domain.plain_change import in_words, plainly_replaces
from hivemem.domain.recall.currency import personal_statements
from hivemem.domain.slot_table import Replacement, Rule, SlotState
from hivemem.domain.slots import slot_of
from hivemem.domain.values import holds, values_of
from hivemem.pipeline.messages import EmbeddedItem, EmbeddedTurn
from hivemem.pipeline.vectors import decode_vector
from hivemem.providers.heuristic import HeuristicReflector
from hivemem.providers.reflector import ReflectionRequest
from hivemem.store.currency import FORGOTTEN, WRITTEN, SlotTableStore

log = structlog.get_logger(__name__)

_HEURISTIC = HeuristicReflector(slotted=True)
_FILLER = frozenset(("that", "this", "with", "have", "from", "they", "them", "what", "when",
                     "just", "really", "about", "would", "could", "should", "there", "their"))


@functools.lru_cache(maxsize=4096)
def _decoded(raw: str) -> npt.NDArray[np.float32]:
    """A kept vector, decoded once (a session's statements are compared turn after turn)."""
    return decode_vector(raw)


def step(
    state: SlotState, turn: Turn, settings: ReflectionSettings, vector: str | None = None
) -> tuple[SlotState, dict[str, Replacement], dict[str, str]]:
    """`turn` (with its embedding as the embedded stream encodes it, if any) applied to
    `state`: the new state, the statements it made history (turn id -> replacement) and
    whose own slots its statements fill (turn id -> owner)."""
    prev = state.prev
    # An acknowledgement ("Recorded as the messaging decision.") names the slot of the
    # statement right before it: the two go through the rules together.
    turns = [prev, turn] if (prev is not None and prev.role.value == "user"
                             and turn.role.value == "assistant") else [turn]
    episode = Episode(
        episode_id=f"live:{turn.session_id}:{turn.seq}", session_id=turn.session_id,
        index=0, turn_ids=tuple(t.turn_id for t in turns), seq_start=turns[0].seq,
        seq_end=turn.seq, started_at=turns[0].timestamp, ended_at=turn.timestamp,
        close_reason="manual", namespace=turn.namespace,
    )
    known = [*state.history, *state.current]
    result = _HEURISTIC.reflect(ReflectionRequest(
        session_id=turn.session_id, episode=episode, turns=turns, prior_facts=state.current,
        max_facts=settings.max_facts_per_episode,
    ))
    speakers = state.speakers if not turn.agent_id or turn.agent_id.lower() in state.speakers \
        else [*state.speakers, turn.agent_id.lower()]
    after = state.model_copy(update={"applied": turn.seq, "prev": turn, "speakers": speakers})
    if not result.actions:
        return after, {}, {}
    fresh = {turn.turn_id: vector} if vector else {}
    plan = plan_actions(known, result.actions, PlanContext(
        session_id=turn.session_id, episode_id=episode.episode_id, namespace=turn.namespace,
        now=datetime.now(UTC), valid_from=turn.timestamp,
        similarity=_similarity(turns, {**state.vectors, **fresh}),
        dedup_threshold=settings.dedup_threshold, min_confidence=settings.min_confidence,
        turns=turns,
    ))
    merged = {f.fact_id: f for f in known}
    merged.update(plan.writes)
    after = after.keep(merged.values(), fresh)
    changed = list(plan.writes.values())
    said = {t.turn_id: t.content for t in turns}
    people = frozenset(after.speakers)
    return after, replacements(merged, changed, turn.seq, said, people), {
        key.rsplit(":", 1)[1]: owner
        for key, owner in personal_statements(changed).items() if key.startswith("turn:")}


def _similarity(
    turns: Sequence[Turn], vectors: dict[str, str]
) -> Callable[[str, Fact], float]:
    """A statement's similarity to a known one: the cosine of their turns' embeddings (a
    statement's turn: the one of `turns` it is a sentence of)."""
    decoded: dict[str, npt.NDArray[np.float32]] = {}

    def vector_of(turn_id: str) -> npt.NDArray[np.float32] | None:
        if turn_id not in decoded:
            raw = vectors.get(turn_id)
            if raw is None:
                return None
            decoded[turn_id] = _decoded(raw)
        return decoded[turn_id]

    def similarity(content: str, fact: Fact) -> float:
        said = next((t.turn_id for t in reversed(turns) if content in t.content), None)
        if said is None or not fact.source_turn_ids or said in fact.source_turn_ids:
            return 0.0
        a, b = vector_of(said), vector_of(fact.source_turn_ids[0])
        return float(np.dot(a, b)) if a is not None and b is not None else 0.0

    return similarity


def replacements(
    facts: dict[str, Fact], changed: Sequence[Fact], seq: int,
    said: dict[str, str] | None = None, people: frozenset[str] = frozenset(),
) -> dict[str, Replacement]:
    """The statements `changed` (this step's writes) made history, by turn id. A turn that
    states something current is not history (a plain statement of a slot with no value
    read in it, "the hosting is cheaper", is too weak to keep its turn current).

    Only on plain evidence (`plainly_replaces`): what the table says is history leaves the
    context, so a resemblance alone (two chatty turns alike) never makes it. `said`: this
    step's turns (id -> text); a question is answered only when it names a value other than
    one of `people` (the session's speakers: "Caroline, how does it feel?" names none)."""
    current_turns = {t for f in facts.values() if f.status in VISIBLE and _states(f)
                     for t in f.source_turn_ids}
    said = said or {}
    out: dict[str, Replacement] = {}

    def note(turn_ids: Sequence[str], by: Sequence[str], rule: Rule, source: Fact) -> None:
        for turn_id in turn_ids:
            if turn_id in current_turns or turn_id in by:
                continue
            out[turn_id] = Replacement(
                by=tuple(sorted(by)), rule=rule, slot=source.subject, seq=seq,
                namespace=source.namespace, visibility=source.visibility,
                agent_id=source.agent_id)

    for fact in changed:
        if fact.status in VISIBLE:
            # A question or a dropped proposal about a value ("what if we used MySQL?") is
            # answered by the fact it was about.
            asked = [t for t in fact.considered_in if t in said and _names_a_value(said[t], people)]
            note(asked, fact.source_turn_ids, "answered", fact)
            continue
        head = _head(fact, facts)
        if head is not None:
            if plainly_replaces(head, fact):
                note([*fact.source_turn_ids, *fact.mentioned_in], head.source_turn_ids,
                     "superseded", head)
        elif fact.retracted_by and any(_withdraws(said.get(t, ""), fact, people)
                                       for t in fact.retracted_by):
            note([*fact.source_turn_ids, *fact.mentioned_in], fact.retracted_by,
                 "retracted", fact)
    return out


def _withdraws(text: str, old: Fact, people: frozenset[str]) -> bool:
    """Whether a retraction names what it withdraws: its slot's words, one of its values
    (not a person's name), or a word of it ("scrap that, no dark mode")."""
    if not text:
        return True  # an earlier step's turn: consolidation decided with it in hand
    values = {v for v in values_of(old.content) if not any(
        v.startswith(p) or p.startswith(v) for p in people)}
    if any(holds(text, v) for v in values):
        return True
    slot = set(slot_of(old.content, old.agent_id).split()) or set(old.subject.split())
    if in_words(slot, text):
        return True
    words = {w for w in re.findall(r"[a-z][\w-]{3,}", old.content.lower())} - _FILLER
    return bool(words & set(re.findall(r"[a-z][\w-]{3,}", text.lower())))


def _names_a_value(text: str, people: frozenset[str]) -> bool:
    return any(not any(v.startswith(p) or p.startswith(v) for p in people)
               for v in values_of(text))


def _states(fact: Fact) -> bool:
    return fact.kind != FactKind.FACT or bool(values_of(fact.content))


def _head(fact: Fact, facts: dict[str, Fact]) -> Fact | None:
    seen: set[str] = set()
    head: Fact | None = fact
    while head is not None and head.status not in VISIBLE and head.fact_id not in seen:
        seen.add(head.fact_id)
        head = facts.get(head.superseded_by or "")
    return head if head is not None and head.status in VISIBLE else None


def moved_on(
    state: SlotState, turn: Turn, replaced: dict[str, Replacement] | None = None
) -> tuple[SlotState, dict[str, Replacement], set[str]]:
    """`turn` through the value lineage (`hivemem.domain.lineage`): the state with it, the
    turns it made history (by the values they carry) and the turns current again.
    `replaced`: what the slot rules made history at this turn; the values those turns
    carried and their successors do not are gone too, wherever else they were said."""
    people = frozenset(state.speakers)
    done = lineage.step(state.lineage, turn.turn_id, turn.content, people=people)
    ledger, history_ids = done.lineage, dict(done.history)
    for old_turn, entry in (replaced or {}).items():
        if entry.rule != "superseded":
            continue  # a question answered or a statement withdrawn names no new value
        ledger, more = lineage.retire(ledger, old_turn, entry.by, turn.turn_id, people)
        for turn_id, by in more.items():
            history_ids.setdefault(turn_id, by)
    state = state.model_copy(update={"lineage": ledger})
    history = {
        turn_id: Replacement(by=(by,), rule="superseded", slot="value", seq=turn.seq,
                             namespace=turn.namespace, visibility=turn.visibility,
                             agent_id=turn.agent_id)
        for turn_id, by in history_ids.items() if turn_id != by}
    return state, history, set(done.restored) - set(history)


def _published(ledger: lineage.Lineage) -> dict[str, tuple[str, tuple[str, ...]]]:
    """The lineage's values moved on from as the slot table publishes them to recall
    (a value a private turn moved on from is left out: recall would read it for anyone)."""
    return {key: (turn_id, tuple(ledger.successors.get(key, ())))
            for key, turn_id in ledger.gone.items()}


def _joined(a: dict[str, Replacement], b: dict[str, Replacement]) -> dict[str, Replacement]:
    """Both answers; for a turn in both, the slot rules' entry with both successors."""
    out = {**a, **b}
    for turn_id in a.keys() & b.keys():
        out[turn_id] = b[turn_id].model_copy(
            update={"by": tuple(sorted({*a[turn_id].by, *b[turn_id].by}))})
    return out


def _valued(entries: dict[str, Replacement], ledger: lineage.Lineage, people: frozenset[str]
            ) -> dict[str, Replacement]:
    """`entries` with, for a statement superseded by a value (or whose values went with it),
    which of its values went and which it still carries (`lineage.parts`): a statement
    partly replaced is history only for a question about what went."""
    out = dict(entries)
    for turn_id, entry in entries.items():
        if entry.rule == "answered":
            continue  # a question answered: history as a whole
        # A statement withdrawn in part ("jersey order cancelled" of a turn that also set
        # the meeting time) is history only for a question about what was withdrawn.
        gone, kept = (lineage.parts(ledger, turn_id, people, entry.by)
                      if entry.rule == "superseded"
                      else lineage.withdrawn_parts(ledger, turn_id, entry.by, people))
        if gone:
            out[turn_id] = entry.model_copy(update={
                "gone": {k: tuple(w) for k, w in gone.items()},
                "kept": {k: tuple(w) for k, w in kept.items()}})
    return out


class CurrencyKeeper:
    """Applies a session's embedded entries, in seq order, to its slot table."""

    def __init__(self, store: SlotTableStore, settings: ReflectionSettings) -> None:
        self.store = store
        self.settings = settings

    def apply(self, name: SessionName, items: Sequence[EmbeddedItem],
              forgotten: str | None = None) -> None:
        """`items`: the session's entries in seq order (turns, controls, skips);
        `forgotten`: the session's forget mark when they were read ('': none; None: not
        checked): nothing is written once a forget of the session began since."""
        if not items:
            return
        started = time.perf_counter()
        state = self.store.state(name)
        base = state.applied
        before = _published(state.lineage)
        private: set[str] = set()
        replaced: dict[str, Replacement] = {}
        personal: dict[str, str] = {}
        restored: set[str] = set()
        for item in items:
            if item.seq <= state.applied:
                continue  # applied before (a replay)
            if isinstance(item, EmbeddedTurn):
                if item.turn.visibility != "shared":
                    private.add(item.turn.turn_id)
                try:
                    state, gone, owners = step(state, item.turn, self.settings, item.vec)
                except Exception as exc:  # a rule's bug must not hold the session's episodes
                    log.error("currency.turn_failed", session_id=name, seq=item.seq,
                              error=f"{type(exc).__name__}: {exc}"[:300])
                    gone, owners = {}, {}
                state, moved, back = moved_on(state, item.turn, gone)
                for turn_id in back:
                    replaced.pop(turn_id, None)
                restored = (restored | back) - set(moved) - set(gone)
                replaced.update(_valued(_joined(moved, gone), state.lineage,
                                        frozenset(state.speakers)))
                personal.update(owners)
            state = state.model_copy(update={"applied": item.seq})
        if state.applied == base:
            return
        after = {k: v for k, v in _published(state.lineage).items() if v[0] not in private}
        values: dict[str, tuple[str, tuple[str, ...]] | None] = {
            k: v for k, v in after.items() if before.get(k) != v}
        values.update({k: None for k in before if k not in after})
        done = self.store.write(name, base, state, replaced, personal, restored, values,
                                forgotten)
        if done == FORGOTTEN:
            log.info("currency.session_forgotten", session_id=name, through=state.applied)
            return
        if done != WRITTEN:
            log.warning("currency.lost_race", session_id=name, applied=base)
            return
        log.debug("currency.applied", session_id=name, through=state.applied,
                  replaced=len(replaced), ms=round((time.perf_counter() - started) * 1000, 2))
