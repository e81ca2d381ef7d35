"""A reflection trace as one scope may see it.

A trace is kept whole for operators (it is what `replay` and debugging need), but it names
the episode's input turns and the prior facts the reflector was shown, and those may include
another agent's private memory. Through a scope, each named turn and fact is checked against
the vector store with that scope's filter; what it may not see is cut out, and then so is
the model's raw output and its actions (they may quote what was cut).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from hivemem.domain.scope import Scope
from hivemem.store.reflection import trace_session
from hivemem.store.vectors.base import VectorStore

_FACT_LISTS = ("saved", "superseded", "conflicted", "archived", "merged", "kept", "retracted")
_MODEL_OUTPUT = ("raw_output", "actions", "dropped")


def _ids(items: Iterable[Any], key: str) -> list[str]:
    return [str(i.get(key)) for i in items if isinstance(i, dict) and i.get(key)]


def _fact_id(value: Any) -> str | None:
    """The fact a trace list item names: an id, a fact dict, or a `merged` pair
    (action index, fact id)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("fact_id"), str):
        return str(value["fact_id"])
    if isinstance(value, list | tuple) and value and isinstance(value[-1], str):
        return value[-1]
    return None


def _fact_ids(values: Iterable[Any]) -> list[str]:
    return [i for i in map(_fact_id, values) if i is not None]


def _is_point_id(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def visible_traces(
    traces: list[dict[str, Any]], scope: Scope, vectors: VectorStore
) -> list[dict[str, Any]]:
    return [visible_trace(t, scope, vectors) for t in traces]


def visible_trace(trace: dict[str, Any], scope: Scope, vectors: VectorStore) -> dict[str, Any]:
    session_id = str(trace.get("session_id") or "")
    turns = [t for t in trace.get("input_turns") or [] if isinstance(t, dict)]
    priors = [f for f in trace.get("prior_facts") or [] if isinstance(f, dict)]
    seen_turns = {h.turn.turn_id for h in vectors.get_turns(
        trace_session(trace), _ids(turns, "turn_id"), scope)} if session_id else set()
    named = set(_ids(priors, "fact_id"))
    for key in _FACT_LISTS:
        named.update(_fact_ids(trace.get(key) or []))
    seen_facts = {h.fact.fact_id for h in vectors.get_facts(
        sorted(i for i in named if _is_point_id(i)), scope)}
    out = dict(trace)
    out["input_turns"] = [t for t in turns if t.get("turn_id") in seen_turns]
    out["prior_facts"] = [f for f in priors if f.get("fact_id") in seen_facts]
    for key in _FACT_LISTS:
        if key in trace:
            out[key] = [v for v in trace.get(key) or [] if _fact_id(v) in seen_facts]
    cut = (len(turns) - len(out["input_turns"])) + (len(priors) - len(out["prior_facts"]))
    if cut:
        for key in _MODEL_OUTPUT:
            out.pop(key, None)
        out["redacted"] = cut  # how many inputs this scope may not see
    return out
