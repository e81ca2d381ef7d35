"""`AsyncRemoteMemory`: `RemoteMemory` for asyncio code, method for method, on
`httpx.AsyncClient` (no worker threads).

``memory = await hivemem.connect_async("http://host:8080", api_key="hm_...")``. Each method is
`remote_twin` of the synchronous one: the synchronous method runs on a recorder that hands
back the request it describes instead of sending it (`hivemem.producer.remote`), and the
async transport sends that request. So the two cannot drift apart: the same validation, the
same route, the same reading of the answer. A test pins the two to the same signatures.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, Concatenate, ParamSpec, Self, TypeVar, cast

import httpx

from hivemem.domain.ids import check_id
from hivemem.domain.keyed import KeyedTurn
from hivemem.domain.models import RecallResult
from hivemem.domain.recall.policy import RecallPolicy
from hivemem.domain.scope import Scope
from hivemem.producer.remote import RemoteMemory, whoami_call
from hivemem.producer.remote_http import AsyncTransport, Call, RetryPolicy

P = ParamSpec("P")
R = TypeVar("R")


class _Recorder:
    """The synchronous handle's transport inside an async one: `send` returns the call."""

    @staticmethod
    def send(call: Call[Any]) -> Call[Any]:
        return call

    def close(self) -> None:  # pragma: no cover - the async handle closes its own transport
        pass


def remote_twin(
    method: Callable[Concatenate[RemoteMemory, P], R],
) -> Callable[Concatenate[AsyncRemoteMemory, P], Coroutine[Any, Any, R]]:
    """The coroutine twin of a `RemoteMemory` method (see the module docstring)."""

    async def call(self: AsyncRemoteMemory, /, *args: P.args, **kwargs: P.kwargs) -> R:
        planned = cast(Call[R], method(self._plan, *args, **kwargs))
        return await self._transport.send(planned)

    functools.update_wrapper(call, method)
    return call


class AsyncRemoteMemory:
    """What one agent of one namespace may do over the HTTP API, as coroutines."""

    def __init__(
        self, transport: AsyncTransport, scope: Scope, *, pinned: bool = False
    ) -> None:
        self._transport = transport
        # The synchronous handle over the recorder: it describes each request, sends none.
        self._plan = RemoteMemory(_Recorder(), scope, pinned=pinned)

    @property
    def scope(self) -> Scope:
        return self._plan.scope

    @property
    def pinned(self) -> bool:
        """True when the handle can act as its own agent only (see `RemoteMemory.pin`)."""
        return self._plan.pinned

    def pin(self) -> AsyncRemoteMemory:
        """This handle, unable to become another agent."""
        return AsyncRemoteMemory(self._transport, self.scope, pinned=True)

    def for_agent(self, agent_id: str | None) -> AsyncRemoteMemory:
        """The same namespace as another agent (or none), over the same connection pool."""
        plan = self._plan.for_agent(agent_id)  # a pinned handle refuses here, as the sync one
        return AsyncRemoteMemory(self._transport, plan.scope, pinned=plan.pinned)

    ingest = remote_twin(RemoteMemory.ingest)
    ingest_many = remote_twin(RemoteMemory.ingest_many)
    close_episode = remote_twin(RemoteMemory.close_episode)
    close_session = remote_twin(RemoteMemory.close_session)
    forget = remote_twin(RemoteMemory.forget)
    forget_fact = remote_twin(RemoteMemory.forget_fact)
    forget_agent = remote_twin(RemoteMemory.forget_agent)
    set_session_info = remote_twin(RemoteMemory.set_session_info)
    recall = remote_twin(RemoteMemory.recall)
    facts = remote_twin(RemoteMemory.facts)
    episodes = remote_twin(RemoteMemory.episodes)
    get_session_stats = remote_twin(RemoteMemory.get_session_stats)
    wait_until_processed = remote_twin(RemoteMemory.wait_until_processed)
    wait_until_reflected = remote_twin(RemoteMemory.wait_until_reflected)
    sessions = remote_twin(RemoteMemory.sessions)
    traces = remote_twin(RemoteMemory.traces)
    timeline = remote_twin(RemoteMemory.timeline)
    timeline_page = remote_twin(RemoteMemory.timeline_page)
    latest = remote_twin(RemoteMemory.latest)

    async def recall_latest(
        self, session_id: str, query: str, by: str, token_budget: int | None = None, *,
        keys_of: Callable[[RecallResult], Iterable[str]] | None = None,
        preset: str | RecallPolicy | None = None,
    ) -> tuple[RecallResult, dict[str, KeyedTurn]]:
        """`recall`, then `latest(..., with_turns=False)` of `keys_of(result)` (see
        `RemoteMemory.recall_latest`): two requests, so not a `remote_twin` (one each)."""
        result = await self.recall(session_id, query, token_budget, preset=preset)
        keys = None if keys_of is None else list(keys_of(result))
        return result, await self.latest(session_id, by, keys, with_turns=False)
    audit = remote_twin(RemoteMemory.audit)
    session_info = remote_twin(RemoteMemory.session_info)
    related_sessions = remote_twin(RemoteMemory.related_sessions)
    session_context = remote_twin(RemoteMemory.session_context)
    export = remote_twin(RemoteMemory.export)
    import_file = remote_twin(RemoteMemory.import_file)

    async def close(self) -> None:
        """Close the connection pool (shared with the handles `for_agent` made)."""
        await self._transport.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()


async def connect_async(
    url: str,
    *,
    api_key: str,
    agent_id: str | None = None,
    timeout: float = 30.0,
    retry: RetryPolicy | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> AsyncRemoteMemory:
    """`hivemem.connect` for asyncio code: checks the key at once, then every call is a
    coroutine."""
    if agent_id is not None:
        check_id("agent_id", agent_id)
    wire = AsyncTransport(url, api_key, timeout=timeout, retry=retry, transport=transport)
    try:
        scope = await wire.send(whoami_call(agent_id))
    except BaseException:
        await wire.close()
        raise
    return AsyncRemoteMemory(wire, scope)
