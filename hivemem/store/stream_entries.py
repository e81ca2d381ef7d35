"""Stream entries as Redis returns them, decoded: XRANGE, XREADGROUP (the RESP2 and RESP3
shapes) and XAUTOCLAIM rows become `StreamEntry`s."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hivemem.store.redis import as_text


@dataclass(frozen=True, slots=True)
class StreamEntry:
    entry_id: str
    fields: dict[str, str]
    stream: str = ""  # the (partition's) stream it was read from


def id_order(entry_id: str) -> tuple[int, int]:
    """A stream entry id ('<ms>-<seq>') as what orders it."""
    ms, _, seq = entry_id.partition("-")
    return int(ms or 0), int(seq or 0)


def decode_entries(raw: Any, stream: str = "") -> list[StreamEntry]:
    """XRANGE / XREADGROUP / XAUTOCLAIM rows as `StreamEntry`s."""
    out: list[StreamEntry] = []
    for entry_id, fields in raw or []:
        if fields is None:  # deleted while pending
            continue
        out.append(StreamEntry(
            as_text(entry_id), {as_text(k): as_text(v) for k, v in fields.items()}, stream
        ))
    return out


def read_reply(reply: Any) -> list[StreamEntry]:
    """An XREADGROUP reply over one or more streams, RESP2 or RESP3 shape."""
    if not reply:
        return []
    out: list[StreamEntry] = []
    if isinstance(reply, dict):  # RESP3: {stream: [entries]}
        for stream, rows in reply.items():
            out += decode_entries(rows[0] if rows else [], as_text(stream))
        return out
    for stream, rows in reply:
        out += decode_entries(rows, as_text(stream))
    return out
