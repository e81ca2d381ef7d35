"""Recall: the read path. Hybrid search (dense + BM25) over turns and facts, the recent window,
context around hits, one scoring model, dedup, quotas and a hard token budget.

Writes nothing. The stores answer; `memory.scoring` scores; `memory.budget` chooses.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Generic, TypeVar, cast

from hivemem.config import ReflectionSettings
from hivemem.domain.fact import VISIBLE, FactStatus
from hivemem.domain.lineage import GoneValues
from hivemem.domain.models import RecallResult, Turn
from hivemem.domain.names import SessionName, session_name
from hivemem.domain.recall.answers import Answer, newer_answers
from hivemem.domain.recall.budget import Candidate, Excluded, select
from hivemem.domain.recall.currency import turn_key, without_people
from hivemem.domain.recall.fact_index import Lookup, find
from hivemem.domain.recall.intent import QueryIntent, read_query
from hivemem.domain.recall.newer_first import Statement, newer_first
from hivemem.domain.recall.policy import RecallPolicy
from hivemem.domain.recall.resemblance import Resemblance
from hivemem.domain.recall.score_table import ScoreTable, score_table
from hivemem.domain.recall.scoring import Signals, relevance
from hivemem.domain.scope import DEFAULT_NAMESPACE, Scope
from hivemem.domain.value_clauses import Question, ValueParts
from hivemem.providers.embedders import Embedder
from hivemem.providers.lexical import LexicalEncoder
from hivemem.recall.currency import Currency, CurrencyView
from hivemem.recall.foreground import Foreground
from hivemem.recall.items import (
    PoolEntry,
    context_item,
    excluded_item,
    superseded_item,
    unit_vector,
)
from hivemem.recall.known_facts import SessionFacts, read_already
from hivemem.store.currency import SlotTableStore
from hivemem.store.episodes import EpisodeStore
from hivemem.store.state import TurnLog
from hivemem.store.vectors.base import (
    FactHit,
    FactOf,
    TurnHit,
    Vector,
    VectorStore,
)

# Sessions whose speakers the recaller keeps (a few ids each).
_SPEAKER_SESSIONS = 4096
# Turns that replaced a candidate, read when no search found them, at most (per session).
_SUCCESSORS = 8

_T = TypeVar("_T")


@dataclass(slots=True)
class _Lexical:
    """What recall reads before it needs the query's vector."""

    recent: list[Turn]
    lexical_turns: list[TurnHit]
    lexical_facts: list[FactHit]
    search_facts: bool
    current_from: int
    currency: Currency
    # The recent turns' stored points (read ahead on the helper), or None: read when needed.
    recent_stored: dict[str, TurnHit] | None = None
    # The sessions' facts as read already, for the fact searches' hits (`read_already`).
    known_fact: FactOf | None = None


class _Ahead(Generic[_T]):
    """A piece of recall's work (`work(ahead)`), on the helper thread once `start()` is
    called, or done at once on the caller (`executor` None). `result()` takes the task back
    and runs it on the caller while the helper has not begun it: on an overloaded machine
    the helper may get no core before the caller needs the value, and waiting for it then
    cost more than the overlap saves (LoCoMo at load 13: p50 +27% before this)."""

    def __init__(self, executor: ThreadPoolExecutor | None,
                 work: Callable[[bool], _T]) -> None:
        self._executor = executor
        self._work = work
        self._task: Future[_T] | None = None
        self._done = False
        self._value: _T | None = None
        if executor is None:
            self._set(work(False))

    def _set(self, value: _T) -> None:
        self._value, self._done = value, True

    def start(self) -> None:
        if self._executor is None or self._task is not None or self._done:
            return
        try:
            self._task = self._executor.submit(self._work, True)
        except RuntimeError:  # shut down (closed): on the caller
            self._set(self._work(False))

    def done(self) -> bool:
        return self._done or (self._task is not None and self._task.done())

    def result(self) -> _T:
        if not self._done:
            if self._task is None or self._task.cancel():
                self._set(self._work(False))
            else:
                self._set(self._task.result())
        return cast(_T, self._value)


