"""Each session's facts as recall last read them, brought up to date by reading only the
facts written since (nothing is stored here).

Recall needs all of a session's facts, every status, to tell which statements are history
(`hivemem.domain.recall.currency`). Reading and validating them costs ~25-70 ms at a few
hundred facts, on every call; they change only when reflection, compaction or an import
writes. So this keeps them per session and, on each call, asks the store for two cheap
things: how many facts the session holds, and those stamped (`WRITTEN_AT`, set by
`VectorStore.upsert_facts`) after a cursor. A deletion shows as a count that no longer
matches, and reloads the session.

The cursor is the reader's clock at its last read less `margin_s`: a write stamped up to
that long before it became visible (a slow upsert, a writer's clock behind the reader's) is
still picked up, and in a quiet session the re-read finds nothing.
A store that applies every write itself (the embedded engine's owner) also says how many
writes it has applied (`VectorStore.changes`); while that number stays what it was at the
last read, nothing can have changed, and the read is skipped: an idle recall then costs
nothing here, where the count alone grew with the session's facts (~3 ms at 11k facts).
Each change gives the session a new `revision`, so callers can keep what they derive from
the facts until it changes. The facts are kept in a `FactIndex`, updated in place with what
each re-read finds: a change costs what changed, not the session's fact count (a session
that reflection is writing to changes on nearly every recall).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hivemem.domain.fact import Fact
from hivemem.domain.names import SessionName
from hivemem.domain.recall.fact_index import FactIndex
from hivemem.store.vectors.base import FACTS, VectorStore, written_at

_REVISIONS = itertools.count(1)


@dataclass(eq=False)
class _Session:
    """One session's facts as last read (changed in place under `lock`)."""

    index: FactIndex = field(default_factory=FactIndex)
    written: dict[str, float] = field(default_factory=dict)  # fact id -> its WRITTEN_AT
    cursor: float | None = None  # re-read facts stamped after this (None: read them all)
    # The store's `changes` of the facts before the last read (None: not known).
    changes: int | None = None
    revision: int = 0
    lock: threading.RLock = field(default_factory=threading.RLock)


@dataclass(frozen=True, slots=True)
class SessionFacts:
    """One session's facts at `revision`. `index` is shared and changes in place with
    later reads: read it under `lock`."""

    revision: int
    index: FactIndex
    lock: threading.RLock
    # Fact id -> the `WRITTEN_AT` of the version in `index` (shared, as `index` is).
    written: Mapping[str, float] = field(default_factory=dict)

    @property
    def facts(self) -> tuple[Fact, ...]:
        """Every fact, by creation (a copy: O(n log n); recall reads `index`)."""
        with self.lock:
            return self.index.sorted_facts()

    def __len__(self) -> int:
        return len(self.index)


class KnownFacts:
    def __init__(
        self,
        vectors: VectorStore,
        *,
        margin_s: float = 5.0,
        size: int = 1024,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.vectors = vectors
        self.margin_s = margin_s
        self.size = size
        self._clock = clock
        self._sessions: OrderedDict[SessionName, _Session] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, name: SessionName) -> SessionFacts:
        """The session's facts now: every status and scope (callers filter by scope)."""
        with self._lock:
            known = self._sessions.get(name)
            if known is None:
                known = self._sessions[name] = _Session()
            self._sessions.move_to_end(name)
            while len(self._sessions) > self.size:
                self._sessions.popitem(last=False)
        # One refresh of a session at a time (the next one then finds nothing new).
        with known.lock:
            self._refresh(name, known)
            return SessionFacts(known.revision, known.index, known.lock, known.written)

    def _refresh(self, name: SessionName, known: _Session) -> None:
        # Asked before the reads: a write applied meanwhile shows at the next call.
        changes = self.vectors.changes(FACTS)
        if known.revision and changes is not None and changes == known.changes:
            return
        self._read(name, known)
        known.changes = changes  # once read: a failed read is tried again

    def _read(self, name: SessionName, known: _Session) -> None:
        started = self._clock()
        if known.revision:
            count = self.vectors.count_facts(name)
            changed = self.vectors.facts_written_after(name, known.cursor)
            new = [(f, w) for f, w in changed if known.written.get(f.fact_id) != w]
            if len(known.index) + sum(f.fact_id not in known.written for f, _w in new) == count:
                known.cursor = self._cursor(started)
                if new:
                    for fact, stamp in new:
                        known.index.put(fact)
                        known.written[fact.fact_id] = stamp
                    known.revision = next(_REVISIONS)
                return
        # First read, or facts were deleted: read the session whole.
        everything = self.vectors.facts_written_after(name, None)
        known.index.clear()
        known.written.clear()
        # By creation, so the index's order is the facts' (later ones join at its end).
        for fact, stamp in sorted(everything, key=lambda p: (p[0].created_at, p[0].fact_id)):
            known.index.put(fact)
            known.written[fact.fact_id] = stamp
        known.cursor = self._cursor(started)
        known.revision = next(_REVISIONS)

    def _cursor(self, started: float) -> float:
        """Where the next read starts: `margin_s` before this read began. A write visible
        after this read was stamped no earlier than that (unless it took longer than the
        margin to land, or its writer's clock is further behind)."""
        return started - self.margin_s


def read_already(snapshots: Sequence[SessionFacts]) -> Callable[[Mapping[str, Any]], Fact | None]:
    """For a stored fact's payload (a search's hit), the `Fact` these sessions' facts hold
    for it: the same id at the same `WRITTEN_AT` is the same write (as `KnownFacts` tells
    what changed), already validated once, so a hit is not validated again (~4 us each,
    ~40 a recall). None: not read yet, another write of it, or no stamp to tell."""

    def lookup(payload: Mapping[str, Any]) -> Fact | None:
        stamp = written_at(payload)
        if stamp <= 0.0:  # written before the stamp existed: versions look alike
            return None
        fact_id = payload.get("fact_id")
        if not isinstance(fact_id, str):
            return None
        for snap in snapshots:
            with snap.lock:
                if snap.written.get(fact_id) == stamp:
                    return snap.index.by_id.get(fact_id)
        return None

    return lookup
