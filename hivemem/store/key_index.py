"""The key index in Redis (`Keys.session_latest`): one hash per session.

Fields: ``#epoch`` (moved on by every forget of some of the session's turns), one
watermark ``#upto:<by>`` per metadata field the index is kept for (the highest seq folded),
and one entry ``e:<by>\\x1f<owner>\\x1f<key>`` per key and owner (`Latest`, JSON).

The index is kept on the read side (`hivemem.service.keyed`): the write path does not
change, a reader folds the stored turns past the watermark and writes them back with a
compare-and-set on (epoch, watermark). It is a cache of what the turns say: deleting it
loses nothing (the next read folds the session from its first turn), which is what a
forget does (`reset`) and how a store restored without it recovers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from hivemem.domain.keyed import Latest
from hivemem.pipeline.topology import Keys, SessionName
from hivemem.store import head
from hivemem.store.redis import Redis, as_text, redis_errors
from hivemem.store.scripts import lua

_EPOCH = "#epoch"
_SEP = "\x1f"


def _upto(by: str) -> str:
    return f"#upto:{by}"


def _field(by: str, owner: str, key: str) -> str:
    return f"e:{by}{_SEP}{owner}{_SEP}{key}"


@dataclass(frozen=True, slots=True)
class IndexRead:
    """What a reader found: the epoch and watermark to write back against, the entries
    it asked for (those that exist), and the session's progress read in the same round
    trip (`TurnLog.progress`: last seq, processed, dead-lettered)."""

    epoch: str
    upto: int
    entries: dict[tuple[str, str], Latest]
    last: int = 0
    done: int = 0
    dead: int = 0


class KeyIndexStore:
    def __init__(self, client: Redis, keys: Keys) -> None:
        self._r = client
        self.keys = keys
        self._write = client.register_script(lua("key_index_write"))
        self._reset = client.register_script(lua("key_index_reset"))

    def _with_progress(self, name: SessionName, queue: Callable[[Any], None]
                       ) -> tuple[Any, int, int, int]:
        """One round trip: the index read `queue` adds, after the session's progress."""
        k = self.keys
        with redis_errors("read the key index"):
            pipe = self._r.pipeline(transaction=False)
            head.queue_read(pipe, k, name)
            pipe.bitcount(k.session_processed(name))
            pipe.bitcount(k.session_dead(name))
            queue(pipe)
            fields, done, dead, reply = pipe.execute()
        return reply, head.decode(fields)[0], int(done), int(dead)

    def read_all(self, name: SessionName, by: str) -> IndexRead:
        """Every entry of field `by` (all owners), with the session's progress."""
        raw, last, done, dead = self._with_progress(
            name, lambda pipe: pipe.hgetall(self.keys.session_latest(name)))
        found = {as_text(k): as_text(v) for k, v in raw.items()}
        prefix = f"e:{by}{_SEP}"
        entries = {}
        for field, value in found.items():
            if field.startswith(prefix):
                owner, _, key = field[len(prefix):].partition(_SEP)
                entries[(owner, key)] = Latest.decode(key, owner, value)
        return IndexRead(found.get(_EPOCH, "0"), int(found.get(_upto(by), "0")), entries,
                         last, done, dead)

    def read(self, name: SessionName, by: str, slots: Sequence[tuple[str, str]]) -> IndexRead:
        """The entries of these (owner, key) slots, with the session's progress."""
        fields = [_EPOCH, _upto(by), *(_field(by, o, k) for o, k in slots)]
        got, last, done, dead = self._with_progress(
            name, lambda pipe: pipe.hmget(self.keys.session_latest(name), fields))
        epoch, upto, *values = got
        entries = {slot: Latest.decode(slot[1], slot[0], as_text(v))
                   for slot, v in zip(slots, values, strict=True) if v is not None}
        return IndexRead(as_text(epoch) if epoch is not None else "0",
                         int(as_text(upto)) if upto is not None else 0, entries,
                         last, done, dead)

    def write(self, name: SessionName, by: str, seen: IndexRead, upto: int,
              changed: Iterable[Latest]) -> bool:
        """Write folded entries and move the watermark to `upto`, only if the index is
        still as `seen` (False: it moved; nothing written)."""
        args: list[str] = [seen.epoch, _upto(by), str(seen.upto), str(upto)]
        for entry in changed:
            args += [_field(by, entry.owner, entry.key), entry.encode()]
        with redis_errors("write the key index"):
            done = self._write(keys=[self.keys.session_latest(name)], args=args)
        return bool(int(done))

    def reset(self, name: SessionName) -> None:
        """Drop every entry and move the epoch on (after a forget of some turns)."""
        with redis_errors("reset the key index"):
            self._reset(keys=[self.keys.session_latest(name)])