class Recaller:
    def __init__(
        self,
        state: TurnLog,
        episodes: EpisodeStore,
        vectors: VectorStore,
        embedder: Embedder,
        lexical: LexicalEncoder | None = None,
        reflection: ReflectionSettings | None = None,
        slots: SlotTableStore | None = None,
        foreground: Foreground | None = None,
    ) -> None:
        self.state = state
        # The slot table the pipeline keeps per turn (None: currency of the turns not yet
        # reflected is derived at recall, from the recent ones).
        self.slots = slots
        # Recalls run as the foreground: the pipeline's threads in this process hold back.
        self.foreground = foreground or Foreground()
        self.currency = CurrencyView(vectors, reflection or ReflectionSettings(),
                                     foreground=self.foreground)
        self.episodes = episodes
        self.vectors = vectors
        self.embedder = embedder
        self.lexical = lexical or LexicalEncoder()
        # The lexical searches and Redis reads run on this thread while the caller embeds
        # the query (ONNX releases the GIL): the two overlap.
        self._helper = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hivemem-recall")
        self._inflight = 0  # helper tasks submitted and not yet done (under _inflight_lock)
        self._inflight_lock = threading.Lock()
        # Who has spoken in each session recalled lately (lower-cased agent ids, from the
        # recent window and earlier candidates): names the query may drop before embedding.
        self._speakers: OrderedDict[str, frozenset[str]] = OrderedDict()
        self._speakers_lock = threading.Lock()  # recall runs on many threads

    def close(self) -> None:
        self._helper.shutdown(wait=False)
        self.currency.close()

    def recall(
        self,
        session_id: str,
        query: str,
        token_budget: int,
        policy: RecallPolicy,
        *,
        related_sessions: Sequence[str] = (),
        explain: bool = False,
        access: Scope | None = None,
        check_owner: bool = False,
    ) -> RecallResult:
        """`access`: who asks; every store read is limited to what it may see.
        `check_owner`: `session_id` is not yet known to be `access`'s namespace's: the
        recall's first Redis read checks it too (`NotFound`, before anything read is
        kept or returned), a round trip that runs beside the query's embedding instead
        of one before it (~0.3 ms of a LoCoMo recall, measured)."""
        with self.foreground.serving():
            return self._recall(session_id, query, token_budget, policy,
                                related_sessions=related_sessions, explain=explain,
                                access=access, check_owner=check_owner)

    def _recall(
        self,
        session_id: str,
        query: str,
        token_budget: int,
        policy: RecallPolicy,
        *,
        related_sessions: Sequence[str] = (),
        explain: bool = False,
        access: Scope | None = None,
        check_owner: bool = False,
    ) -> RecallResult:
        intent = read_query(query)  # the one reading of the question
        sessions = [session_id, *(s for s in related_sessions if s != session_id)]
        # What the stores are asked for: the sessions' internal names in the asker's
        # namespace (candidates keep the ids, as turns and facts carry them).
        scope: SessionName | list[SessionName] = (
            _named(access, session_id) if len(sessions) == 1
            else [_named(access, s) for s in sessions])
        query_vector, got, dense_hits, window_hits = self._searches(
            session_id, sessions, scope, intent, policy, access,
            owned_by=access.namespace if check_owner and access is not None else None)
        recent = got.recent
        lexical_turns, search_facts = got.lexical_turns, got.search_facts

        pool: dict[str, PoolEntry] = {}
        self._add_turn_hits(pool, dense_hits, "dense")
        self._add_turn_hits(pool, lexical_turns, "lexical")
        self._add_turn_hits(pool, window_hits, "window")
        self._similarities(pool, query_vector, policy)
        past = intent.past
        superseded = self._add_facts(
            pool, scope, query_vector, got.lexical_facts, policy, access, past=past,
            known=got.known_fact,
        ) if search_facts else []
        self._add_recent(pool, recent, query_vector, access, got.recent_stored)
        if policy.neighbours:
            self._add_neighbours(pool, query_vector, policy, access)
        self._similarities(pool, query_vector, policy)  # of the turns added since

        currency, current_from = got.currency, got.current_from
        # Read per candidate by several passes below: each key asked of the layers once.
        replaced: Mapping[str, tuple[str, ...]] = _Memo(currency.replaced)
        question = Question.of(intent.text) if not past else None
        # Whose something a question asks about decides whether it is about now once the
        # speakers are known ("Nia's first day" is, where Nia is not one of them).
        intent = intent.among(self._speakers_of(session_id, pool))
        if intent.current:
            replaced = _read_as_of_now(pool, replaced, currency.gone, session_id)
        if question is not None and currency.parts is not None:
            replaced = _whole_or_asked(pool, replaced, currency.parts, question)
        if intent.current:
            # A stale statement never competes without what replaced it.
            self._add_successors(pool, replaced, query_vector, access)
        asked_about = intent.people_named(set(currency.personal.values()))
        speakers = self._speakers_named(session_id, intent, pool, policy)
        asks_questions = bool(policy.weights.answer)
        replacing = False  # whether any candidate has a successor (else none is left out)
        for key, entry in pool.items():
            sig = entry.signals
            # One pass down the views (`Lookup.find`), not `in` and then `[]`.
            sig.successors, stale = (
                ((), False) if (found := find(replaced, key)) is None else (found, True))
            replacing = replacing or bool(sig.successors)
            if asked_about:  # (whose slot a candidate states: read only when it matters)
                owner = find(currency.personal, key)
                sig.other_person = owner is not None and owner not in asked_about
            if entry.is_turn:
                sig.by_asked_speaker = bool(speakers) and (
                    (entry.agent_id or "").lower() in speakers)
                sig.asks = asks_questions and "?" in entry.text
                sig.in_current_episode = (
                    sig.session_id == session_id and (sig.seq or 0) >= current_from
                )
                # A turn that stated only superseded or retracted facts is history now.
                sig.stale = stale
        newest = max(
            [t.seq for t in recent]
            + [e.signals.seq or 0 for e in pool.values()
               if e.is_turn and e.signals.session_id == session_id]
            + [0]
        )
        # Scored as columns; a candidate's components are built only if it is shown.
        scores = score_table(
            [e.signals for e in pool.values()], policy,
            current_session=session_id, newest_seq=newest, intent=intent,
        )
        restated = _facts_stand_for_their_turns(pool, scores, policy)
        _newer_first(pool, scores, session_id, intent)
        candidates = [
            Candidate(
                key=key,
                text=entry.text,
                score=final,
                token_count=entry.tokens,
                vector=entry.vector,
                payload={"entry": entry, "scores": scores},
                source=entry.signals.source,
                threshold_score=final + 1.0 if entry.signals.history else None,
            )
            for (key, entry), final in zip(pool.items(), scores.final.tolist(), strict=True)
        ]
        budget = max(0, token_budget - policy.reserve_tokens)
        chosen, excluded = _select_current(
            [c for c in candidates if c.key not in restated], budget, policy,
            keep_history=past or policy.include_history or not replacing,
            only_current=intent.current,
        )
        excluded += [Excluded(c, "duplicate", f"restated by {restated[c.key]}")
                     for c in candidates if c.key in restated]
        return RecallResult(
            [context_item(c) for c in chosen], token_budget=budget, preset=policy.name,
            excluded=[*map(excluded_item, excluded),
                      *(superseded_item(h, policy) for h in superseded)] if explain else [],
        )

    def _searches(
        self, session_id: str, sessions: list[str], scope: SessionName | list[SessionName],
        intent: QueryIntent, policy: RecallPolicy, access: Scope | None, *,
        owned_by: str | None = None,
    ) -> tuple[Vector, _Lexical, list[TurnHit], list[TurnHit]]:
        """The query's vector, the lexical work, the dense hits and the window hits.

        With the helper free (`_helper_free`), the lexical work runs on it while the caller
        embeds the query (ONNX releases the GIL); else on the caller. The dense and window
        searches go as one request (`search_turns_and_windows`) from the caller: sending
        the window search to the helper beside the caller's dense one (and the dense fact
        search, tried after it) measured no faster on LoCoMo, twice
        (`bench/results/archive/2026-12-02/locomo_arms_searches_on_helper.json`).

        The text to embed drops the speakers the query names, known from earlier recalls
        and the recent turns; the helper reads those meanwhile, so the embedding starts
        from the speakers remembered and is made again in the rare case the recent turns
        name one more that the query mentions (a session's first recall)."""
        helper = self._helper_free()
        remembered = self._speakers.get(session_id, frozenset())
        embedded = threading.Event()
        before = self._task(helper, lambda ahead: self._lexical(
            session_id, sessions, scope, intent.text, policy, access, embedded,
            ahead=ahead, slot_table=intent.may_be_current, owned_by=owned_by))
        recent = before.result().recent if before.done() else None
        dense_query = self._dense_query(intent, policy, remembered, recent)
        try:
            prepare = getattr(self.embedder, "prepare_query", None)
            embed = prepare(dense_query) if prepare is not None else partial(
                self.embedder.embed_query, dense_query)
        finally:
            before.start()  # after the tokenising (which frees the GIL for the helper)
        try:
            query_vector = embed()
        finally:
            embedded.set()
        if before.done():  # the recent turns known before any search
            exact = self._dense_query(intent, policy, remembered, before.result().recent)
            if exact != dense_query:
                dense_query, query_vector = exact, self.embedder.embed_query(exact)
        dense, window = self._dense_hits(scope, query_vector, policy, access)
        got = before.result()
        exact = self._dense_query(intent, policy, remembered, got.recent)
        if exact != dense_query:  # the recent turns named a speaker: search again without
            query_vector = self.embedder.embed_query(exact)
            dense, window = self._dense_hits(scope, query_vector, policy, access)
        return query_vector, got, dense, window

    def _helper_free(self) -> ThreadPoolExecutor | None:
        """The helper, when no other recall is using it and the embedder frees the GIL:
        else the hand-over costs (~0.1 ms quiet, ~1 ms under load) and nothing runs in
        parallel (the caller goes straight into ONNX: a task started on another thread
        would wait for the GIL until the caller blocked; measured: the overlap was nil)."""
        with self._inflight_lock:
            if self._inflight or not getattr(self.embedder, "releases_gil", False):
                return None
            return self._helper

    def _task(self, helper: ThreadPoolExecutor | None, work: Callable[[bool], _T]
              ) -> _Ahead[_T]:
        """`work` as an `_Ahead` on `helper` (None: at once, here), counted in flight."""
        with self._inflight_lock:
            self._inflight += 1

        def counted(ahead: bool) -> _T:
            try:
                return work(ahead)
            finally:
                with self._inflight_lock:
                    self._inflight -= 1

        return _Ahead(helper, counted)

    def _lexical(
        self, session_id: str, sessions: list[str], scope: SessionName | list[SessionName],
        query: str,
        policy: RecallPolicy, access: Scope | None, embedded: threading.Event, *,
        ahead: bool = False, slot_table: bool = True, owned_by: str | None = None,
    ) -> _Lexical:
        """The session's recent turns, the BM25 searches, its episode progress, facts and
        currency.
        `ahead` (beside the embedding): the recent turns' stored points too, all of them
        (those no search finds compete as well; ~50 points whose vectors the caller would
        read after the searches, now read while it is in ONNX).
        `slot_table`: read the slot table the pipeline keeps per turn (a question about what
        holds now); else currency comes from the stored facts and the turns not yet
        reflected, as without a table (a question about an event or the past: the table's
        history marks cost LoCoMo evidence, measured)."""
        # Sent first and read after an engine search: the replies wait in the socket
        # (`send_pipeline`: waiting for them cost more than the round trip). `owned_by`:
        # the access check rides in the first read, and nothing is kept before it passed
        # (the known facts and slot views are per-session caches).
        # The slot table's version rides in the same read (`slots`).
        own = _named(access, session_id)
        read_recent = self.state.send_recent_turns_and_progress(
            self.episodes, own, policy.recent_turns, access, owned_by=owned_by,
            slots=self.slots if policy.fact_limit and slot_table else None)
        try:
            sparse = self.lexical.query(query) if policy.lexical else None
            lexical_turns = (
                self.vectors.search_turns_lexical(scope, sparse, policy.search_limit, access)
                if sparse else []
            )
        finally:
            recent, (assigned, _closed, open_ep, _markers), table = read_recent()
        known, search_facts = self._known_facts(sessions, policy, access)
        known_fact = read_already([snap for _s, snap in known])
        lexical_facts = (
            self.vectors.search_facts_lexical(
                scope, sparse, policy.fact_limit, _statuses(policy), access, known_fact
            )
            if sparse and search_facts else []
        )
        current_from = open_ep.seq_start if open_ep and open_ep.turn_ids else assigned + 1
        # Which statements are history, from the facts of the sessions asked (kept between
        # calls; only what was written since the last call is read).
        currency = self.currency(
            session_id, sessions, access,
            # The session's turns that no reflection has seen yet change currency too.
            [t for t in recent if t.session_id == session_id and t.seq >= current_from],
            known, table,
        ) if policy.fact_limit else Currency({}, {})
        stored = None
        if ahead and recent:
            stored = {h.turn_id: h for h in self.vectors.get_turns(
                _named(access, recent[0].session_id), [t.turn_id for t in recent], access)}
        if ahead:  # else nothing runs beside it: a vector is read when a candidate needs it
            _read_vectors_while([*lexical_turns, *(stored or {}).values()], embedded)
        return _Lexical(recent, lexical_turns, lexical_facts, search_facts, current_from,
                        currency, stored, known_fact)

    def _dense_query(
        self, intent: QueryIntent, policy: RecallPolicy, remembered: frozenset[str],
        recent: list[Turn] | None,
    ) -> str:
        """The text to embed: the query, or it without the speakers it names (those
        remembered for the session and those of its recent turns)."""
        if not policy.dense_without_speakers:
            return intent.text
        known = remembered | {t.agent_id.lower() for t in recent or () if t.agent_id}
        return without_people(intent.text, intent.people_named(known))

    def _speakers_of(self, session_id: str, pool: dict[str, PoolEntry]) -> frozenset[str]:
        """The session's speakers (lower case) as far as known: the candidates' and those
        its earlier recalls met (remembered for the session)."""
        with self._speakers_lock:
            known = self._speakers.get(session_id, frozenset()) | _agents(pool)
            self._speakers[session_id] = known
            self._speakers.move_to_end(session_id)
            while len(self._speakers) > _SPEAKER_SESSIONS:
                self._speakers.popitem(last=False)
        return known

    def _speakers_named(
        self, session_id: str, intent: QueryIntent, pool: dict[str, PoolEntry],
        policy: RecallPolicy,
    ) -> set[str]:
        """The candidates' speakers the query names (read again: the successors added
        since `_speakers_of` are candidates too)."""
        return intent.people_named(_agents(pool)) if policy.weights.speaker else set()

    def _known_facts(
        self, sessions: Sequence[str], policy: RecallPolicy, access: Scope | None,
    ) -> tuple[list[tuple[str, SessionFacts]], bool]:
        """The sessions' facts (read for currency anyway), and whether to search facts:
        where no session has any (before the first reflection), the searches find none."""
        namespace = DEFAULT_NAMESPACE if access is None else access.namespace
        known = self.currency.facts(sessions, namespace) if policy.fact_limit else []
        return known, any(len(snap) for _s, snap in known)

    # -- candidate sources -------------------------------------------------------------------

    def _dense_hits(
        self, scope: SessionName | list[SessionName], query: Vector, policy: RecallPolicy,
        access: Scope | None,
    ) -> tuple[list[TurnHit], list[TurnHit]]:
        """The nearest turns, and the nearest context windows when the policy weighs them
        and the store has them (one request to the store for both)."""
        limit = policy.search_limit
        if not self._searches_windows(policy):
            return self.vectors.search_turns(scope, query, limit, access), []
        return self.vectors.search_turns_and_windows(scope, query, limit, access)

    def _weighs_windows(self, policy: RecallPolicy) -> bool:
        """Whether the candidates' window similarities count (and the store has any)."""
        return bool(policy.weights.window) and self.vectors.has_windows

    def _searches_windows(self, policy: RecallPolicy) -> bool:
        """Whether recall searches the window vectors (else at most asks for the
        candidates' window similarities)."""
        return policy.window_search and self._weighs_windows(policy)

    def _similarities(
        self, pool: dict[str, PoolEntry], query: Vector, policy: RecallPolicy
    ) -> None:
        """Fill in what the searches did not give: the dense similarity of a turn found by
        another retriever, and the window similarity of a stored turn the window search did
        not find, or of every one without a window search (asked of the store for all of
        them at once; not yet asked: `window_asked` is False). Window similarities only when
        the policy weighs them."""
        windows = self._weighs_windows(policy)
        unasked: list[tuple[PoolEntry, TurnHit]] = []
        for entry in pool.values():
            sig = entry.signals
            if sig.dense_rank is None and entry.is_turn:
                sig.dense = _dot(entry.vector, query)
            if (windows and sig.window is None and entry.hit is not None
                    and not entry.window_asked):
                if entry.hit.carries_fused:  # from its own vectors, no query (~10 us)
                    sig.window = entry.hit.window_score(query)
                    entry.window_asked = True
                else:
                    unasked.append((entry, entry.hit))
        if not unasked:
            return
        similarities = self.vectors.window_similarities([h for _e, h in unasked], query)
        for (entry, _hit), similarity in zip(unasked, similarities, strict=True):
            entry.window_asked = True
            entry.signals.window = similarity

    @staticmethod
    def _add_turn_hits(pool: dict[str, PoolEntry], hits: list[TurnHit], kind: str) -> None:
        for rank, hit in enumerate(hits, 1):
            key = f"turn:{hit.session_id}:{hit.turn_id}"
            entry = pool.get(key)
            if entry is None:
                entry = pool[key] = PoolEntry(
                    Signals(key=key, source="turn", session_id=hit.session_id,
                            seq=hit.seq, markers=hit.markers),
                    unit_vector(hit.vector), hit=hit,
                )
            if kind == "dense":
                entry.signals.dense = hit.score
                entry.signals.dense_rank = rank
            elif kind == "window":
                entry.signals.window = hit.score
                entry.signals.window_rank = rank
            else:
                entry.signals.lexical_raw = hit.score
                entry.signals.lexical_rank = rank

    def _add_facts(
        self,
        pool: dict[str, PoolEntry],
        scope: SessionName | list[SessionName],
        query_vector: Vector,
        lexical: list[FactHit],
        policy: RecallPolicy,
        access: Scope | None = None,
        *,
        past: bool = False,
        known: FactOf | None = None,
    ) -> list[FactHit]:
        """Add the facts that match (dense hits searched here, lexical ones given). Returns
        the superseded ones left out (no history asked). `past`: the query asks what was
        true before, so superseded versions are candidates (they hold the answer).
        `known`: the facts read already (`read_already`), not validated again."""
        if not policy.fact_limit:
            return []
        statuses = _statuses(policy)
        dense = self.vectors.search_facts(
            scope, query_vector, policy.fact_limit, statuses, access, known
        )
        hits: dict[str, tuple[FactHit, int | None, FactHit | None, int | None]] = {}
        for rank, hit in enumerate(dense, 1):
            hits[hit.fact.fact_id] = (hit, rank, None, None)
        for rank, hit in enumerate(lexical, 1):
            d_hit, d_rank, _l, _r = hits.get(hit.fact.fact_id, (hit, None, None, None))
            hits[hit.fact.fact_id] = (d_hit, d_rank, hit, rank)
        left_out: list[FactHit] = []
        for d_hit, d_rank, l_hit, l_rank in hits.values():
            fact = d_hit.fact
            history = fact.status not in VISIBLE
            if history and not (policy.include_history or (
                    past and fact.status == FactStatus.SUPERSEDED) or (
                    policy.include_archived and fact.status == FactStatus.ARCHIVED)):
                left_out.append(d_hit)
                continue
            vector = unit_vector(d_hit.vector)
            dense_score = d_hit.score if d_rank is not None else _dot(vector, query_vector)
            key = f"fact:{fact.fact_id}"
            pool[key] = PoolEntry(
                Signals(
                    key=key, source="fact", session_id=fact.session_id, dense=dense_score,
                    dense_rank=d_rank, lexical_raw=l_hit.score if l_hit else None,
                    lexical_rank=l_rank, kind=fact.kind.value, confidence=fact.confidence,
                    conflicted=fact.status == FactStatus.CONFLICTED, history=history,
                ),
                vector, fact=fact,
            )
        return left_out

    def _add_recent(
        self, pool: dict[str, PoolEntry], recent: list[Turn], query: Vector,
        access: Scope | None = None, stored: dict[str, TurnHit] | None = None,
    ) -> None:
        """The newest turns compete too, embedded or not (recallable before embedding).
        `stored`: their points, read before (else read here)."""
        missing = [t for t in recent if f"turn:{t.session_id}:{t.turn_id}" not in pool]
        if not missing:
            return
        if stored is not None:
            found = {t.turn_id: stored[t.turn_id] for t in missing if t.turn_id in stored}
        else:
            found = {
                h.turn_id: h for h in self.vectors.get_turns(
                    _named(access, missing[0].session_id), [t.turn_id for t in missing],
                    access,
                )
            }
        queued = [t for t in missing if t.turn_id not in found]
        # Turns still in the queue are embedded here, so they compete on similarity too.
        queued_vectors = self.embedder.embed_documents([t.content for t in queued])
        vectors = {t.turn_id: queued_vectors[i] for i, t in enumerate(queued)}
        for turn in missing:
            hit = found.get(turn.turn_id)
            vector = unit_vector(hit.vector) if hit else vectors[turn.turn_id]
            key = f"turn:{turn.session_id}:{turn.turn_id}"
            pool[key] = PoolEntry(
                Signals(key=key, source="turn", session_id=turn.session_id, seq=turn.seq,
                        markers=hit.markers if hit else turn.markers,
                        dense=_dot(vector, query)),
                vector, hit=hit, queued=None if hit else turn,
            )

    def _add_successors(
        self, pool: dict[str, PoolEntry], replaced: Mapping[str, tuple[str, ...]],
        query: Vector, access: Scope | None = None,
    ) -> None:
        """The turns that replaced a candidate, when no search found them (at most
        `_SUCCESSORS` per session): a stale statement competes beside its successor."""
        wanted: dict[str, set[str]] = {}
        for key, entry in list(pool.items()):
            session = entry.signals.session_id
            prefix = f"turn:{session}:"
            for successor in find(replaced, key) or ():
                if successor not in pool and successor.startswith(prefix):
                    wanted.setdefault(session, set()).add(successor[len(prefix):])
        for session, turn_ids in wanted.items():
            for hit in self.vectors.get_turns(_named(access, session),
                                              sorted(turn_ids)[-_SUCCESSORS:], access):
                key = f"turn:{session}:{hit.turn_id}"
                if key in pool:
                    continue
                vector = unit_vector(hit.vector)
                pool[key] = PoolEntry(
                    Signals(key=key, source="turn", session_id=session, seq=hit.seq,
                            markers=hit.markers, dense=_dot(vector, query)),
                    vector, hit=hit,
                )

    def _add_neighbours(
        self, pool: dict[str, PoolEntry], query: Vector, policy: RecallPolicy,
        access: Scope | None = None,
    ) -> None:
        """The turns right before and after the best turn hits."""
        lexical_max = max((e.signals.lexical_raw or 0.0 for e in pool.values()), default=0.0)
        turns = [e for e in pool.values() if e.is_turn]
        turns.sort(key=lambda e: relevance(e.signals, lexical_max, policy)[1], reverse=True)
        have = {(e.signals.session_id, e.signals.seq) for e in turns}
        wanted: dict[str, set[int]] = {}
        for entry in turns[: policy.neighbours]:
            sig = entry.signals
            assert sig.seq is not None
            for seq in (sig.seq - 1, sig.seq + 1):
                if seq >= 1 and (sig.session_id, seq) not in have:
                    wanted.setdefault(sig.session_id, set()).add(seq)
        # Their window similarities from the window vectors they come with (~10 us a
        # turn) rather than a second exact query to the engine (~0.6 ms at 10k points).
        windows = self._weighs_windows(policy)
        for session, seqs in wanted.items():
            for hit in self.vectors.turns_by_seq(_named(access, session), sorted(seqs), access,
                                                 with_windows=windows):
                key = f"turn:{session}:{hit.turn_id}"
                if key in pool:
                    continue
                # The window first: it reads both vectors out of the engine at once.
                window = hit.window_score(query) if windows else None
                vector = unit_vector(hit.vector)
                pool[key] = PoolEntry(
                    Signals(key=key, source="turn", session_id=session, seq=hit.seq,
                            markers=hit.markers, dense=_dot(vector, query), window=window),
                    vector, hit=hit, window_asked=windows,
                )


