"""Reading a partitioned stage's streams whole in tests (every partition, in id order)."""

from __future__ import annotations

from typing import Any

from hivemem.pipeline.messages import decode_embedded, embedded_items
from hivemem.pipeline.topology import Keys


def _merged(r: Any, streams: list[str]) -> list[tuple[bytes, dict[bytes, bytes]]]:
    rows: list[tuple[bytes, dict[bytes, bytes]]] = []
    for stream in streams:
        rows += r.xrange(stream)

    def order(row: tuple[bytes, dict[bytes, bytes]]) -> tuple[int, int]:
        ms, _, n = row[0].decode().partition("-")
        return int(ms), int(n)

    return sorted(rows, key=order)


def turn_entries(r: Any, keys: Keys) -> list[tuple[bytes, dict[bytes, bytes]]]:
    """Every entry of the turns streams (all partitions), oldest first."""
    return _merged(r, [keys.turns_stream(p) for p in range(keys.partitions)])


def embedded_entries(r: Any, keys: Keys) -> list[tuple[bytes, dict[bytes, bytes]]]:
    return _merged(r, [keys.embedded_stream(p) for p in range(keys.partitions)])


def turns_len(r: Any, keys: Keys) -> int:
    return sum(int(r.xlen(keys.turns_stream(p))) for p in range(keys.partitions))


def embedded_items_of(r: Any, keys: Keys) -> list[tuple[str, int]]:
    """(session, seq) of every item on the embedded streams, one per turn, control or skip
    (an entry of several turns counts each)."""
    return [(item.session_id, item.seq)
            for _, raw in embedded_entries(r, keys)
            for item in embedded_items(decode_embedded(
                {k.decode(): v.decode() for k, v in raw.items()}))]


def embedded_len(r: Any, keys: Keys) -> int:
    """How many items (turns, controls, skips) the embedded streams hold."""
    return len(embedded_items_of(r, keys))
