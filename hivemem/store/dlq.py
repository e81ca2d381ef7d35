"""Replay dead letters: put an entry a worker gave up on back on its stream.

Use it once the cause is fixed (a store refused the entry, a bug in a handler). Each letter
goes back in one transaction with its removal from the dead-letter stream, so it is never in
both or in neither. A replayed turn keeps its seq; its dead bit is cleared, and once embedded
it is recallable again. (The boundary stage already moved past its seq, so it joins no
episode.) An entry that is still undecodable is dead-lettered again by the worker.
"""

from __future__ import annotations

import json
from collections.abc import Collection

from pydantic import BaseModel, ConfigDict

from hivemem.pipeline.topology import Keys
from hivemem.store.redis import Redis, redis_errors
from hivemem.store.streams import _entries


class Replayed(BaseModel):
    model_config = ConfigDict(frozen=True)

    stream: str
    dead_letter_id: str
    original_entry_id: str
    new_entry_id: str


def _turn_position(fields: dict[str, str]) -> tuple[str, int] | None:
    """(session id, seq) of a dead-lettered turn, if it says so."""
    try:
        session_id = json.loads(fields["turn"])["session_id"]
        return str(session_id), int(fields["seq"])
    except (KeyError, ValueError, TypeError):
        return None


def replay_dead_letters(
    client: Redis,
    keys: Keys,
    stream: str,
    *,
    entry_ids: Collection[str] | None = None,
    count: int = 1000,
) -> list[Replayed]:
    """Move up to `count` dead letters of `stream` (only `entry_ids`, the entries' original
    ids, when given) back onto the stream, oldest first."""
    dead_stream = keys.dead_letters(stream)
    with redis_errors("read dead letters"):
        rows = _entries(client.xrange(dead_stream, count=count))
    replayed: list[Replayed] = []
    for row in rows:
        record = row.fields
        original_id = record.get("entry_id", "")
        if entry_ids is not None and original_id not in entry_ids:
            continue
        fields = {k[2:]: v for k, v in record.items() if k.startswith("f:")}
        target = record.get("stream", stream)
        position = _turn_position(fields) if target == keys.turns_stream else None
        with redis_errors("replay dead letter"):
            pipe = client.pipeline(transaction=True)
            pipe.xadd(target, fields)  # type: ignore[arg-type]
            pipe.xdel(dead_stream, row.entry_id)
            if position is not None:
                pipe.setbit(keys.session_dead(position[0]), position[1], 0)
            new_id = pipe.execute()[0]
        replayed.append(
            Replayed(
                stream=target,
                dead_letter_id=row.entry_id,
                original_entry_id=original_id,
                new_entry_id=new_id.decode() if isinstance(new_id, bytes) else str(new_id),
            )
        )
    return replayed