def _agents(pool: dict[str, PoolEntry]) -> set[str]:
    """The candidates' speakers, lower case."""
    return {a.lower() for e in pool.values() if (a := e.agent_id)}


def _read_vectors_while(hits: list[TurnHit], embedded: threading.Event) -> None:
    """Until the query is embedded (ONNX releases the GIL), read the vectors of the BM25
    hits: most become candidates, and this thread would only wait."""
    for hit in hits:
        if embedded.is_set():
            return
        _ = hit.vector


def _read_as_of_now(
    pool: dict[str, PoolEntry], replaced: Mapping[str, tuple[str, ...]],
    gone: GoneValues | None, session_id: str,
) -> Mapping[str, tuple[str, ...]]:
    """For a question about now: `replaced` plus the candidates that carry only a value the
    session moved on from, and those a later answer to the question replaced."""
    if gone is not None:
        replaced = _with_gone_values(pool, replaced, gone, session_id)
    return _with_newer_answers(pool, replaced, session_id)


def _with_gone_values(
    pool: dict[str, PoolEntry], replaced: Mapping[str, tuple[str, ...]], values: GoneValues,
    session_id: str,
) -> Mapping[str, tuple[str, ...]]:
    """`replaced` plus the asking session's candidates that carry a value the session moved
    on from without its successor (a turn or fact no rule marked: the config line, the
    reminder, the reflected sentence): each is replaced by the turn that moved on. Read off
    the text alone, with no successor to tell which of its values the change was about, so
    history as a whole (the slot table's entries say which values went)."""
    extra: dict[str, tuple[str, ...]] = {}
    for key, entry in pool.items():
        if entry.signals.session_id != session_id or key in replaced:
            continue
        moved = values.stale(entry.text)
        if moved is not None:
            successor = f"turn:{session_id}:{moved}"
            if successor != key:
                extra[key] = (successor,)
    return _Over(extra, replaced) if extra else replaced


