"""What every vector store can read back, checked at the store boundary before a point is
written: whatever path a payload came by (ingest, import, a worker's own writes), nothing is
written that a reopen cannot parse.

qdrant-edge stores a payload nested 200 levels deep and then cannot replay its write-ahead log
(RecursionLimitExceeded): the embedded store no longer opens, for anyone. At ~130 levels it
opens but the points cannot be read. The domain refuses metadata deeper than 16 levels
(`hivemem.domain.turn.MAX_METADATA_DEPTH`); a payload puts it two levels down, so 32 leaves a
wide margin on both sides.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hivemem.errors import StoreRejected

MAX_PAYLOAD_DEPTH = 32
MAX_PAYLOAD_NODES = 200_000  # every key, value and container counts one
INT64 = (-(2**63), 2**63 - 1)  # Qdrant keeps integers as signed 64-bit


def payload_problem(payload: Mapping[str, Any]) -> str | None:
    """Why the store could not read `payload` back, or None. Iterative: a value nested
    deeper than Python's recursion limit is measured, not crashed on."""
    nodes = 0
    stack: list[tuple[str, object, int]] = [("", payload, 1)]
    while stack:
        path, node, depth = stack.pop()
        nodes += 1
        if nodes > MAX_PAYLOAD_NODES:
            return f"it holds more than {MAX_PAYLOAD_NODES} keys and values"
        if isinstance(node, Mapping):
            if depth > MAX_PAYLOAD_DEPTH:
                return (f"{path or 'it'} is nested more than {MAX_PAYLOAD_DEPTH} levels deep"
                        " (the engine could not read it back)")
            for key, child in node.items():
                nodes += 1
                top = path or str(key)
                stack.append((top, child, depth + 1))
        elif isinstance(node, list | tuple):
            if depth > MAX_PAYLOAD_DEPTH:
                return (f"{path or 'it'} is nested more than {MAX_PAYLOAD_DEPTH} levels deep"
                        " (the engine could not read it back)")
            stack.extend((path, child, depth + 1) for child in node)
        elif (isinstance(node, int) and not isinstance(node, bool)
              and not INT64[0] <= node <= INT64[1]):
            return f"{path or 'it'} holds an integer outside the signed 64-bit range"
    return None


def check_payloads(store: str, collection: str, payloads: Sequence[Mapping[str, Any]]) -> None:
    """`StoreRejected` (nothing written) when any payload could not be read back."""
    for payload in payloads:
        problem = payload_problem(payload)
        if problem is not None:
            point = payload.get("turn_id") or payload.get("fact_id") or "a point"
            raise StoreRejected(store, f"write to {collection}",
                                f"the payload of {point} cannot be stored: {problem}")
