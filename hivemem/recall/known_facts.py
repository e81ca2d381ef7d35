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
Each change gives the session a new `revision`, so callers can keep what they derive from
the facts until it changes.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from hivemem.domain.fact import Fact
from hivemem.store.vectors.base import VectorStore

_REVISIONS = itertools.count(1)


@dataclass(frozen=True, slots=True)
class SessionFacts:
    """One session's facts (sorted by creation, as `list_facts` sorts them)."""

    revision: int
    facts: tuple[Fact, ...]
    written: dict[str, float]  # fact id -> its WRITTEN_AT
    cursor: float | None  # re-read facts stamped after this (None: read them all)


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
        self._sessions: OrderedDict[str, SessionFacts] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, session_id: str) -> SessionFacts:
        """The session's facts now: every status and scope (callers filter by scope)."""
        with self._lock:
            known = self._sessions.get(session_id)
            if known is not None:
                self._sessions.move_to_end(session_id)
        # Read outside the lock: two threads may both refresh a session; each result is a
        # complete snapshot, and the later one is kept.
        fresh = self._refresh(session_id, known)
        if fresh is not known:
            with self._lock:
                self._sessions[session_id] = fresh
                self._sessions.move_to_end(session_id)
                while len(self._sessions) > self.size:
                    self._sessions.popitem(last=False)
        return fresh

    def _refresh(self, session_id: str, known: SessionFacts | None) -> SessionFacts:
        started = self._clock()
        if known is not None:
            count = self.vectors.count_facts(session_id)
            changed = self.vectors.facts_written_after(session_id, known.cursor)
            new = [(f, w) for f, w in changed if known.written.get(f.fact_id) != w]
            if len(known.facts) + sum(f.fact_id not in known.written for f, _w in new) == count:
                cursor = self._cursor(started)
                if not new:
                    return SessionFacts(known.revision, known.facts, known.written, cursor)
                by_id = {f.fact_id: f for f in known.facts}
                written = dict(known.written)
                for fact, stamp in new:
                    by_id[fact.fact_id] = fact
                    written[fact.fact_id] = stamp
                return SessionFacts(next(_REVISIONS), _sorted(by_id.values()), written, cursor)
        # First read, or facts were deleted: read the session whole.
        everything = self.vectors.facts_written_after(session_id, None)
        return SessionFacts(
            next(_REVISIONS),
            _sorted(f for f, _w in everything),
            {f.fact_id: w for f, w in everything},
            self._cursor(started),
        )

    def _cursor(self, started: float) -> float:
        """Where the next read starts: `margin_s` before this read began. A write visible
        after this read was stamped no earlier than that (unless it took longer than the
        margin to land, or its writer's clock is further behind)."""
        return started - self.margin_s


def _sorted(facts: Iterable[Fact]) -> tuple[Fact, ...]:
    return tuple(sorted(facts, key=lambda f: (f.created_at, f.fact_id)))