def _with_newer_answers(
    pool: dict[str, PoolEntry], replaced: Mapping[str, tuple[str, ...]], session_id: str,
) -> Mapping[str, tuple[str, ...]]:
    """`replaced` plus the asking session's turns that a later turn answering the same
    question replaced (`newer_answers`: on one thing, a value of the same kind in place of
    one they say), whatever words the change was said in."""
    keys: list[str] = []
    answers: list[Answer] = []
    for key, e in pool.items():
        if e.is_turn and e.vector is not None and e.signals.session_id == session_id \
                and e.signals.seq is not None:
            keys.append(key)
            answers.append(Answer(e.signals.seq, e.text, e.vector, e.signals.dense))
    # (`replaced` may be a lazy view over every fact: asked only of the few found.)
    newer: dict[str, tuple[str, ...]] = {
        keys[old]: (keys[new],) for old, new in newer_answers(answers).items()
        if keys[old] not in replaced}
    return _Over(newer, replaced) if newer else replaced


def _whole_or_asked(
    pool: dict[str, PoolEntry], replaced: Mapping[str, tuple[str, ...]],
    parts_of: Callable[[str], ValueParts | None], question: Question,
) -> Mapping[str, tuple[str, ...]]:
    """`replaced` without the candidates the slot table made history only in part (some
    of their values are still current) when `question` is not about a gone value: for it,
    they state what holds now."""
    # The parts first: kept per table view, None for nearly every candidate.
    current = {key for key in pool if (parts := parts_of(key)) is not None
               and not parts.asked_by(question) and key in replaced}
    return _Except(replaced, current) if current else replaced


