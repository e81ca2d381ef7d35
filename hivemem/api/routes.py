"""The API's routes. Every one acts in the namespace of the caller's API key.

A request gets a `ScopedMemory` of its key's namespace (the `tenant` dependency), narrowed to
the agent the request names: no route can reach an unscoped read. Handlers are plain
functions: FastAPI runs them in its thread pool, where the synchronous SDK does the work.
"""

import re
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query, Request

from hivemem.api.schemas import (
    ID_REGEX,
    BatchIn,
    BatchOut,
    CloseIn,
    CloseOut,
    FactOut,
    FactsOut,
    Problem,
    RecallIn,
    RecallOut,
    StatsOut,
    TimelineOut,
    TracesOut,
    TurnIn,
    TurnOut,
)
from hivemem.domain.fact import Fact
from hivemem.domain.models import Turn
from hivemem.errors import ValidationError
from hivemem.producer.scoped import ScopedMemory
from hivemem.runtime.metrics import Metrics, timed
from hivemem.store.apikeys import ApiKeyInfo

SessionId = Annotated[str, Path(pattern=ID_REGEX, max_length=128)]
PROBLEM: dict[str, Any] = {"model": Problem, "content": {"application/problem+json": {}}}
ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "Malformed JSON or a bad Content-Length", **PROBLEM},
    401: {"description": "No or a bad API key", **PROBLEM},
    403: {"description": "An agent key naming another agent", **PROBLEM},
    404: {"description": "No such session in the key's namespace", **PROBLEM},
    413: {"description": "Body too large", **PROBLEM},
    422: {"description": "Invalid input (the problem names the field)", **PROBLEM},
    429: {"description": "The pipeline is backlogged, or the namespace has"
               " `api.max_inflight_per_namespace` requests in flight: retry after"
               " Retry-After", **PROBLEM},
    503: {"description": "A store is unavailable", **PROBLEM},
}


def _turn_out(turn: Turn) -> TurnOut:
    return TurnOut(
        session_id=turn.session_id, turn_id=turn.turn_id, seq=turn.seq,
        duplicate=turn.duplicate, namespace=turn.namespace, visibility=turn.visibility,
        agent_id=turn.agent_id, token_count=turn.token_count,
    )


def _fact_out(fact: Fact) -> FactOut:
    return FactOut(
        fact_id=fact.fact_id, session_id=fact.session_id, content=fact.content,
        kind=fact.kind.value, subject=fact.subject, status=fact.status.value,
        confidence=fact.confidence, stated_by=fact.agent_id, visibility=fact.visibility,
        valid_from=fact.valid_from, valid_to=fact.valid_to, superseded_by=fact.superseded_by,
        source_turn_ids=fact.source_turn_ids, version=fact.version,
    )


_TURN_FIELD = re.compile(r"^turns\[(\d+)\]")


def _shifted(exc: ValidationError, offset: int) -> ValidationError:
    """The error of one run of a batch, with its index in the whole batch."""
    field = _TURN_FIELD.sub(lambda m: f"turns[{int(m.group(1)) + offset}]", exc.field)
    return type(exc)(field, exc.message)


def _runs(rows: list[dict[str, Any]]) -> list[tuple[int, str | None, list[dict[str, Any]]]]:
    """Consecutive turns of one author: (offset, agent, rows). Written in order, the runs
    keep the batch's sequence numbers in the order of its turns."""
    runs: list[tuple[int, str | None, list[dict[str, Any]]]] = []
    for index, row in enumerate(rows):
        agent = row.pop("agent_id", None)
        if runs and runs[-1][1] == agent:
            runs[-1][2].append(row)
        else:
            runs.append((index, agent, [row]))
    return runs


