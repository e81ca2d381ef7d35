"""Reading a partitioned stage's streams whole in tests (every partition, in id order)."""

from __future__ import annotations

from typing import Any

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


def embedded_len(r: Any, keys: Keys) -> int:
    return sum(int(r.xlen(keys.embedded_stream(p))) for p in range(keys.partitions))