class _Memo(Lookup[tuple[str, ...]]):
    """`below` read per key once, the answer kept for the recall: recall asks of each
    candidate up to four times (as of now, in part, successors, the score), and `below`
    is a stack of lazy views (the slot table over the facts)."""

    def __init__(self, below: Mapping[str, tuple[str, ...]]) -> None:
        self.below = below
        self._got: dict[str, tuple[str, ...] | None] = {}

    def find(self, key: str) -> tuple[str, ...] | None:
        got = self._got
        if key in got:
            return got[key]
        value = got[key] = find(self.below, key)
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self.below)

    def __len__(self) -> int:
        return len(self.below)


class _Except(Lookup[tuple[str, ...]]):
    """`below` without `left` (`below` may be a lazy view over every fact: never copied)."""

    def __init__(self, below: Mapping[str, tuple[str, ...]], left: set[str]) -> None:
        self.below, self.left = below, left

    def find(self, key: str) -> tuple[str, ...] | None:
        return None if key in self.left else find(self.below, key)

    def __iter__(self) -> Iterator[str]:
        return (k for k in self.below if k not in self.left)

    def __len__(self) -> int:
        return sum(1 for _ in self)


class _Over(Lookup[tuple[str, ...]]):
    """`top` read before `below` (`below` may be a lazy view over every fact: never copied)."""

    def __init__(self, top: dict[str, tuple[str, ...]],
                 below: Mapping[str, tuple[str, ...]]) -> None:
        self.top, self.below = top, below

    def find(self, key: str) -> tuple[str, ...] | None:
        got = self.top.get(key)
        return got if got is not None else find(self.below, key)

    def __iter__(self) -> Iterator[str]:
        yield from self.top
        yield from (k for k in self.below if k not in self.top)

    def __len__(self) -> int:
        return sum(1 for _ in self)


