"""Session views that `Admin` (everything) and `ScopedMemory` (one scope) share: a session's
header, its related sessions, its timeline, one fact's audit trail.

Each takes a `Scope` or None (the operator's view) and hands it to the stores, which filter:
with a scope, nothing another namespace or another agent's private memory holds is read back.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from hivemem.domain.audit import AuditEvent
from hivemem.domain.fact import VISIBLE, Fact, FactStatus
from hivemem.domain.ids import check_id
from hivemem.domain.scope import Scope
from hivemem.domain.session import (
    RelatedSession,
    SessionInfo,
    Vector,
    centroid,
    episode_centroid,
    parse_time,
    rank_related,
)
from hivemem.domain.timeline import KINDS, TimelineEvent, merge_timeline, order
from hivemem.errors import NotFound, ValidationError
from hivemem.store.audit import AuditLog
from hivemem.store.sessions import SessionStore
from hivemem.store.vectors.base import FACTS, TURNS, scoped

if TYPE_CHECKING:
    from hivemem.producer.client import MemoryClient

_TITLE_MAX = 200


def set_session_info(
    client: MemoryClient, session_id: str, *, title: str | None, agent_id: str | None,
) -> None:
    """Record a session's title and agent (the ones given; a new session is created)."""
    fields: dict[str, str] = {}
    if title is not None:
        fields["title"] = check_title(title)
    if agent_id is not None:
        fields["agent_id"] = check_id("agent_id", agent_id)
    SessionStore(client._redis, client.keys).set_info(session_id, fields, datetime.now(UTC))


def check_title(title: object) -> str:
    if not isinstance(title, str) or not title.strip() or len(title) > _TITLE_MAX:
        raise ValidationError("title", f"must be 1-{_TITLE_MAX} characters")
    return title.strip()


def lifecycle_statuses(*, include_inactive: bool = False,
                       include_archived: bool = False) -> list[str]:
    """Fact statuses to list: current ones (active, conflicted), plus what was asked for."""
    statuses = [s.value for s in VISIBLE]
    if include_inactive:
        statuses.append(FactStatus.SUPERSEDED.value)
    if include_archived:
        statuses.append(FactStatus.ARCHIVED.value)
    return statuses


def facts(
    client: MemoryClient, session_id: str, scope: Scope | None, *, include_history: bool,
    include_inactive: bool, include_archived: bool,
) -> list[Fact]:
    """The session's facts `scope` may see (None: all), oldest first: current ones, plus
    what was asked for (`include_history`: every version and status)."""
    statuses = None if include_history else lifecycle_statuses(
        include_inactive=include_inactive, include_archived=include_archived)
    return client.vector_store().list_facts(session_id, statuses, scope)


def session_info(client: MemoryClient, session_id: str, scope: Scope | None) -> SessionInfo:
    """Title, agent, created, last active, and how much the session holds (facts: those the
    scope may see)."""
    info, meta = SessionStore(client._redis, client.keys).info(session_id)
    stats = client._state.stats(session_id)
    closed = client._episodes.progress(session_id)[1]
    active = client.vector_store().count(FACTS, {
        "session_id": session_id, "status": [s.value for s in VISIBLE], **scoped(scope)})
    return SessionInfo(
        session_id=session_id, title=info.get("title"), agent_id=info.get("agent_id"),
        created_at=parse_time(info.get("created_at")) or parse_time(meta.get("first_ts")),
        last_active=parse_time(meta.get("last_ts")), turns=stats.turns_enqueued,
        episodes=closed, facts_active=active,
    )


def related_sessions(
    client: MemoryClient, session_id: str, scope: Scope | None, *, limit: int,
    min_score: float,
) -> list[RelatedSession]:
    """Other sessions about the same things: their centroids (the mean direction of their
    episodes, or turns) and the subjects their facts share. With a scope, only sessions of
    its namespace compete, each seen through what the scope may read."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
        raise ValidationError("limit", "must be a positive integer")
    vectors = client.vector_store()
    candidates = SessionStore(client._redis, client.keys).session_ids(
        None if scope is None else scope.namespace)
    visible = [s.value for s in VISIBLE]
    centroids: dict[str, Vector | None] = {}
    subjects: dict[str, set[str]] = {}
    for sid in dict.fromkeys([session_id, *candidates]):
        found = episode_centroid(client._episodes.episodes(sid, scope=scope))
        if found is None:
            hits = itertools.islice(vectors.scroll(
                TURNS, {"session_id": sid, **scoped(scope)}, with_vectors=True), 256)
            found = centroid(h.vector for h in hits if h.vector is not None)
        centroids[sid] = found
        subjects[sid] = {f.subject for f in vectors.list_facts(sid, visible, scope)
                         if f.subject}
    return rank_related(session_id, centroids, subjects, limit=limit, min_score=min_score)


def check_related(related_sessions: Sequence[str]) -> list[str]:
    """Recall's `related_sessions`: a list of ids (a lone string is refused rather than read
    as its characters)."""
    if isinstance(related_sessions, str):
        raise ValidationError("related_sessions", "must be a list of session ids")
    return [check_id("related_sessions", other) for other in related_sessions]


def check_kinds(kinds: Sequence[str] | None) -> list[str]:
    chosen = list(kinds or KINDS)
    for kind in chosen:
        if kind not in KINDS:
            raise ValidationError("kinds", f"unknown kind {kind!r}; one of {list(KINDS)}")
    return chosen


def timeline(
    client: MemoryClient, session_ids: Sequence[str], scope: Scope | None, *,
    kinds: Sequence[str] | None, limit: int | None,
) -> list[TimelineEvent]:
    """Turns, episode closes and fact changes of these sessions, by time then sequence
    (`limit`: only the newest that many). With a scope, fact changes only of facts it may
    see, and turns and episodes only those it may see."""
    chosen = check_kinds(kinds)
    vectors = client.vector_store()
    audit = AuditLog(client._redis, client.keys)
    events: list[TimelineEvent] = []
    for sid in dict.fromkeys(session_ids):
        facts: Iterable[AuditEvent] = ()
        if "fact" in chosen:
            if scope is None:
                facts = audit.iter_events(sid)
            else:
                seen = {f.fact_id for f in vectors.list_facts(sid, None, scope)}
                facts = audit.visible_events(sid, seen)
        events.extend(merge_timeline(
            vectors.iter_turns(sid, scope) if "turn" in chosen else (),
            client._episodes.episodes(sid, scope=scope) if "episode" in chosen else (),
            facts, kinds=chosen))
    ordered = order(events)
    return ordered[-limit:] if limit else ordered


def fact_audit(client: MemoryClient, fact_id: str, scope: Scope | None) -> list[AuditEvent]:
    """Why a fact has its status: every event about it (and naming it), oldest first. A fact
    the scope may not see is `NotFound`, like one that does not exist."""
    hits = client.vector_store().get_facts([fact_id], scope)
    if not hits:
        raise NotFound("memory_id", f"no fact {fact_id!r}")
    fact = hits[0].fact
    log = AuditLog(client._redis, client.keys)
    if scope is None:
        return log.for_fact(fact.session_id, fact_id)
    seen = {f.fact_id for f in client.vector_store().list_facts(fact.session_id, None, scope)}
    return [e for e in log.visible_events(fact.session_id, seen)
            if e.fact_id == fact_id or fact_id in e.related]
