"""One recall, as the CLI, the chat REPL and the evaluation show it: items + the accounting.

`MemoryClient.recall` returns a `RecallResult` (a sequence of `ContextItem` with
`used_tokens`, `token_budget`, `preset` and, with ``explain=True``, the `excluded`
candidates and why). `recall_view` calls it (on a client or a scoped handle) and turns the
answer into a plain `RecallView`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from hivemem.domain.models import ContextItem
from hivemem.producer.client import MemoryClient
from hivemem.producer.scoped import ScopedMemory


class Excluded(BaseModel):
    """A candidate that did not make it into the context, and why."""

    reason: str
    detail: str = ""
    content: str | None = None
    source_type: str | None = None
    source_id: str | None = None
    score: float | None = None
    token_count: int | None = None


class RecallView(BaseModel):
    session_id: str
    query: str
    items: list[ContextItem]
    used_tokens: int
    token_budget: int
    preset: str | None = None
    excluded: list[Excluded] = Field(default_factory=list)
    explained: bool = False  # False: the recall could not say what it left out


def _excluded(raw: Any) -> Excluded:
    if isinstance(raw, BaseModel):
        data: dict[str, Any] = raw.model_dump(mode="json")
    elif dataclasses.is_dataclass(raw) and not isinstance(raw, type):
        data = dataclasses.asdict(raw)
    elif isinstance(raw, dict):
        data = dict(raw)
    else:
        data = {k: getattr(raw, k) for k in Excluded.model_fields if hasattr(raw, k)}
    item = data.get("item")
    if isinstance(item, dict):  # a candidate wrapping a ContextItem
        data = {**item, **{k: v for k, v in data.items() if k != "item"}}
    text = data.get("content")
    return Excluded(
        reason=str(data.get("reason") or "unknown"),
        detail=str(data.get("detail") or ""),
        content=text if isinstance(text, str) else None,
        source_type=_str_or_none(data.get("source_type")),
        source_id=_str_or_none(data.get("source_id")),
        score=_float_or_none(data.get("score")),
        token_count=_int_or_none(data.get("token_count")),
    )


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _float_or_none(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


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
        excluded=[_excluded(x) for x in result.excluded],
        explained=explain,
    )