# Times the room stale statements leave is filled again (each fill may bring in more).
_REFILLS = 3


def _select_current(
    candidates: list[Candidate], budget: int, policy: RecallPolicy, *, keep_history: bool,
    only_current: bool = False,
) -> tuple[list[Candidate], list[Excluded]]:
    """`select`, then (unless history is wanted) leave out every stale statement whose
    successor made it into the context, and fill the room it leaves. `only_current` (a
    question about what holds now): a stale statement whose successor competed but did not
    fit is left out too, never handed over alone."""
    left_out: list[Excluded] = []
    pool = list(candidates)
    # (Read only to leave stale statements out: not when history is kept.)
    told_by = {} if keep_history else _statements_told_by(pool)
    # Every round selects from (part of) the same pool: its texts and cosines read once.
    resemblance = Resemblance(pool, policy.dedup_threshold)
    for _round in range(_REFILLS + 1):
        chosen, excluded = select(
            pool,
            budget=budget,
            min_score=policy.min_score,
            dedup_threshold=policy.dedup_threshold,
            quotas=policy.quotas,
            limit=policy.limit,
            resemblance=resemblance,
        )
        if keep_history:
            return chosen, excluded
        replaced = _replaced_in(chosen, {c.key for c in pool}, only_current, told_by)
        if not replaced:
            return chosen, excluded + left_out
        left_out += [Excluded(c, "superseded", replaced[c.key])
                     for c in pool if c.key in replaced]
        pool = [c for c in pool if c.key not in replaced]
    # The room the last round freed is not filled again, but what it left out stays out:
    # a refill can bring in further stale statements (a long session's old turns on one
    # thing), and the last one's were handed over beside their successors.
    return [c for c in chosen if c.key not in replaced], excluded + left_out


