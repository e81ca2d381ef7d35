"""The routes the remote client (`hivemem.connect`) needs beyond the original ones: who the key
is, the namespace's sessions, a session's header, episodes, full facts, each key's latest
turn (the key index), related sessions and context, one fact's audit trail, long-poll waits,
and export.

Like every route they act through a `ScopedMemory` of the key's namespace, narrowed to the
agent the request names, and answer with the SDK's own models, so the remote client returns
exactly what the embedded one does.
"""

import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query
from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from starlette.concurrency import run_in_threadpool

from hivemem.api.routes import ERRORS, SessionId
from hivemem.api.schemas import ID_REGEX, Id, Preset, RecallOut
from hivemem.api.transfer_routes import build_transfer_router
from hivemem.domain.audit import AuditEvent
from hivemem.domain.episode import Episode
from hivemem.domain.fact import Fact
from hivemem.domain.keyed import KeyedTurn
from hivemem.domain.models import SessionStats
from hivemem.domain.session import RelatedSession, SessionInfo
from hivemem.errors import (
    NotPermitted,
    ProcessingTimeout,
    ReflectionFailed,
    ReflectionTimeout,
)
from hivemem.producer.admin import Admin
from hivemem.producer.scoped import ScopedMemory
from hivemem.store.apikeys import ApiKeyInfo

