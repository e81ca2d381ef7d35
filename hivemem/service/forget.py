"""Forgetting: a session, some of its turns or facts, an agent's data in a namespace, or a
namespace, removed from every copy (`hivemem.store.erasure` for Redis, the vector store's
points, rq's jobs), then off disk (the AOF rewritten, the engine's collections rebuilt).

A forget is written down before it starts (`ErasureStore.begin`) and struck off when done,
so a process that dies mid-way leaves it to the next one that starts (`resume`); every step
is idempotent, so running it again is harmless. It erases twice: the second pass, once the
turns in flight when it began are acked, catches what an embed worker or a reflection
wrote meanwhile (a reflection of the session waits for the forget: the forget holds the
session's reflect lock while it erases). The wait for the turns in flight is bounded, so a
forget of whole sessions first writes each one's forget mark (`ErasureStore.mark_forgotten`):
a worker that still holds some of their turns after the second pass writes nothing of them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog

from hivemem.domain.fact import Fact
from hivemem.domain.forget import (
    DiskErasure,
    ForgetReceipt,
    ForgetRequest,
    add_counts,
    erased_words,
    linked,
    quotes,
    redact,
    redacted_fact,
    versions_of,
)
from hivemem.domain.ids import check_id
from hivemem.domain.models import Turn
from hivemem.domain.names import SessionName, session_name, split_session_name
from hivemem.domain.scope import (
    DEFAULT_NAMESPACE,
    Access,
    OperatorScope,
    Scope,
    check_namespace,
    store_scope,
)
from hivemem.errors import NotFound, NotPermitted, ValidationError
from hivemem.providers.lexical import LexicalEncoder
from hivemem.service.access import SessionAccess
from hivemem.service.parts import Parts
from hivemem.service.reads import Reads
from hivemem.store.erasure import EntryMatch, StreamStage
from hivemem.store.vectors.base import FACTS, TURNS, VectorStore, session_where

log = structlog.get_logger(__name__)

_MAX_IDS = 10_000


def _ids(field: str, values: Sequence[str] | None) -> tuple[str, ...]:
    if values is None:
        return ()
    if isinstance(values, str):
        raise ValidationError(field, "must be a list of ids, not one string")
    if len(values) > _MAX_IDS:
        raise ValidationError(field, f"at most {_MAX_IDS} ids")
    return tuple(dict.fromkeys(check_id(field, v) for v in values))


def _who(access: Access) -> str:
    if isinstance(access, OperatorScope):
        return "operator"
    if access.agent_id is not None:
        return f"agent:{access.namespace}/{access.agent_id}"
    return f"namespace:{access.namespace}"


class Forgetting:
    """The forget operations; each takes who asks."""

    def __init__(self, parts: Parts, access: SessionAccess, reads: Reads) -> None:
        self.parts = parts
        self.access = access
        self.reads = reads
        self._lexical: LexicalEncoder | None = None

    # -- what callers ask ------------------------------------------------------------------

    def forget(
        self, access: Access, session_id: str, *, turn_ids: Sequence[str] | None = None,
        fact_ids: Sequence[str] | None = None, agent_id: str | None = None,
    ) -> ForgetReceipt:
        """Forget a session (neither ids given), or these turns and facts of it.
        `agent_id`: only what that agent wrote (an agent key's forget): a session's other
        turns stay, and naming a turn or fact another agent wrote is `NotPermitted`. A
        session `access` may not act on, or an id it does not hold, is `NotFound`; nothing
        is removed unless every id is found."""
        turns = _ids("turn_ids", turn_ids)
        facts = _ids("fact_ids", fact_ids)
        if agent_id is not None:
            check_id("agent_id", agent_id)
        name = self.access.require(access, session_id)
        scope = store_scope(access)
        vectors = self.reads.vectors()
        if turns:
            self._check_turns(name, turns, scope, agent_id)
        if facts:
            self._check_facts(vectors, name, facts, scope, agent_id)
        now = datetime.now(UTC)
        # The request names the session by (namespace, id): see `_sessions_of`.
        namespace, bare = split_session_name(name)
        if turns or facts:
            request = ForgetRequest(
                target="turns" if turns and not facts else "facts" if not turns else "turns",
                session_id=bare, namespace=namespace, turn_ids=turns, fact_ids=facts,
                agent_id=agent_id, requested_by=_who(access), requested_at=now)
        else:
            request = ForgetRequest(target="session", session_id=bare, namespace=namespace,
                                    agent_id=agent_id, requested_by=_who(access),
                                    requested_at=now)
        return self.run(request)

    def session_of_fact(self, access: Access, fact_id: str) -> str:
        """The session a fact `access` may see belongs to (else `NotFound`)."""
        check_id("fact_id", fact_id)
        hits = self.reads.vectors().get_facts([fact_id], store_scope(access))
        if not hits:
            raise NotFound("fact_id", f"no fact {fact_id!r}")
        fact = hits[0].fact
        # A scope names its sessions by id; the operator by internal name.
        return (fact.session_id if isinstance(access, Scope)
                else session_name(fact.namespace, fact.session_id))

    def forget_agent(self, access: Access, namespace: str, agent_id: str) -> ForgetReceipt:
        """Forget what `agent_id` wrote in every session of `namespace` (its turns, the
        facts it stated, and what was derived only from those). The operator, or a scope
        of that namespace (an agent's scope: its own agent only)."""
        namespace = check_namespace(namespace)
        check_id("agent_id", agent_id)
        if isinstance(access, Scope):
            if access.namespace != namespace:
                raise NotFound("namespace", f"unknown namespace {namespace!r}")
            if access.agent_id is not None and access.agent_id != agent_id:
                raise NotPermitted("agent_id", f"this key acts as agent {access.agent_id!r}"
                                   " only")
        return self.run(ForgetRequest(target="agent", namespace=namespace, agent_id=agent_id,
                                      requested_by=_who(access),
                                      requested_at=datetime.now(UTC)))

    def forget_namespace(self, _operator: OperatorScope, namespace: str) -> ForgetReceipt:
        """Forget every session of `namespace` (the operator only)."""
        namespace = check_namespace(namespace)
        if not self.parts.sessions.session_ids(namespace):
            raise NotFound("namespace", f"no sessions in namespace {namespace!r}")
        return self.run(ForgetRequest(target="namespace", namespace=namespace,
                                      requested_by="operator",
                                      requested_at=datetime.now(UTC)))

    def apply_retention(
        self, _operator: OperatorScope, now: datetime | None = None,
    ) -> list[ForgetReceipt]:
        """Forget, in each namespace whose retention is set (`lifecycle.retention_days`,
        `lifecycle.namespace_retention_days`), the turns and facts older than it (by their
        timestamps and creation times against `now`): one forget per namespace. A session
        left with no turns goes whole. Off (nothing done) by default."""
        settings = self.parts.settings.lifecycle
        if not settings.retains:
            return []
        now = now or datetime.now(UTC)
        namespaces = sorted({split_session_name(name)[0]
                             for name in self.parts.sessions.session_ids()})
        done = []
        for namespace in namespaces:
            days = settings.retention_for(namespace)
            if days <= 0:
                continue
            done.append(self.run(ForgetRequest(
                target="retention", namespace=namespace, before=now - timedelta(days=days),
                requested_by="retention", requested_at=now)))
        return done

    def pending(self, _operator: OperatorScope) -> list[ForgetRequest]:
        return self.parts.erasure.pending()

    def erasures(self, _operator: OperatorScope, count: int = 20) -> list[dict[str, Any]]:
        return self.parts.erasure.erasures(count)

    def resume(self, _operator: OperatorScope) -> list[ForgetReceipt]:
        """Finish every forget a process began and did not finish (run at start)."""
        done = []
        for request in self.parts.erasure.pending():
            log.info("forget.resumed", forget_id=request.forget_id, target=request.target)
            done.append(self.run(request))
        return done

    # -- checks before anything is written -------------------------------------------------

    def _known_turns(self, name: SessionName) -> dict[str, Turn]:
        """The session's turns the vectors do not hold yet (window, stream, dead letters)."""
        erasure = self.parts.erasure
        found = {t.turn_id: t for t in erasure.stream_turns(name)}
        found.update({t.turn_id: t for t in erasure.window_turns(name)})
        return found

    def _check_turns(self, name: SessionName, turn_ids: tuple[str, ...], scope: Scope | None,
                     agent_id: str | None) -> None:
        vectors = self.reads.vectors()
        found: dict[str, Turn] = {h.turn.turn_id: h.turn
                                  for h in vectors.get_turns(name, list(turn_ids))}
        if len(found) < len(turn_ids):
            found.update(self._known_turns(name))
        for tid in turn_ids:
            turn = found.get(tid)
            if turn is None or (scope is not None and not scope.admits(
                    turn.namespace, turn.visibility, turn.agent_id)):
                raise NotFound("turn_ids", f"no turn {tid!r} in session {name!r}")
            if agent_id is not None and turn.agent_id != agent_id:
                raise NotPermitted("turn_ids", f"turn {tid!r} is not agent {agent_id!r}'s")

    def _check_facts(self, vectors: VectorStore, name: SessionName, fact_ids: tuple[str, ...],
                     scope: Scope | None, agent_id: str | None) -> None:
        hits = {h.fact.fact_id: h.fact for h in vectors.get_facts(list(fact_ids), scope)}
        for fid in fact_ids:
            fact = hits.get(fid)
            if fact is None or session_name(fact.namespace, fact.session_id) != name:
                raise NotFound("fact_ids", f"no fact {fid!r} in session {name!r}")
            if agent_id is not None and fact.agent_id != agent_id:
                raise NotPermitted("fact_ids", f"fact {fid!r} is not agent {agent_id!r}'s")

    # -- running one -----------------------------------------------------------------------

    def run(self, request: ForgetRequest) -> ForgetReceipt:
        """Carry a forget out (written down first; struck off once done)."""
        parts = self.parts
        erasure = parts.erasure
        settings = parts.settings.lifecycle
        started = time.monotonic()
        started_at = datetime.now(UTC)
        erasure.begin(request)
        sessions = self._sessions_of(request)
        marks = {sid: erasure.last_entry_id(sid) for sid in sessions}
        if request.target in ("session", "namespace") and request.agent_id is None:
            # Before the first pass: a worker holding some of these sessions' turns (however
            # late it writes: killed and reclaimed, slowed down) writes nothing of them after
            # this, while turns ingested after it are processed as usual.
            for sid in sessions:
                erasure.mark_forgotten(sid, settings.forget_mark_ttl_s)
        removed: dict[str, dict[str, int]] = {}
        redacted = [0]
        for sid in sessions:
            self._erase(request, sid, removed, redacted)
        self.settle_between_passes(marks, settings.forget_settle_s,
                                   settings.forget_settle_timeout_s)
        for sid in sessions:  # the second pass: what was in flight during the first
            self._erase(request, sid, removed, redacted)
        self.reads.drop_caches()
        disk = self._off_disk(started)
        receipt = ForgetReceipt(
            forget_id=request.forget_id, target=request.target,
            session_ids=[split_session_name(n)[1] for n in sessions],
            removed=removed, redacted_facts=redacted[0], started_at=started_at,
            finished_at=datetime.now(UTC), disk=disk)
        erasure.finish(request, receipt)
        log.info("forget.done", forget_id=request.forget_id, target=request.target,
                 sessions=len(sessions), removed=receipt.total(),
                 ms=round((time.monotonic() - started) * 1000, 1))
        return receipt

    def _sessions_of(self, request: ForgetRequest) -> list[SessionName]:
        """The internal names of the sessions the request names (a request written before
        names existed names a session by its id alone: as ``default`` names it)."""
        namespace = request.namespace or DEFAULT_NAMESPACE
        if request.session_id is not None:
            return [session_name(namespace, request.session_id)]
        return [session_name(namespace, sid)
                for sid in self.parts.sessions.session_ids(request.namespace)]

    def settle_between_passes(self, marks: dict[SessionName, str], least_s: float,
                              most_s: float) -> None:
        """Wait until the turns that were on the sessions' turns stream when the forget
        began (`marks`: its tail then) have gone through both stages that hold them: the
        embed stage has acked them (each ack publishes the turns on the embedded stream in
        the same script), then the boundary stage (and the window stage, its second
        reader) has acked everything on the embedded stream up to its tail at that moment.
        A worker killed holding an entry never acks it, and a slow one may take longer:
        at most `most_s` in all. What a worker still holds after that is not written back
        for a whole session (its forget mark); for some turns, the second pass misses it."""
        time.sleep(least_s)
        deadline = time.monotonic() + most_s
        erasure = self.parts.erasure

        def drained(sid: SessionName, stage: StreamStage, mark: str) -> None:
            while (mark != "0-0" and erasure.pending_before(sid, stage, mark)
                   and time.monotonic() < deadline):
                time.sleep(0.05)

        for sid, mark in marks.items():
            drained(sid, "embed", mark)
            if mark != "0-0":
                tail = erasure.last_entry_id(sid, "boundary")
                drained(sid, "boundary", tail)
                drained(sid, "window", tail)

    def _off_disk(self, started: float) -> DiskErasure:
        settings = self.parts.settings.lifecycle
        vacuum = self.reads.vectors().vacuum() if settings.forget_vacuum else "none"
        rewritten = (self.parts.erasure.rewrite_aof(settings.forget_rewrite_timeout_s)
                     if settings.forget_rewrite_aof else False)
        done = datetime.now(UTC)
        return DiskErasure(
            redis_aof_rewritten=rewritten, vectors_compacted=vacuum == "done",
            vectors_vacuum="done" if vacuum == "done" else "server" if vacuum == "server"
            else "none", completed_at=done, seconds=round(time.monotonic() - started, 3))

    def _erase(self, request: ForgetRequest, name: SessionName,
               removed: dict[str, dict[str, int]], redacted: list[int]) -> None:
        # The forget's own token: a resumed forget takes over the lease its dead first run
        # left on the session instead of waiting it out.
        lock = self.parts.reflection.lock(
            name, self.parts.settings.reflection.lock_lease_ms,
            token=f"forget-{request.forget_id}")
        lock.acquire(max(self.parts.settings.reflection.lock_wait_s, 60.0))
        try:
            if request.target in ("session", "namespace") and request.agent_id is None:
                self._erase_session(name, removed)
                return
            if request.target == "retention" and request.before is not None:
                self._expire(name, request.before, removed, redacted)
                return
            if request.target in ("session", "agent"):
                agent = request.agent_id

                def by_agent(turn: Turn) -> bool:
                    return turn.agent_id == agent

                stated = [f.fact_id for f in self.reads.vectors().list_facts(name)
                          if f.agent_id == agent]
                self._erase_turns(name, by_agent, None, removed, redacted)
                if stated:
                    self._erase_facts(name, stated, removed, redacted)
                return
            if request.turn_ids:
                wanted = set(request.turn_ids)
                self._erase_turns(name, lambda t: t.turn_id in wanted, wanted,
                                  removed, redacted)
            if request.fact_ids:
                self._erase_facts(name, list(request.fact_ids), removed, redacted)
        finally:
            lock.release()

    def _expire(self, name: SessionName, before: datetime,
                removed: dict[str, dict[str, int]], redacted: list[int]) -> None:
        """Retention: the session's turns stamped before `before`, and its facts created
        before it (each on its own: a newer version stays); a session left without turns
        goes whole."""
        vectors = self.reads.vectors()

        def old(turn: Turn) -> bool:
            return turn.timestamp < before

        self._erase_turns(name, old, None, removed, redacted)
        stale = [f.fact_id for f in vectors.list_facts(name) if f.created_at < before]
        if stale:
            self._erase_facts(name, stale, removed, redacted, versions=False)
        if not vectors.count(TURNS, session_where(name)) and not self._known_turns(
                name):
            self._erase_session(name, removed)

    # -- a whole session -------------------------------------------------------------------

    def _erase_session(self, name: SessionName, removed: dict[str, dict[str, int]]) -> None:
        parts = self.parts
        vectors = self.reads.vectors()
        where = session_where(name)
        episodes = parts.sessions.episode_ids(name)
        turns = vectors.count(TURNS, where)
        facts = vectors.count(FACTS, where)
        if turns:
            vectors.delete(TURNS, where)
        if facts:
            vectors.delete(FACTS, where)
        add_counts(removed, "vectors", {"turns": turns, "facts": facts})
        streams = parts.erasure.erase_stream_entries(EntryMatch(name))
        traces = parts.erasure.erase_traces(name)
        audit = parts.audit.count(name)
        jobs = parts.jobs.forget_jobs(name,
                                      [parts.keys.dispatched(e) for e in episodes])
        keys = parts.sessions.purge(name)
        add_counts(removed, "redis", {**streams, "traces": traces, "audit_events": audit,
                                      "episodes": len(episodes), "keys": keys})
        add_counts(removed, "jobs", {"jobs": jobs})

    # -- some turns ------------------------------------------------------------------------

    def _erase_turns(
        self, name: SessionName, match: Callable[[Turn], bool], ids: set[str] | None,
        removed: dict[str, dict[str, int]], redacted: list[int],
    ) -> None:
        parts = self.parts
        vectors = self.reads.vectors()
        if ids is not None:
            stored = [h.turn for h in vectors.get_turns(name, sorted(ids))]
        else:
            stored = [t for t in vectors.iter_turns(name) if match(t)]
        gone: dict[str, Turn] = {t.turn_id: t for t in stored}
        pending = {tid: t for tid, t in self._known_turns(name).items() if match(t)}
        for tid, turn in pending.items():
            gone.setdefault(tid, turn)
        if not gone:
            return
        kept_texts = [t.content for t in parts.erasure.window_turns(name)
                      if t.turn_id not in gone]
        facts = vectors.list_facts(name)
        dropped, changed = self._facts_after_turns(vectors, name, facts, gone,
                                                   kept_texts)
        words = erased_words([t.content for t in gone.values()],
                             kept_texts + [f.content for f in changed])
        self._write_facts(vectors, name, dropped, changed)
        audit = self._rewrite_audit(name, set(dropped), words)
        point_ids = [t.turn_id for t in stored]
        if point_ids:
            vectors.delete(TURNS, {**session_where(name), "turn_id": point_ids})
        streams = parts.erasure.erase_stream_entries(EntryMatch(name, match))
        traces = parts.erasure.erase_traces(name, [*gone, *dropped])
        window = parts.erasure.erase_window_turns(name, gone.values())
        # The keeper's state quotes the session's recent statements: reset, not edited.
        slot_table = parts.slot_tables.reset(name)
        # The key index may name a forgotten turn: dropped (after the points are gone, so
        # that a reader that folded them before cannot write them back: a new epoch).
        parts.key_index.reset(name)
        add_counts(removed, "vectors", {"turns": len(point_ids), "facts": len(dropped)})
        add_counts(removed, "redis", {**streams, "traces": traces, "window_turns": window,
                                      "audit_events": audit, "slot_table": slot_table})
        redacted[0] += len(changed)

    def _facts_after_turns(
        self, vectors: VectorStore, name: SessionName, facts: list[Fact],
        gone: dict[str, Turn], kept_texts: list[str],
    ) -> tuple[list[str], list[Fact]]:
        """(the facts to delete: every source of theirs forgotten; the facts to rewrite:
        redacted when they also came from turns that stay, their ids of forgotten turns
        struck off)."""
        dropped: list[str] = []
        touched: list[Fact] = []
        for fact in facts:
            sources = set(fact.source_turn_ids)
            named = sources | set(fact.retracted_by) | set(fact.considered_in) | set(
                fact.mentioned_in)
            if not named & gone.keys():
                continue
            if sources and sources <= gone.keys():
                dropped.append(fact.fact_id)
            else:
                touched.append(fact)
        # What the kept facts may still say: the words of their remaining sources.
        other = sorted({s for f in touched for s in f.source_turn_ids if s not in gone})
        sources_text = [h.turn.content for h in vectors.get_turns(name, other)]
        words = erased_words([t.content for t in gone.values()], kept_texts + sources_text)
        changed: list[Fact] = []
        dead = set(dropped)
        for fact in [*touched, *(f for f in facts if f.fact_id not in dead
                                 and f not in touched and linked(f, dead))]:
            changed.append(redacted_fact(fact, gone.keys(), dead, words))
        return dropped, changed

    def _write_facts(self, vectors: VectorStore, name: SessionName, dropped: list[str],
                     changed: list[Fact]) -> None:
        if dropped:
            vectors.delete(FACTS, {**session_where(name), "fact_id": dropped})
        if changed:
            contents = [f.content for f in changed]
            embedded = self.parts.query_embedder.embed_documents(contents)
            if self._lexical is None:
                self._lexical = LexicalEncoder()
            vectors.upsert_facts(changed, embedded, self._lexical.documents(contents))

    def _rewrite_audit(self, name: SessionName, dropped: set[str], words: set[str]) -> int:
        def change(event: Any) -> Any:
            if event.fact_id in dropped:
                return None
            update: dict[str, Any] = {}
            if quotes(event.reason, words):
                update["reason"] = redact(event.reason, words)
            if dropped & set(event.related):
                update["related"] = [r for r in event.related if r not in dropped]
            return event.model_copy(update=update) if update else event

        gone, changed = self.parts.erasure.rewrite_audit(name, change)
        return gone + changed

    # -- some facts ------------------------------------------------------------------------

    def _erase_facts(self, name: SessionName, fact_ids: list[str],
                     removed: dict[str, dict[str, int]], redacted: list[int], *,
                     versions: bool = True) -> None:
        vectors = self.reads.vectors()
        facts = {f.fact_id: f for f in vectors.list_facts(name)}
        named = [f for f in fact_ids if f in facts]
        doomed = versions_of(facts, named) if versions else set(named)
        if not doomed:
            return
        kept = [f for fid, f in facts.items() if fid not in doomed]
        words = erased_words([facts[f].content for f in doomed],
                             [f.content for f in kept]
                             + [t.content for t in self.parts.erasure.window_turns(name)])
        changed = [redacted_fact(f, set(), doomed, words) for f in kept if linked(f, doomed)]
        self._write_facts(vectors, name, sorted(doomed), changed)
        audit = self._rewrite_audit(name, doomed, words)
        traces = self.parts.erasure.erase_traces(
            name, [*doomed, *(facts[f].content for f in doomed)])
        add_counts(removed, "vectors", {"facts": len(doomed)})
        add_counts(removed, "redis", {"traces": traces, "audit_events": audit})
        redacted[0] += len(changed)