def _statements_told_by(pool: list[Candidate]) -> dict[str, frozenset[str]]:
    """Turn key -> the keys of the current facts among `pool` read off that turn. Once the
    session is reflected, what replaced a statement often reaches the context as a fact of
    its turn, not the turn (a fact restating its turn stands for it, dedup keeps one of
    the two): the successor is there all the same."""
    told: dict[str, set[str]] = {}
    for c in pool:
        entry = _entry(c)
        fact = entry.fact
        if fact is None or entry.signals.history:
            continue
        for turn_id in fact.source_turn_ids:
            told.setdefault(turn_key(fact.session_id, turn_id), set()).add(c.key)
    return {k: frozenset(v) for k, v in told.items()}


def _replaced_in(chosen: list[Candidate], competing: set[str],
                 only_current: bool,
                 told_by: Mapping[str, frozenset[str]] | None = None) -> dict[str, str]:
    """The stale statements of `chosen` to leave out (key -> why): those whose successor
    is in the context too, and, for a question about what holds now (`only_current`),
    those whose successor competed (in `competing`) but did not fit. A successor turn is
    there, or competes, also as a fact read off it (`told_by`, `_statements_told_by`)."""
    keys = {c.key for c in chosen}
    told_by = told_by or {}

    def found(successors: tuple[str, ...], among: set[str], own: str) -> str | None:
        for k in successors:
            told = told_by.get(k, frozenset())
            if own in told:  # itself read off that turn: it says what replaced it
                return None
            if k in among:
                return k
            fact = next((f for f in sorted(told) if f in among), None)
            if fact is not None:
                return fact
        return None

    replaced: dict[str, str] = {}
    for c in chosen:
        successors = _entry(c).signals.successors
        beside = found(successors, keys, c.key)
        if beside is not None:
            replaced[c.key] = f"replaced by {beside}"
        elif only_current and (waiting := found(successors, competing, c.key)):
            # Never the stale value alone: its successor did not fit, so neither does it.
            replaced[c.key] = f"replaced by {waiting} (left out)"
    return replaced


