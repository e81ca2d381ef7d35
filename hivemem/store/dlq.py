"""Replay dead letters: put an entry a worker gave up on back on its stream.

Use it once the cause is fixed (a store refused the entry, a bug in a handler). Each letter
goes back in one transaction with its removal from the dead-letter stream, so it is never in
both or in neither. A replayed turn keeps its seq; its dead bit is cleared, and once embedded
it is recallable again. (The boundary stage already moved past its seq, so it joins no
episode.) An entry that is still undecodable is dead-lettered again by the worker.
"""

from __future__ import annotations

from collections.abc import Collection

from pydantic import BaseModel, ConfigDict

from hivemem.errors import MalformedEntry
from hivemem.pipeline.messages import TurnEntry, decode_dead_letter
from hivemem.pipeline.topology import Keys, SessionName, Stage, Topology, session_name
from hivemem.store.redis import Redis, redis_errors
from hivemem.store.stream_entries import decode_entries


class Replayed(BaseModel):
    model_config = ConfigDict(frozen=True)

    stream: str
    dead_letter_id: str
    original_entry_id: str
    new_entry_id: str


def _turn_position(fields: dict[str, str]) -> tuple[SessionName, int] | None:
    """(session's internal name, seq) of a dead-lettered turn, if it decodes as one."""
    try:
        turn = TurnEntry.from_fields(fields).turn
    except MalformedEntry:
        return None
    return session_name(turn.namespace, turn.session_id), turn.seq


def replay_dead_letters(
    client: Redis,
    keys: Keys,
    stage: Stage,
    *,
    entry_ids: Collection[str] | None = None,
    count: int = 1000,
) -> list[Replayed]:
    """Move up to `count` dead letters of `stage` (only `entry_ids`, the entries' original
    ids, when given) back onto the stream they died on, oldest first."""
    turns = Topology(keys).embed
    replayed: list[Replayed] = []
    for p in range(stage.partitions):
        dead_stream = stage.dead_letters_for(p)
        with redis_errors("read dead letters"):
            rows = decode_entries(client.xrange(dead_stream, count=count - len(replayed)))
        for row in rows:
            letter = decode_dead_letter(row.fields, stage.stream_for(p))
            original_id = letter.entry_id
            if entry_ids is not None and original_id not in entry_ids:
                continue
            fields = letter.fields
            target = letter.stream
            position = _turn_position(fields) if target in turns.streams() else None
            with redis_errors("replay dead letter"):
                # The letter, its stream and the session's bitmap share the partition's slot.
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
        if len(replayed) >= count:
            break
    return replayed
