"""A session's counter and owner: two fields of its ids hash (`Keys.session_turn_ids`).

The ingest script reads every turn id of a call with one HMGET and writes them with one
HSET; the counter (``#seq``) and the owning namespace (``#ns``) ride in the same two
commands, where they used to be two strings of their own (`Keys.session_seq`,
`Keys.session_namespace`: a GET, a SET, and often a second GET, per session and call).
``#`` cannot start a turn id (`hivemem.domain.ids`), so no turn id can collide with them;
the write paths that take turn ids from elsewhere (restore, import) keep only valid ones
(`valid_ids`).

Sessions written before keep their two strings until their next write: the scripts move
them into the hash then (`lua/legacy_head.lua`), and the readers here fall back to them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from hivemem.domain.ids import ID_PATTERN
from hivemem.domain.models import Turn
from hivemem.domain.scope import DEFAULT_NAMESPACE
from hivemem.pipeline.topology import Keys
from hivemem.store.redis import as_text

SEQ_FIELD = "#seq"
NS_FIELD = "#ns"



def legacy_keys(keys: Keys, session_id: str) -> list[str]:
    """The two strings that held the counter and the owner before (for `lua/legacy_head.lua`)."""
    return [keys.session_seq(session_id), keys.session_namespace(session_id)]


READS = 3  # replies `queue_read` queues


def queue_read(pipe: Any, keys: Keys, session_id: str) -> None:
    """Queue the `READS` reads `decode` combines (GETs, not an MGET: a cluster pipeline
    refuses MGET)."""
    pipe.hmget(keys.session_turn_ids(session_id), SEQ_FIELD, NS_FIELD)
    for key in legacy_keys(keys, session_id):
        pipe.get(key)


def decode(fields: list[Any], old_seq: Any, old_ns: Any) -> tuple[int, str | None]:
    """(counter, owner) from `queue_read`'s replies: the hash's fields, else the older
    strings. The owner of a session with turns but no owner record is "default" (it
    predates namespaces); None: no such session."""
    seq_raw = fields[0] if fields[0] is not None else old_seq
    owner_raw = fields[1] if fields[1] is not None else old_ns
    seq = 0 if seq_raw is None else int(seq_raw)
    if owner_raw is not None:
        return seq, as_text(owner_raw)
    return seq, (DEFAULT_NAMESPACE if seq_raw is not None else None)


def valid_ids(turns: Iterable[Turn]) -> dict[str, int]:
    """turn id -> seq for the ids hash, only ids an ingest could repeat (a restored or
    imported turn id that is not a valid id could only collide with the hash's own
    fields)."""
    return {t.turn_id: t.seq for t in turns if ID_PATTERN.fullmatch(t.turn_id)}
