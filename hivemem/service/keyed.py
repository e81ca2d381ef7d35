"""Keyed reads: each key's latest turn in a session (`ScopedMemory.latest`), through the
key index (`hivemem.store.key_index`), so that a reader asking for a key's current value
does not read the session's every turn.

The index is kept here, on the read side: the stored turns past its watermark are read
(one range read on the seq payload index), folded in (`hivemem.domain.keyed.fold`) and
written back when the session is settled (every turn up to its last seq stored or
dead-lettered: a turn still on its way would otherwise be skipped for good). Writers pay
nothing; a read after N new turns folds N turns once.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

from hivemem.domain.keyed import KeyedTurn, Latest, fold, slots_of, visible
from hivemem.domain.models import RecallResult, Turn
from hivemem.domain.names import SessionName
from hivemem.domain.recall.policy import RecallPolicy
from hivemem.domain.scope import Access, Scope, store_scope
from hivemem.errors import ValidationError
from hivemem.service.access import SessionAccess, name_for
from hivemem.service.parts import Parts
from hivemem.service.reads import Reads
from hivemem.store.key_index import IndexRead

_FIELD = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_MAX_KEYS = 1000


def check_by(by: object) -> str:
    if not isinstance(by, str) or not _FIELD.fullmatch(by):
        raise ValidationError("by", "a metadata field name: 1-64 of [A-Za-z0-9_.-]")
    return by


def check_keys(keys: Sequence[str] | None) -> list[str] | None:
    if keys is None:
        return None
    if isinstance(keys, str):
        raise ValidationError("keys", "must be a list of keys, not one string")
    if len(keys) > _MAX_KEYS:
        raise ValidationError("keys", f"at most {_MAX_KEYS} keys")
    if not all(isinstance(k, str) and k for k in keys):
        raise ValidationError("keys", "each key is a non-empty string")
    return list(dict.fromkeys(keys))


class Keyed:
    def __init__(self, parts: Parts, access: SessionAccess, reads: Reads) -> None:
        self.parts = parts
        self.access = access
        self.reads = reads

    def latest(
        self, access: Access, session_id: str, by: str, keys: Sequence[str] | None = None,
        *, with_turns: bool = True,
    ) -> dict[str, KeyedTurn]:
        """Each key's latest turn `access` may see, the key being the turns'
        ``metadata[by]`` (a turn with ``"deleted": true`` in its metadata ends its key);
        only `keys` when given. `with_turns`: each answer carries its turn (one read of
        those turns); without, only where and when."""
        by = check_by(by)
        wanted = check_keys(keys)
        name = self.access.require(access, session_id)
        for _ in range(2):
            found = self._entries(access, name, by, wanted)
            if not with_turns:
                return {k: _answer(e) for k, e in found.items()}
            scope = store_scope(access)
            turns = {hit.turn_id: hit.turn for hit in self.reads.vectors().get_turns(
                name, [e.turn_id for e in found.values()], scope)}
            if all(e.turn_id in turns for e in found.values()):
                return {k: _answer(e, turns[e.turn_id]) for k, e in found.items()}
            # An entry names a turn that is gone: a forget raced the reader that wrote it.
            # The index is a cache of the turns: start it again from them.
            self.parts.key_index.reset(name)
        return {k: _answer(e, turns[e.turn_id]) for k, e in found.items()
                if e.turn_id in turns}

    def recall_latest(
        self, scope: Scope, session_id: str, query: str, by: str,
        token_budget: int | None = None, *,
        keys_of: Callable[[RecallResult], Iterable[str]] | None = None,
        preset: str | RecallPolicy | None = None,
    ) -> tuple[RecallResult, dict[str, KeyedTurn]]:
        """`recall`, then `latest(..., with_turns=False)` of the keys `keys_of(result)`
        names (None: every key), the session checked against the scope once: recall
        checks it (`NotFound` otherwise) and the key index is then read by the name it
        checked. The entries are filtered by the scope as `latest`'s are."""
        by = check_by(by)
        result = self.reads.recall(scope, session_id, query, token_budget, preset=preset)
        wanted = None if keys_of is None else check_keys(list(keys_of(result)))
        if wanted == []:
            return result, {}
        found = self._entries(scope, name_for(scope, session_id), by, wanted)
        return result, {k: _answer(e) for k, e in found.items()}

    def _entries(self, access: Access, name: SessionName, by: str,
                 wanted: list[str] | None) -> dict[str, Latest]:
        index = self.parts.key_index
        scope = store_scope(access)
        owners = None if scope is None else ["", *([scope.agent_id] if scope.agent_id else [])]
        if wanted is None or owners is None:
            seen = index.read_all(name, by)
        else:
            seen = index.read(name, by, [(o, k) for k in wanted for o in owners])
        entries = dict(seen.entries)
        last, done, dead = seen.last, seen.done, seen.dead
        if seen.upto < last:
            fresh = self.reads.vectors().turns_between(name, seen.upto + 1, last)
            missing = [s for s in slots_of(by, fresh) if s not in entries]
            known = self._known(name, by, seen, missing)
            changed = fold(by, {**known, **entries}, fresh)
            if done + dead >= last:
                index.write(name, by, seen, last, changed.values())
            entries.update(changed)
        chosen = visible(entries.values(), scope)
        return chosen if wanted is None else {k: chosen[k] for k in wanted if k in chosen}

    def _known(self, name: SessionName, by: str, seen: IndexRead,
               missing: list[tuple[str, str]]) -> dict[tuple[str, str], Latest]:
        """The entries of slots the fresh turns touch that the first read did not ask
        for (their run's start carries over)."""
        if not missing:
            return {}
        again = self.parts.key_index.read(name, by, missing)
        return again.entries if again.epoch == seen.epoch else {}


def _answer(entry: Latest, turn: Turn | None = None) -> KeyedTurn:
    # Trusted values (the index's, checked when folded): no validation per key.
    return KeyedTurn.model_construct(key=entry.key, turn_id=entry.turn_id, seq=entry.seq,
                                     at=entry.at, since=entry.since, turn=turn)
