"""Forgetting over HTTP: a session, one turn of it, one fact, several turns and facts at once
(the remote client's `forget`), and an agent's data in the key's namespace.

Each acts through the key's `ScopedMemory`: a namespace key forgets within its namespace,
an agent key only what its agent wrote (another agent's turn or fact is 403, one it cannot
see 404). The answer is the `ForgetReceipt`: counts by store and kind, never content.
"""

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import APIRouter, Depends, Path
from pydantic import BaseModel, ConfigDict, Field

from hivemem.api.routes import ERRORS, SessionId
from hivemem.api.schemas import ID_REGEX, Id
from hivemem.domain.forget import ForgetReceipt
from hivemem.producer.scoped import ScopedMemory
from hivemem.store.apikeys import ApiKeyInfo

ItemId = Annotated[str, Path(pattern=ID_REGEX, max_length=128)]
MAX_FORGET_IDS = 200  # 200 ids of up to 128 characters stay well under the body limit


class ForgetIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    turn_ids: list[Id] = Field(default_factory=list, max_length=MAX_FORGET_IDS)
    fact_ids: list[Id] = Field(default_factory=list, max_length=MAX_FORGET_IDS)


def build_forget_router(
    tenant_of: Callable[[ApiKeyInfo], ScopedMemory],
    authenticate: Callable[..., Awaitable[ApiKeyInfo]],
) -> APIRouter:
    def tenant(key: Annotated[ApiKeyInfo, Depends(authenticate)]) -> ScopedMemory:
        return tenant_of(key)

    Tenant = Annotated[ScopedMemory, Depends(tenant)]  # noqa: N806 (a type alias)
    router = APIRouter(prefix="/v1", responses=ERRORS, tags=["forget"])

    @router.delete("/sessions/{session_id}", response_model=ForgetReceipt,
                   summary="Forget a session (an agent key: what its agent wrote in it)")
    def forget_session(session_id: SessionId, memory: Tenant) -> ForgetReceipt:
        return memory.forget(session_id)

    @router.delete("/sessions/{session_id}/turns/{turn_id}", response_model=ForgetReceipt,
                   summary="Forget one turn (and what was derived only from it)")
    def forget_turn(session_id: SessionId, turn_id: ItemId, memory: Tenant) -> ForgetReceipt:
        return memory.forget(session_id, turn_ids=[turn_id])

    @router.post("/sessions/{session_id}/forget", response_model=ForgetReceipt,
                 summary="Forget these turns and facts of a session (none: the session)")
    def forget_some(session_id: SessionId, body: ForgetIn, memory: Tenant) -> ForgetReceipt:
        return memory.forget(session_id, turn_ids=body.turn_ids or None,
                             fact_ids=body.fact_ids or None)

    @router.delete("/facts/{fact_id}", response_model=ForgetReceipt,
                   summary="Forget a fact and every version of it")
    def forget_fact(fact_id: ItemId, memory: Tenant) -> ForgetReceipt:
        return memory.forget_fact(fact_id)

    @router.delete("/agents/{agent_id}", response_model=ForgetReceipt,
                   summary="Forget what an agent wrote in the namespace (an agent key: itself)")
    def forget_agent(agent_id: ItemId, memory: Tenant) -> ForgetReceipt:
        return memory.forget_agent(agent_id)

    return router
