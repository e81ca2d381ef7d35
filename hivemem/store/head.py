"""A session's counter and owner: two fields of its ids hash (`Keys.session_turn_ids`).

The ingest script reads every turn id of a call with one HMGET and writes them with one
HSET; the counter (``#seq``) and the owning namespace (``#ns``) ride in the same two
commands (no string of their own: no GET and SET beside them per session and call).
``#`` cannot start a turn id (`hivemem.domain.ids`), so no turn id can collide with them;
the write paths that take turn ids from elsewhere (restore, import) keep only valid ones
(`valid_ids`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from hivemem.domain.ids import ID_PATTERN
from hivemem.domain.models import Turn
from hivemem.domain.scope import DEFAULT_NAMESPACE
from hivemem.pipeline.topology import Keys, SessionName
from hivemem.store.redis import as_text

SEQ_FIELD = "#seq"
NS_FIELD = "#ns"



READS = 1  # replies `queue_read` queues


def queue_read(pipe: Any, keys: Keys, name: SessionName) -> None:
    """Queue the `READS` reads `decode` takes."""
    pipe.hmget(keys.session_turn_ids(name), SEQ_FIELD, NS_FIELD)


def decode(fields: list[Any]) -> tuple[int, str | None]:
    """(counter, owner) from `queue_read`'s reply. The owner of a session with turns but no
    owner record is "default" (it predates namespaces, e.g. imported from an export that
    names none); None: no such session."""
    seq_raw, owner_raw = fields
    seq = 0 if seq_raw is None else int(seq_raw)
    if owner_raw is not None:
        return seq, as_text(owner_raw)
    return seq, (DEFAULT_NAMESPACE if seq_raw is not None else None)


def valid_ids(turns: Iterable[Turn]) -> dict[str, int]:
    """turn id -> seq for the ids hash, only ids an ingest could repeat (a restored or
    imported turn id that is not a valid id could only collide with the hash's own
    fields)."""
    return {t.turn_id: t.seq for t in turns if ID_PATTERN.fullmatch(t.turn_id)}
