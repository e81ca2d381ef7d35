"""One recall, as the CLI, the chat REPL and the evaluation show it: items + the accounting.

`MemoryClient.recall` returns a `RecallResult` (a sequence of `ContextItem` with
`used_tokens`, `token_budget`, `preset` and, with ``explain=True``, the `excluded`
candidates and why). `recall_view` calls it and turns the answer into a plain `RecallView`;
with a client whose recall predates presets, it computes the accounting itself and rejects a
preset instead of silently ignoring it.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from hivemem.domain.models import ContextItem
from hivemem.errors import ValidationError
from hivemem.producer.client import MemoryClient


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


def _supports(client: MemoryClient, name: str) -> bool:
    try:
        return name in inspect.signature(client.recall).parameters
    except (TypeError, ValueError):  # pragma: no cover - builtins only
        return False


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
    client: MemoryClient,
    session_id: str,
    query: str,
    token_budget: int | None = None,
    *,
    preset: str | None = None,
    limit: int | None = None,
    explain: bool = False,
) -> RecallView:
    """Recall and account for it. Raises `ValidationError` for a bad query or budget (before
    anything is read) and for a preset this client's recall does not know."""
    kwargs: dict[str, Any] = {"limit": limit}
    if preset is not None:
        if not _supports(client, "preset"):
            raise ValidationError("preset", "this hivemem's recall has no presets")
        kwargs["preset"] = preset
    can_explain = _supports(client, "explain")
    if explain and can_explain:
        kwargs["explain"] = True
    recall: Any = client.recall
    result: Sequence[ContextItem] = recall(session_id, query, token_budget, **kwargs)
    items = list(result)
    used = getattr(result, "used_tokens", None)
    budget = getattr(result, "token_budget", None)
    raw_excluded = getattr(result, "excluded", None) or []
    return RecallView(
        session_id=session_id,
        query=query,
        items=items,
        used_tokens=used if isinstance(used, int) else sum(i.token_count for i in items),
        token_budget=(
            budget if isinstance(budget, int)
            else token_budget or client.settings.recall.default_token_budget
        ),
        preset=getattr(result, "preset", None) or preset,
        excluded=[_excluded(x) for x in raw_excluded],
        explained=explain and can_explain,
    )