AgentId = Annotated[str | None, Query(pattern=ID_REGEX, max_length=128)]
FactId = Annotated[str, Path(pattern=ID_REGEX, max_length=128)]
MAX_WAIT_S = 300.0
WAIT_SLICE_S = 0.5
# A wait's timeout in seconds: a number, not `false` (pydantic's lax mode would read it as 0).
Seconds = Annotated[float, Field(strict=True, ge=0, le=MAX_WAIT_S)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WhoAmI(BaseModel):
    namespace: str
    key_id: str


class SessionsOut(BaseModel):
    sessions: list[str]


class SessionInfoIn(_Body):
    title: str | None = Field(default=None, max_length=200)
    agent_id: Id | None = None


class EpisodesOut(BaseModel):
    episodes: list[Episode]


class FullFactsOut(BaseModel):
    facts: list[Fact]


class RelatedOut(BaseModel):
    related: list[RelatedSession]


class AuditOut(BaseModel):
    events: list[AuditEvent]


class LatestOut(BaseModel):
    latest: dict[str, KeyedTurn] = Field(
        description="key -> its current value (the newest turn keyed by it this scope may"
                    " see), in the order asked (all keys: no particular order)")


class ContextIn(_Body):
    query: str = Field(min_length=1, max_length=8192)
    agent_id: Id | None = None
    token_budget: int | None = Field(default=None, gt=0)
    related: int = Field(default=0, ge=0, le=20)
    preset: Preset | None = None


class ContextOut(BaseModel):
    info: SessionInfo
    related: list[RelatedSession]
    result: RecallOut


class WaitIn(_Body):
    stage: Literal["embed", "boundary"] = "embed"
    timeout: Seconds = 30.0


class WaitOut(BaseModel):
    done: bool
    processed: int = 0
    target: int = 0
    stats: SessionStats | None = None


class ReflectedIn(_Body):
    timeout: Seconds = 30.0


class ReflectedOut(BaseModel):
    outcome: Literal["done", "not_assigned", "not_reflected", "failed"]
    index: int = 0
    processed: int = 0
    target: int = 0
    error: str | None = None


class TracesOut(BaseModel):
    traces: list[dict[str, Any]]


def build_client_router(
    tenant_of: Callable[[ApiKeyInfo], ScopedMemory],
    authenticate: Callable[..., Awaitable[ApiKeyInfo]],
    admin: Admin, *, max_wait_s: float = MAX_WAIT_S,
) -> APIRouter:
    """`admin`: for the one cross-scope write, an import, once the file is checked to be
    the key's namespace's only (`hivemem.transfer.scoped_import`). `max_wait_s`: the
    longest a long poll is held (`api.max_wait_s`); a longer timeout is cut to it."""

    def tenant(key: Annotated[ApiKeyInfo, Depends(authenticate)]) -> ScopedMemory:
        return tenant_of(key)

    Tenant = Annotated[ScopedMemory, Depends(tenant)]  # noqa: N806 (a type alias)
    Key = Annotated[ApiKeyInfo, Depends(authenticate)]  # noqa: N806
    router = APIRouter(prefix="/v1", responses=ERRORS, tags=["client"])

    @router.get("/whoami", response_model=WhoAmI, summary="The key's namespace")
    def whoami(key: Key) -> WhoAmI:
        return WhoAmI(namespace=key.namespace, key_id=key.key_id)

    @router.get("/sessions", response_model=SessionsOut, summary="The namespace's sessions")
    def sessions(memory: Tenant) -> SessionsOut:
        return SessionsOut(sessions=memory.sessions())

    @router.get("/sessions/{session_id}", response_model=SessionInfo,
                summary="A session's header: title, agent, activity, how much it holds")
    def session_info(session_id: SessionId, memory: Tenant,
                     agent_id: AgentId = None) -> SessionInfo:
        return memory.for_agent(agent_id).session_info(session_id)

    @router.patch("/sessions/{session_id}", response_model=SessionInfo,
                  summary="Name the session (and record the agent as its agent)")
    def set_session_info(session_id: SessionId, body: SessionInfoIn,
                         memory: Tenant, key: Key) -> SessionInfo:
        # An agent key changes only a header no agent holds yet, or its own agent's (a
        # namespace key may change any of its namespace's).
        if key.agent_id is not None:
            holder = memory.session_info(session_id).agent_id
            if holder not in (None, key.agent_id):
                raise NotPermitted("agent_id", f"session {session_id!r} is agent {holder!r}'s:"
                                   " only that agent or a namespace key may change its header")
        return memory.for_agent(body.agent_id).set_session_info(session_id, title=body.title)

    @router.get("/sessions/{session_id}/episodes", response_model=EpisodesOut,
                summary="The session's closed episodes, oldest first")
    def episodes(session_id: SessionId, memory: Tenant,
                 agent_id: AgentId = None) -> EpisodesOut:
        return EpisodesOut(episodes=memory.for_agent(agent_id).episodes(session_id))

    @router.get("/sessions/{session_id}/facts/full", response_model=FullFactsOut,
                summary="The session's facts as the SDK's Fact records")
    def facts_full(
        session_id: SessionId, memory: Tenant, agent_id: AgentId = None,
        include_history: bool = False, include_inactive: bool = False,
        include_archived: bool = False,
    ) -> FullFactsOut:
        found = memory.for_agent(agent_id).facts(
            session_id, include_history=include_history, include_inactive=include_inactive,
            include_archived=include_archived)
        return FullFactsOut(facts=found)

    @router.get("/sessions/{session_id}/stats/full", response_model=SessionStats,
                summary="A session's progress as the SDK's SessionStats (failed reflections too)")
    def stats_full(session_id: SessionId, memory: Tenant) -> SessionStats:
        return memory.get_session_stats(session_id)

    @router.get("/sessions/{session_id}/related", response_model=RelatedOut,
                summary="The namespace's other sessions about the same things")
    def related(
        session_id: SessionId, memory: Tenant, agent_id: AgentId = None,
        limit: Annotated[int, Query(ge=1, le=100)] = 5,
        min_score: Annotated[float, Query(ge=0, le=1)] = 0.05,
    ) -> RelatedOut:
        found = memory.for_agent(agent_id).related_sessions(session_id, limit=limit,
                                                            min_score=min_score)
        return RelatedOut(related=found)

    @router.get("/sessions/{session_id}/latest", response_model=LatestOut,
                summary="Each key's current value: the newest turn keyed by metadata[by]")
    def latest(
        session_id: SessionId, memory: Tenant,
        by: Annotated[str, Query(pattern=r"^[A-Za-z0-9_.-]{1,64}$",
                                 description="the turn metadata field that holds the key")],
        keys: Annotated[list[Annotated[str, StringConstraints(min_length=1)]] | None, Query(
            max_length=1000, description="only these keys (repeat the parameter; none: every"
                                         " key)")] = None,
        agent_id: AgentId = None, with_turns: bool = True,
    ) -> LatestOut:
        return LatestOut(latest=memory.for_agent(agent_id).latest(
            session_id, by, keys, with_turns=with_turns))

    @router.post("/sessions/{session_id}/context", response_model=ContextOut,
                 summary="The session's header plus recall over it and related sessions")
    def context(session_id: SessionId, body: ContextIn, memory: Tenant) -> ContextOut:
        found = memory.for_agent(body.agent_id).session_context(
            session_id, body.query, body.token_budget, related=body.related,
            preset=body.preset)
        result = RecallOut(**found.result.to_dict(), context=found.result.render())
        return ContextOut(info=found.info, related=found.related, result=result)

    @router.post("/sessions/{session_id}/wait", response_model=WaitOut,
                 summary="Long poll until every turn so far is processed (or the timeout)")
    async def wait(session_id: SessionId, body: WaitIn, memory: Tenant) -> WaitOut:
        # Waited in short slices, each in the thread pool: a long poll holds a worker
        # thread for one slice at a time, never for the whole wait.
        deadline = time.monotonic() + min(body.timeout, max_wait_s)
        while True:
            remaining = max(0.0, deadline - time.monotonic())
            try:
                stats = await run_in_threadpool(
                    memory.wait_until_processed, session_id, min(remaining, WAIT_SLICE_S),
                    stage=body.stage)
            except ProcessingTimeout as exc:
                if time.monotonic() >= deadline:
                    return WaitOut(done=False, processed=exc.processed, target=exc.target)
                continue
            return WaitOut(done=True, processed=stats.turns_processed,
                           target=stats.turns_enqueued, stats=stats)

    @router.post("/sessions/{session_id}/wait-reflected", response_model=ReflectedOut,
                 summary="Long poll until every episode closed so far is reflected")
    def wait_reflected(session_id: SessionId, body: ReflectedIn,
                       memory: Tenant) -> ReflectedOut:
        try:
            index = memory.wait_until_reflected(session_id, min(body.timeout, max_wait_s))
        except ReflectionTimeout as exc:
            return ReflectedOut(outcome="not_reflected", processed=exc.processed,
                                target=exc.target)
        except ProcessingTimeout as exc:
            return ReflectedOut(outcome="not_assigned", processed=exc.processed,
                                target=exc.target)
        except ReflectionFailed as exc:
            return ReflectedOut(outcome="failed", index=exc.index, error=exc.error)
        return ReflectedOut(outcome="done", index=index)

    @router.get("/traces", response_model=TracesOut,
                summary="The newest reflection traces of the namespace (redacted)")
    def traces(memory: Tenant, agent_id: AgentId = None,
               count: Annotated[int, Query(ge=1, le=200)] = 20) -> TracesOut:
        return TracesOut(traces=memory.for_agent(agent_id).traces(count))

    @router.get("/facts/{fact_id}/audit", response_model=AuditOut,
                summary="Why a fact has its status: its events, oldest first")
    def audit(fact_id: FactId, memory: Tenant, agent_id: AgentId = None) -> AuditOut:
        return AuditOut(events=memory.for_agent(agent_id).audit(fact_id))

    router.include_router(build_transfer_router(tenant_of, authenticate, admin))
    return router
