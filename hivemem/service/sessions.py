"""Sessions as a whole: their list, header, related sessions, timeline, reflection traces,
and one fact's audit trail.

Each operation takes who asks (`Access`): a `Scope` reads its namespace only and, of that,
what its agent may see (the stores filter); the `OperatorScope` reads everything.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from hivemem.domain.audit import AuditEvent
from hivemem.domain.fact import VISIBLE
from hivemem.domain.ids import check_id
from hivemem.domain.names import SessionName, session_name, split_session_name
from hivemem.domain.recall.policy import RecallPolicy
from hivemem.domain.scope import Access, Scope, store_scope
from hivemem.domain.session import (
    RelatedSession,
    SessionContext,
    SessionInfo,
    Vector,
    centroid,
    episode_centroid,
    parse_time,
    rank_related,
)
from hivemem.domain.timeline import (
    TimelineCursor,
    TimelineEvent,
    TimelinePage,
    merge_timeline,
    order,
)
from hivemem.errors import NotFound
from hivemem.service.access import SessionAccess
from hivemem.service.checks import check_kinds, check_limit, check_session_ids, check_title
from hivemem.service.parts import Parts
from hivemem.service.reads import Reads
from hivemem.service.timeline_reader import TimelineReader
from hivemem.store.trace_view import visible_traces
from hivemem.store.vectors.base import FACTS, TURNS, scoped, session_where


class Sessions:
    """Session-level reads and the session header's one write."""

    def __init__(self, parts: Parts, access: SessionAccess, reads: Reads) -> None:
        self.parts = parts
        self.access = access
        self.reads = reads

    def session_ids(self, access: Access) -> list[str]:
        """The sessions of the scope's namespace (the operator: of every namespace)."""
        scope = store_scope(access)
        return self.parts.sessions.session_ids(None if scope is None else scope.namespace)

    def set_info(
        self, access: Access, session_id: str, *, title: str | None = None,
        agent_id: str | None = None,
    ) -> SessionInfo:
        """Record a session's title and agent. A scope names its own sessions only, and
        with a bound agent records that agent; the operator may name a session that does
        not exist yet (it is created). `created_at` is set once, to when the session began."""
        if isinstance(access, Scope):
            name = self.access.require(access, session_id)
            agent_id = access.agent_id
        else:
            name = self.access.name(access, session_id)
        activity = self.parts.sessions.info(name)[1]
        fields: dict[str, str] = {}
        if title is not None:
            fields["title"] = check_title(title)
        if agent_id is not None:
            fields["agent_id"] = check_id("agent_id", agent_id)
        began = parse_time(activity.get("first_ts")) or datetime.now(UTC)
        self.parts.sessions.set_info(name, fields, began)
        return self.info(access, session_id)

    def info(self, access: Access, session_id: str) -> SessionInfo:
        """Title, agent, created, last active, and how much the session holds (facts: those
        `access` may see)."""
        name = self.access.require(access, session_id)
        parts = self.parts
        info, meta = parts.sessions.info(name)
        stats = parts.state.stats(name)
        closed = parts.episodes.progress(name)[1]
        active = self.reads.vectors().count(FACTS, {
            **session_where(name), "status": [s.value for s in VISIBLE],
            **scoped(store_scope(access))})
        return SessionInfo(
            session_id=session_id, title=info.get("title"), agent_id=info.get("agent_id"),
            created_at=parse_time(info.get("created_at")) or parse_time(meta.get("first_ts")),
            last_active=parse_time(meta.get("last_ts")), turns=stats.turns_enqueued,
            episodes=closed, facts_active=active,
        )

    def related(
        self, scope: Scope, session_id: str, *, limit: int = 5, min_score: float = 0.05,
    ) -> list[RelatedSession]:
        """The scope's namespace's other sessions about the same things: their centroids
        (the mean direction of their episodes, or turns) and the subjects their facts
        share, each seen through what the scope may read. Never another namespace's: what
        is found here can be recalled by the same scope."""
        self.access.require(scope, session_id)
        check_limit(limit)
        vectors = self.reads.vectors()
        candidates = self.parts.sessions.session_ids(scope.namespace)
        visible = [s.value for s in VISIBLE]
        centroids: dict[str, Vector | None] = {}
        subjects: dict[str, set[str]] = {}
        for sid in dict.fromkeys([session_id, *candidates]):
            name = session_name(scope.namespace, sid)
            found = episode_centroid(self.parts.episodes.episodes(name, scope=scope))
            if found is None:
                hits = itertools.islice(vectors.scroll(
                    TURNS, {**session_where(name), **scoped(scope)}, with_vectors=True), 256)
                found = centroid(h.vector for h in hits if h.vector is not None)
            centroids[sid] = found
            subjects[sid] = {f.subject for f in vectors.list_facts(name, visible, scope)
                             if f.subject}
        return rank_related(session_id, centroids, subjects, limit=limit, min_score=min_score)

    def context(
        self, scope: Scope, session_id: str, query: str, token_budget: int | None = None, *,
        related: int = 0, preset: str | RecallPolicy | None = None,
    ) -> SessionContext:
        """The session's header and recall for `query` over it and, with `related=n`, over
        its n most related sessions of the scope's namespace too."""
        info = self.info(scope, session_id)
        others = self.related(scope, session_id, limit=related) if related > 0 else []
        result = self.reads.recall(scope, session_id, query, token_budget, preset=preset,
                                   related_sessions=[r.session_id for r in others])
        return SessionContext(info=info, related=others, result=result)

    def timeline(
        self, access: Access, session_ids: Sequence[str] | str, *,
        kinds: Sequence[str] | None = None, limit: int | None = None,
    ) -> list[TimelineEvent]:
        """Turns, episode closes and fact changes of these sessions, by time then sequence
        (`limit`: only the newest that many, read as `timeline_page` reads them). For a
        scope, fact changes only of facts it may see, and turns and episodes only those it
        may see."""
        if limit:
            return self.timeline_page(access, session_ids, kinds=kinds, limit=limit).events
        names, chosen, scope = self._timeline_ask(access, session_ids, kinds)
        vectors = self.reads.vectors()
        events: list[TimelineEvent] = []
        for name in names:
            events.extend(merge_timeline(
                vectors.iter_turns(name, scope) if "turn" in chosen else (),
                self.parts.episodes.episodes(name, scope=scope) if "episode" in chosen else (),
                self._fact_events(name, scope) if "fact" in chosen else (), kinds=chosen))
        return order(events)

    def timeline_page(
        self, access: Access, session_ids: Sequence[str] | str, *,
        kinds: Sequence[str] | None = None, limit: int = 100, cursor: str | None = None,
    ) -> TimelinePage:
        """The `limit` newest events older than `cursor` (a page's `next_cursor`; none: the
        newest), oldest first. Reads only what the page shows: each session's turns a
        window of seqs at a time backwards from its last seq, its episodes and fact
        changes a page at a time from the newest (`TimelineReader`). A scope sees what
        `timeline` shows it."""
        names, chosen, scope = self._timeline_ask(access, session_ids, kinds)
        limit = check_limit(limit)
        after = None if cursor is None else TimelineCursor.decode(cursor)
        vectors = self.reads.vectors()
        reader = TimelineReader(vectors, self.parts.state, self.parts.episodes,
                                self.parts.audit, scope, limit)
        # The cursor keys each session's turn seq by its id as events carry it.
        streams = [reader.newest_first(
            name, chosen, None if after is None else after.key,
            None if after is None else after.turn_seqs.get(split_session_name(name)[1]))
            for name in names]
        merged = heapq.merge(*streams, key=TimelineEvent.sort_key, reverse=True)
        page = list(itertools.islice(merged, limit + 1))
        more = len(page) > limit
        page = page[:limit]
        next_cursor = None
        if more:
            seqs = dict(after.turn_seqs) if after is not None else {}
            for event in page:
                if event.kind == "turn":
                    # Older turns of that session are below the page's (rising timestamps).
                    seqs[event.session_id] = min(
                        event.seq - 1, seqs.get(event.session_id, event.seq - 1))
            next_cursor = TimelineCursor(key=page[-1].sort_key(), turn_seqs=seqs).encode()
        return TimelinePage(events=page[::-1], next_cursor=next_cursor)

    def _timeline_ask(
        self, access: Access, session_ids: Sequence[str] | str, kinds: Sequence[str] | None,
    ) -> tuple[list[SessionName], list[str], Scope | None]:
        ids = ([session_ids] if isinstance(session_ids, str) else list(session_ids))
        if isinstance(access, Scope) or not ids:
            check_session_ids(ids)  # the operator's names are checked by `require`
        chosen = check_kinds(kinds)
        names = [self.access.require(access, sid) for sid in ids]
        return list(dict.fromkeys(names)), list(chosen), store_scope(access)

    def _fact_events(self, name: SessionName, scope: Scope | None) -> Iterable[AuditEvent]:
        """The session's audit log (a scope: only events about facts it may see)."""
        if scope is None:
            return self.parts.audit.iter_events(name)
        seen = {f.fact_id for f in self.reads.vectors().list_facts(name, None, scope)}
        return self.parts.audit.visible_events(name, seen)

    def fact_audit(self, access: Access, fact_id: str) -> list[AuditEvent]:
        """Why a fact has its status: every event about it (and naming it), oldest first.
        A fact `access` may not see is `NotFound`, like one that does not exist."""
        check_id("fact_id", fact_id)
        scope = store_scope(access)
        vectors = self.reads.vectors()
        hits = vectors.get_facts([fact_id], scope)
        if not hits:
            raise NotFound("fact_id", f"no fact {fact_id!r}")
        fact = hits[0].fact
        name = session_name(fact.namespace, fact.session_id)
        log = self.parts.audit
        if scope is None:
            return log.for_fact(name, fact_id)
        seen = {f.fact_id for f in vectors.list_facts(name, None, scope)}
        return [e for e in log.visible_events(name, seen)
                if e.fact_id == fact_id or fact_id in e.related]

    def traces(
        self, access: Access, count: int = 20, session_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """The newest reflection traces (secrets redacted), of one session or of every
        session `access` may see; a scope sees only traces of episodes it may see."""
        name = None if session_id is None else self.access.require(access, session_id)
        scope = store_scope(access)
        found = self.parts.reflection.traces(count, name, scope=scope)
        if scope is None:
            return found
        return visible_traces(found, scope, self.reads.vectors())