def _entry(candidate: Candidate) -> PoolEntry:
    entry = candidate.payload["entry"]
    assert isinstance(entry, PoolEntry)
    return entry


def _newer_first(pool: dict[str, PoolEntry], scores: ScoreTable, session_id: str,
                 intent: QueryIntent) -> None:
    """A question about what holds now of a thing (`QueryIntent.asks_state`): the asking
    session's later statement on it ranks above an earlier one
    (`hivemem.domain.recall.newer_first`); history stays below. (For any question about now,
    LoCoMo's R@5 went 0.711 -> 0.692.)"""
    if not intent.asks_state:
        return
    statements = [
        Statement(key, scores.final_of(key), entry.signals.seq, entry.text, entry.vector)
        for key, entry in pool.items()
        if entry.is_turn and entry.vector is not None and entry.signals.seq is not None
        and entry.signals.session_id == session_id
        and not (entry.signals.stale or entry.signals.history)]
    for key, final in newer_first(statements).items():
        scores.rescore(key, final)


def _facts_stand_for_their_turns(
    pool: dict[str, PoolEntry], scores: ScoreTable, policy: RecallPolicy
) -> dict[str, str]:
    """A fact that restates a turn it came from (near-duplicate text) ranks at least as high
    as that turn, so dedup keeps the fact (it carries status, kind and validity) and the
    turn is dropped as its duplicate. Returns the turns that a fact restates less closely
    than `dedup_threshold` but at least `restates_threshold` (turn key -> fact key): the
    same statement twice, so only the fact competes."""
    threshold = min(policy.dedup_threshold, policy.restates_threshold)
    restated: dict[str, str] = {}
    facts = [(key, entry.fact, entry.vector) for key, entry in pool.items()
             if entry.fact is not None and not entry.signals.history
             and entry.vector is not None]
    if not facts:  # (a session before its first reflection: no turn ids to look up)
        return restated
    turns = {e.turn_id: key for key, e in pool.items() if e.is_turn}
    for key, fact, vector in facts:
        best = scores.final_of(key)
        for turn_id in fact.source_turn_ids:
            turn_key = turns.get(turn_id)
            if turn_key is None or pool[turn_key].signals.session_id != fact.session_id:
                continue
            turn_vector = pool[turn_key].vector
            similarity = -1.0 if turn_vector is None else float(turn_vector @ vector)
            if similarity >= threshold:
                best = max(best, scores.final_of(turn_key) + 1e-6)
                if similarity < policy.dedup_threshold:
                    restated.setdefault(turn_key, key)
        if best > scores.final_of(key):
            scores.restate(key, best)
    return restated


def _dot(vector: Vector | None, query: Vector) -> float:
    return 0.0 if vector is None else float(vector @ query)


def _statuses(policy: RecallPolicy) -> list[str]:
    """Fact statuses recall searches: archived ones only when asked for."""
    return [st.value for st in FactStatus
            if st != FactStatus.ARCHIVED or policy.include_archived]


def _named(access: Scope | None, session_id: str) -> SessionName:
    """The internal name of the asker's session `session_id` (no asker: as ``default``
    names it, which is also how a caller without a scope passes an internal name)."""
    return session_name(DEFAULT_NAMESPACE if access is None else access.namespace, session_id)