def build_router(
    tenant_of: Callable[[ApiKeyInfo], ScopedMemory], metrics: Metrics,
    authenticate: Callable[..., Awaitable[ApiKeyInfo]],
    max_batch: int, default_preset: str,
) -> APIRouter:
    """`tenant_of`: the scoped handle of a key's namespace (no agent: its shared memory)."""

    def tenant(key: Annotated[ApiKeyInfo, Depends(authenticate)]) -> ScopedMemory:
        return tenant_of(key)

    Tenant = Annotated[ScopedMemory, Depends(tenant)]  # noqa: N806 (a type alias)
    router = APIRouter(prefix="/v1", responses=ERRORS)

    @router.post("/sessions/{session_id}/turns", response_model=TurnOut, status_code=201,
                 tags=["memory"], summary="Ingest one turn")
    def ingest(session_id: SessionId, body: TurnIn, memory: Tenant,
               request: Request) -> TurnOut:
        turn = memory.for_agent(body.agent_id).ingest(
            session_id, body.role, body.content, markers=body.markers,
            metadata=body.metadata, timestamp=body.timestamp, turn_id=body.turn_id,
            visibility=body.visibility,
        )
        metrics.ingested.inc()
        request.state.turn_id = turn.turn_id  # the request's log line carries it
        request.state.seq = turn.seq
        return _turn_out(turn)

    @router.post("/turns/batch", response_model=BatchOut, status_code=201, tags=["memory"],
                 summary="Ingest many turns (all or nothing on invalid input)")
    def ingest_batch(body: BatchIn, memory: Tenant) -> BatchOut:
        if len(body.turns) > max_batch:
            raise ValidationError("turns", f"at most {max_batch} turns per batch")
        runs = [(offset, memory.for_agent(agent), rows)
                for offset, agent, rows in _runs(
                    [t.model_dump(exclude_none=True) for t in body.turns])]
        # Every run is checked before any is written: invalid input writes nothing.
        for offset, handle, rows in runs:
            try:
                handle.ingest_many(rows, validate_only=True)
            except ValidationError as exc:
                raise _shifted(exc, offset) from None
        turns = [t for _offset, handle, rows in runs for t in handle.ingest_many(rows)]
        metrics.ingested.inc(len(turns))
        return BatchOut(turns=[_turn_out(t) for t in turns])

    @router.post("/sessions/{session_id}/recall", response_model=RecallOut, tags=["memory"],
                 summary="Recall the context for a query, within a token budget")
    def recall(session_id: SessionId, body: RecallIn, memory: Tenant) -> RecallOut:
        asking = memory.for_agent(body.agent_id)
        done = timed(metrics.recall_seconds, body.preset or default_preset)
        result = asking.recall(
            session_id, body.query, body.token_budget, preset=body.preset, limit=body.limit,
            include_history=body.include_history, explain=body.explain,
            related_sessions=body.related_sessions,
        )
        done()
        data = result.to_dict()
        return RecallOut(**data, context=result.render())

    @router.post("/sessions/{session_id}/episodes/close", response_model=CloseOut,
                 tags=["memory"], summary="Close the open episode (or the session)")
    def close_episode(session_id: SessionId, body: CloseIn, memory: Tenant) -> CloseOut:
        if body.session_end:
            seq = memory.close_session(session_id)
        else:
            seq = memory.close_episode(session_id)
        return CloseOut(session_id=session_id, seq=seq)

    @router.get("/sessions/{session_id}/stats", response_model=StatsOut, tags=["sessions"],
                summary="A session's progress through the pipeline")
    def stats(session_id: SessionId, memory: Tenant) -> StatsOut:
        return StatsOut.of(memory.get_session_stats(session_id))

    @router.get("/sessions/{session_id}/facts", response_model=FactsOut, tags=["memory"],
                summary="What is known: the session's facts, and who stated them")
    def facts(
        session_id: SessionId, memory: Tenant,
        agent_id: Annotated[str | None, Query(pattern=ID_REGEX, max_length=128)] = None,
        include_history: bool = False,
    ) -> FactsOut:
        found = memory.for_agent(agent_id).facts(session_id, include_history=include_history)
        return FactsOut(facts=[_fact_out(f) for f in found])

    @router.get("/sessions/{session_id}/traces", response_model=TracesOut,
                tags=["sessions"], summary="Reflection traces of the session (redacted)")
    def traces(
        session_id: SessionId, memory: Tenant,
        agent_id: Annotated[str | None, Query(pattern=ID_REGEX, max_length=128)] = None,
        count: Annotated[int, Query(ge=1, le=200)] = 20,
    ) -> TracesOut:
        return TracesOut(traces=memory.for_agent(agent_id).traces(count, session_id))

    @router.get("/sessions/{session_id}/timeline", response_model=TimelineOut,
                tags=["sessions"],
                summary="Turns, episode closes and fact changes, oldest first (scoped)")
    def timeline(
        session_id: SessionId, memory: Tenant,
        agent_id: Annotated[str | None, Query(pattern=ID_REGEX, max_length=128)] = None,
        kinds: Annotated[list[Literal["turn", "episode", "fact"]] | None, Query()] = None,
        limit: Annotated[int | None, Query(ge=1, le=10_000)] = None,
        cursor: Annotated[str | None, Query(
            max_length=4096, description="a page's `next_cursor`: the events older than it"
        )] = None,
    ) -> TimelineOut:
        handle = memory.for_agent(agent_id)
        if limit is None and cursor is None:
            events = handle.timeline(session_id, kinds=kinds)
            return TimelineOut(events=[e.model_dump(mode="json") for e in events])
        page = handle.timeline_page(session_id, kinds=kinds, limit=limit or 100,
                                    cursor=cursor)
        return TimelineOut(events=[e.model_dump(mode="json") for e in page.events],
                           next_cursor=page.next_cursor)

    return router
