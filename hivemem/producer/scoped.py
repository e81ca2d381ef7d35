"""`ScopedMemory`: one tenant's handle, bound to a `Scope` (namespace, agent) when it is made.

``memory.scoped(namespace="team-a", agent_id="planner")``. No method takes a namespace or an
agent: every read and write goes to the stores with the bound scope, and the stores filter
(Qdrant payload filters, Redis reads narrowed in the store). A session of another namespace
answers exactly like a missing one (`NotFound`), and another agent's private turns and facts
never come back. The HTTP API and MCP hold only these handles; what crosses scopes is on
`memory.admin`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from hivemem.config import AckLevel
from hivemem.domain.audit import AuditEvent
from hivemem.domain.episode import Episode
from hivemem.domain.fact import Fact
from hivemem.domain.forget import ForgetReceipt
from hivemem.domain.keyed import KeyedTurn
from hivemem.domain.models import RecallResult, Role, SessionStats, Turn
from hivemem.domain.recall.policy import RecallPolicy
from hivemem.domain.scope import Scope, scope_for
from hivemem.domain.session import RelatedSession, SessionContext, SessionInfo
from hivemem.domain.timeline import TimelineEvent, TimelinePage
from hivemem.errors import NotPermitted, ValidationError
from hivemem.service.core import Service
from hivemem.transfer.exporter import ExportSummary
from hivemem.transfer.stores import Progress


class ScopedMemory:
    """What one agent of one namespace may do (``agent_id=None``: the namespace's shared
    memory only; it writes shared turns with no author)."""

    def __init__(self, service: Service, scope: Scope, *, pinned: bool = False) -> None:
        if pinned and scope.agent_id is None:
            raise ValidationError("agent_id", "a handle pinned to its agent needs one")
        self._service = service
        self._scope = scope
        self._pinned = pinned

    @property
    def scope(self) -> Scope:
        return self._scope

    @property
    def pinned(self) -> bool:
        """True when the handle can act as its own agent only (an agent-bound API key)."""
        return self._pinned

    def pin(self) -> ScopedMemory:
        """This handle, unable to become another agent: `for_agent` of another agent then
        raises `NotPermitted` (what an agent-bound API key gets)."""
        return ScopedMemory(self._service, self._scope, pinned=True)

    def for_agent(self, agent_id: str | None) -> ScopedMemory:
        """The same namespace as another agent (or none): a handle never leaves its
        namespace, so an entry point can hand each caller's agent its own view. A pinned
        handle stays its agent: ``None`` or its own id give it back, another id is refused."""
        if self._pinned:
            if agent_id is None or agent_id == self._scope.agent_id:
                return self
            raise NotPermitted(
                "agent_id", f"this key acts as agent {self._scope.agent_id!r} only")
        return ScopedMemory(self._service, scope_for(self._scope.namespace, agent_id))

    # -- writes ----------------------------------------------------------------------------

    def ingest(
        self,
        session_id: str,
        role: str | Role,
        content: str,
        *,
        markers: Iterable[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        timestamp: datetime | None = None,
        turn_id: str | None = None,
        visibility: str = "shared",
        durable: bool | None = None,
        ack: AckLevel | None = None,
    ) -> Turn:
        """Remember one turn, written by the bound agent. `visibility`: ``"shared"`` with
        the namespace or ``"private"`` to the bound agent. A session of another namespace is
        refused (`NotFound`), nothing is written."""
        return self._service.turns.ingest(
            self._scope, session_id, role, content, markers=markers, metadata=metadata,
            timestamp=timestamp, turn_id=turn_id, visibility=visibility, durable=durable,
            ack=ack,
        )

    def ingest_many(
        self, turns: Iterable[Mapping[str, Any]], *, durable: bool | None = None,
        validate_only: bool = False, ack: AckLevel | None = None,
    ) -> list[Turn]:
        """Validate every turn first (nothing is written if one is bad, or names a session
        of another namespace), then write them as the bound agent. A turn may not name a
        namespace, nor an agent other than the bound one. `validate_only`: check and write
        nothing (returns ``[]``)."""
        rows: list[tuple[Scope, Mapping[str, Any]]] = []
        for index, raw in enumerate(turns):
            if not isinstance(raw, Mapping):
                raise ValidationError(f"turns[{index}]", "must be a mapping of turn fields")
            if raw.get("namespace") not in (None, self._scope.namespace):
                raise ValidationError(f"turns[{index}].namespace", "is the handle's")
            if raw.get("agent_id") not in (None, self._scope.agent_id):
                raise ValidationError(f"turns[{index}].agent_id", "is the handle's")
            unknown = set(raw) - _ROW_FIELDS
            if unknown:
                raise ValidationError(f"turns[{index}]", f"unknown fields {sorted(unknown)}")
            for required in ("session_id", "role", "content"):
                if required not in raw:
                    raise ValidationError(f"turns[{index}].{required}", "is required")
            rows.append((self._scope, raw))
        return self._service.turns.ingest_many(rows, durable=durable,
                                               validate_only=validate_only, ack=ack)

    def close_episode(self, session_id: str) -> int:
        """Close the session's open episode after the turns ingested so far."""
        return self._service.turns.close_episode(self._scope, session_id)

    def close_session(self, session_id: str) -> int:
        """The session is over: its open episode closes, whatever its size."""
        return self._service.turns.close_session(self._scope, session_id)

    def set_session_info(self, session_id: str, *, title: str | None = None) -> SessionInfo:
        """Name the session (and, with a bound agent, record it as the session's agent)."""
        return self._service.sessions.set_info(self._scope, session_id, title=title)

    def forget(
        self, session_id: str, *, turn_ids: Sequence[str] | None = None,
        fact_ids: Sequence[str] | None = None,
    ) -> ForgetReceipt:
        """Remove the session (neither ids given), or these turns and facts of it, from every
        store and, within a bounded time, from the store's files (docs/forget.md). A
        handle pinned to its agent (an agent key) forgets only what that agent wrote."""
        return self._service.forget.forget(
            self._scope, session_id, turn_ids=turn_ids, fact_ids=fact_ids,
            agent_id=self._scope.agent_id if self._pinned else None)

    def forget_fact(self, fact_id: str) -> ForgetReceipt:
        """Forget one fact (and every version of it), by its id alone."""
        session_id = self._service.forget.session_of_fact(self._scope, fact_id)
        return self.forget(session_id, fact_ids=[fact_id])

    def forget_agent(self, agent_id: str | None = None) -> ForgetReceipt:
        """Forget what `agent_id` (default: the handle's agent) wrote in every session of the
        namespace. A pinned handle forgets its own agent's only."""
        agent = agent_id if agent_id is not None else self._scope.agent_id
        if agent is None:
            raise ValidationError("agent_id", "name the agent whose data to forget")
        if self._pinned and agent != self._scope.agent_id:
            raise NotPermitted("agent_id", f"this key acts as agent {self._scope.agent_id!r}"
                               " only")
        return self._service.forget.forget_agent(self._scope, self._scope.namespace, agent)

    # -- reads -----------------------------------------------------------------------------

    def recall(
        self,
        session_id: str,
        query: str,
        token_budget: int | None = None,
        *,
        preset: str | RecallPolicy | None = None,
        limit: int | None = None,
        include_history: bool = False,
        include_archived: bool = False,
        explain: bool = False,
        related_sessions: Sequence[str] = (),
    ) -> RecallResult:
        """The context that matters for `query` (see `MemoryClient.recall`): the bound
        agent's memories plus the namespace's shared ones. Every session named, related
        ones too, must be this namespace's (else `NotFound`)."""
        return self._service.reads.recall(
            self._scope, session_id, query, token_budget, preset=preset, limit=limit,
            include_history=include_history, include_archived=include_archived,
            explain=explain, related_sessions=related_sessions,
        )

    def facts(
        self, session_id: str, *, include_history: bool = False,
        include_inactive: bool = False, include_archived: bool = False,
    ) -> list[Fact]:
        """The session's facts this scope may see (current ones; with history, every
        version), oldest first."""
        return self._service.reads.facts(
            self._scope, session_id, include_history=include_history,
            include_inactive=include_inactive, include_archived=include_archived)

    def episodes(self, session_id: str) -> list[Episode]:
        """The session's closed episodes this scope may see, oldest first."""
        return self._service.turns.episodes(self._scope, session_id)

    def get_session_stats(self, session_id: str) -> SessionStats:
        """Turns, episodes, open-episode turns, markers, and each stage's backlog. The marker
        counts are of the turns this scope may see (another agent's private custom marker
        would name what it is about); the pipeline counts are the session's."""
        return self._service.turns.stats(self._scope, session_id)

    def wait_until_processed(
        self, session_id: str, timeout: float = 30.0, *, stage: str = "embed"
    ) -> SessionStats:
        """Block until every turn enqueued so far for the session is recallable."""
        return self._service.turns.wait_until_processed(self._scope, session_id, timeout,
                                                        stage=stage)

    def wait_until_reflected(self, session_id: str, timeout: float = 30.0) -> int:
        """Block until every episode closed so far is reflected; returns the last index."""
        return self._service.turns.wait_until_reflected(self._scope, session_id, timeout)

    def sessions(self) -> list[str]:
        """This namespace's sessions."""
        return self._service.sessions.session_ids(self._scope)

    def traces(self, count: int = 20, session_id: str | None = None) -> list[dict[str, Any]]:
        """The newest reflection traces of episodes this scope may see (secrets redacted),
        of one session or of the namespace's."""
        return self._service.sessions.traces(self._scope, count, session_id)

    def timeline(
        self, session_id: str, *, kinds: Sequence[str] | None = None,
        limit: int | None = None,
    ) -> list[TimelineEvent]:
        """Turns, episode closes and fact changes this scope may see, by time then
        sequence (`limit`: only the newest that many)."""
        return self._service.sessions.timeline(self._scope, [session_id], kinds=kinds,
                                               limit=limit)

    def latest(
        self, session_id: str, by: str, keys: Sequence[str] | None = None, *,
        with_turns: bool = True,
    ) -> dict[str, KeyedTurn]:
        """Each key's current value this scope may see: the newest turn whose
        ``metadata[by]`` is that key (one with ``"deleted": true`` in its metadata ends
        the key), only `keys` when given. Read through the session's key index, not its
        every turn. Reads stored turns, as `timeline` does (`wait_until_processed` first
        to read your own writes)."""
        return self._service.keyed.latest(self._scope, session_id, by, keys,
                                          with_turns=with_turns)

    def recall_latest(
        self, session_id: str, query: str, by: str, token_budget: int | None = None, *,
        keys_of: Callable[[RecallResult], Iterable[str]] | None = None,
        preset: str | RecallPolicy | None = None,
    ) -> tuple[RecallResult, dict[str, KeyedTurn]]:
        """`recall` and then `latest(session_id, by, keys, with_turns=False)` in one call,
        the keys being ``keys_of(result)`` (None: every key of the index): e.g. to keep
        only the recalled turns that are still their key's current value. The session is
        checked against the scope once, not once per read (a framework adapter's search
        is both reads: the check is a Redis round trip). Both answers are filtered by the
        scope as `recall`'s and `latest`'s are."""
        return self._service.keyed.recall_latest(
            self._scope, session_id, query, by, token_budget, keys_of=keys_of, preset=preset)

    def timeline_page(
        self, session_id: str, *, kinds: Sequence[str] | None = None, limit: int = 100,
        cursor: str | None = None,
    ) -> TimelinePage:
        """The `limit` newest events this scope may see older than `cursor` (the
        `next_cursor` of the page before; none: the newest), oldest first. Reads only what
        the page shows, however long the session is."""
        return self._service.sessions.timeline_page(self._scope, [session_id], kinds=kinds,
                                                    limit=limit, cursor=cursor)

    def audit(self, fact_id: str) -> list[AuditEvent]:
        """Why a fact has its status (events about it and naming it, oldest first). A fact
        this scope may not see is `NotFound`, like one that does not exist."""
        return self._service.sessions.fact_audit(self._scope, fact_id)

    def session_info(self, session_id: str) -> SessionInfo:
        """Title, agent, created, last active, and how much the session holds."""
        return self._service.sessions.info(self._scope, session_id)

    def related_sessions(
        self, session_id: str, *, limit: int = 5, min_score: float = 0.05,
    ) -> list[RelatedSession]:
        """This namespace's other sessions about the same things."""
        return self._service.sessions.related(self._scope, session_id, limit=limit,
                                              min_score=min_score)

    def session_context(
        self, session_id: str, query: str, token_budget: int | None = None, *,
        related: int = 0, preset: str | RecallPolicy | None = None,
    ) -> SessionContext:
        """The session's header and recall for `query` over it and, with `related=n`, over
        its n most related sessions of the namespace too."""
        return self._service.sessions.context(self._scope, session_id, query, token_budget,
                                              related=related, preset=preset)

    def export(
        self, path: str | Path, session_ids: Sequence[str] | None = None, *,
        vectors: bool = False, progress: Progress | None = None,
    ) -> ExportSummary:
        """Write this namespace's sessions (default: all of them), as this scope sees them,
        to a versioned JSON Lines file (.gz: compressed)."""
        return self._service.transfer.export(self._scope, path, session_ids, vectors=vectors,
                                             progress=progress)


_ROW_FIELDS = frozenset({"session_id", "role", "content", "agent_id", "markers", "metadata",
                         "timestamp", "turn_id", "namespace", "visibility"})
