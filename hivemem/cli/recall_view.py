"""One recall, as the CLI, the chat REPL and the evaluation show it: items + the accounting.

`MemoryClient.recall` returns a `RecallResult` (a sequence of `ContextItem` with
`used_tokens`, `token_budget`, `preset` and, with ``explain=True``, the `excluded`
candidates and why). `recall_view` calls it (on a client or a scoped handle) and turns the
answer into a plain `RecallView`.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from hivemem.domain.models import ContextItem, ExcludedItem
from hivemem.producer.client import MemoryClient
from hivemem.producer.scoped import ScopedMemory


class RecallView(BaseModel):
    session_id: str
    query: str
    items: list[ContextItem]
    used_tokens: int
    token_budget: int
    preset: str | None = None
    excluded: list[ExcludedItem] = Field(default_factory=list)
    explained: bool = False  # False: the recall could not say what it left out


def recall_view(
    client: MemoryClient | ScopedMemory,
    session_id: str,
    query: str,
    token_budget: int | None = None,
    *,
    preset: str | None = None,
    limit: int | None = None,
    explain: bool = False,
    related_sessions: Sequence[str] = (),
) -> RecallView:
    """Recall and account for it. Raises `ValidationError` for a bad query, budget or preset
    (before anything is read)."""
    result = client.recall(session_id, query, token_budget, preset=preset, limit=limit,
                           explain=explain, related_sessions=related_sessions)
    return RecallView(
        session_id=session_id,
        query=query,
        items=list(result),
        used_tokens=result.used_tokens,
        token_budget=result.token_budget,
        preset=result.preset or preset,
        excluded=list(result.excluded),
        explained=explain,
    )
