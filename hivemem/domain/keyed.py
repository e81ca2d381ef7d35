"""The key index, pure: which turn is the latest of each key of a session.

A turn is *keyed* by a metadata field the reader names (``by``): a turn whose
``metadata[by]`` is a string is the newest value of that key once ingested, and one whose
metadata also holds ``"deleted": true`` ends the key (a tombstone). What a key's current
value is depends on who reads: a private turn is its agent's only, so the index keeps the
latest turn of each key per *owner* (``""``: shared turns; an agent id: that agent's
private turns) and a reader merges the owners it may see (`visible`).

`fold` brings entries forward over turns newer than the index has seen, oldest first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from hivemem.domain.models import Message, Turn
from hivemem.domain.scope import SHARED, Scope

DELETED = "deleted"  # the metadata flag of a tombstone
_SEP = "\x1f"  # never in a turn id ([A-Za-z0-9._:-]) nor in an ISO timestamp


@dataclass(frozen=True, slots=True)
class Latest:
    """A key's latest turn for one owner. `since`: when the key's current run began (its
    first turn after the last tombstone); `deleted`: the latest turn is a tombstone."""

    key: str
    owner: str
    seq: int
    turn_id: str
    at: datetime
    since: datetime
    deleted: bool

    def encode(self) -> str:
        # Plain fields, not JSON: a search decodes an entry per key it asks about.
        return _SEP.join((str(self.seq), self.turn_id, self.at.isoformat(),
                          self.since.isoformat(), "1" if self.deleted else "0"))

    @classmethod
    def decode(cls, key: str, owner: str, raw: str) -> Latest:
        seq, turn_id, at, since, deleted = raw.split(_SEP)
        return cls(key, owner, int(seq), turn_id, datetime.fromisoformat(at),
                   datetime.fromisoformat(since), deleted == "1")


class KeyedTurn(Message):
    """A key's current value as `latest` answers it: the key's newest turn the reader may
    see (`turn`: that turn, when asked for), when the key's current run began (`since`:
    its first turn after its last tombstone) and when it was last set (`at`)."""

    key: str
    turn_id: str
    seq: int
    at: datetime
    since: datetime
    turn: Turn | None = None


_NOBODY = "#nobody"  # a private turn without an agent (no reader's agent id has a '#')


def owner_of(turn: Turn) -> str:
    if turn.visibility == SHARED:
        return ""
    return turn.agent_id or _NOBODY


def slots_of(by: str, turns: Iterable[Turn]) -> list[tuple[str, str]]:
    """The (owner, key) slots these turns are keyed into."""
    return list(dict.fromkeys((owner_of(t), k) for t in turns
                              if isinstance(k := t.metadata.get(by), str)))


def fold(
    by: str, known: Mapping[tuple[str, str], Latest], turns: Iterable[Turn],
) -> dict[tuple[str, str], Latest]:
    """The entries the `turns` (any order; folded by seq) change, given the `known`
    entries of their keys: (owner, key) -> the newest entry."""
    changed: dict[tuple[str, str], Latest] = {}
    for turn in sorted(turns, key=lambda t: t.seq):
        key = turn.metadata.get(by)
        if not isinstance(key, str):
            continue
        slot = (owner_of(turn), key)
        before = changed.get(slot) or known.get(slot)
        if before is not None and before.seq >= turn.seq:
            continue  # folded already (a reader that raced this one)
        deleted = turn.metadata.get(DELETED) is True
        since = (before.since if before is not None and not before.deleted and not deleted
                 else turn.timestamp)
        changed[slot] = Latest(key, slot[0], turn.seq, turn.turn_id, turn.timestamp, since,
                               deleted)
    return changed


def visible(entries: Iterable[Latest], scope: Scope | None) -> dict[str, Latest]:
    """Each key's current entry for a reader (`scope`; None: an operator, who sees every
    owner): the newest of the owners it may see, left out when that one is a tombstone."""
    best: dict[str, Latest] = {}
    for entry in entries:
        if scope is not None and entry.owner not in ("", scope.agent_id):
            continue
        known = best.get(entry.key)
        if known is None or known.seq < entry.seq:
            best[entry.key] = entry
    return {k: e for k, e in best.items() if not e.deleted}
