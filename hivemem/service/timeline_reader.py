"""One session's timeline read newest first, only as far as a page needs.

Each kind of event is a stream, newest first, merged with the others by `Sessions`:

- turns: a window of seqs at a time, backwards from the session's last seq (the turn log's
  head in Redis), through the seq payload index (`VectorStore.turns_between`). The first
  window is the page (and one more event, which tells whether there is an older page);
  each later window is twice the one before (up to `MAX_WINDOW`), so that seqs a scope may
  not see, or turns not embedded yet, cost a few reads, not one per missing turn. Turns
  carry rising timestamps as their seqs rise, so each window's turns are all older than the
  window before's;
- episode closes: the session's list of episodes from its end (episodes close in seq order),
  a few first, then twice as many each read up to a page: a page of turns usually holds
  one close or none, and each episode's body lists its turn ids (500 of them is ~20 KB to
  fetch and parse);
- fact changes: the session's audit log a page at a time from its end (`AuditLog.newest_first`;
  a scope sees the events about facts it may see, as `AuditLog.visible_events` shows them).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Iterator, Sequence

from hivemem.domain.names import SessionName
from hivemem.domain.scope import Scope
from hivemem.domain.timeline import (
    SortKey,
    TimelineEvent,
    episode_event,
    fact_event,
    newest_first,
    turn_event,
)
from hivemem.store.audit import AuditLog, visible
from hivemem.store.episodes import EpisodeStore
from hivemem.store.state import TurnLog
from hivemem.store.vectors.base import VectorStore

# The widest window of seqs one read asks for (a session whose scope hides most turns).
MAX_WINDOW = 4096
# Episodes (and fact changes) read first; each later read asks for twice as many, up to
# the page.
EPISODE_PAGE = 32
FIRST_EPISODES = 4


class TimelineReader:
    """Reads for one page: `limit` is the page's size; `scope` what the reader may see."""

    def __init__(self, vectors: VectorStore, state: TurnLog, episodes: EpisodeStore,
                 audit: AuditLog, scope: Scope | None, limit: int) -> None:
        self.vectors = vectors
        self.state = state
        self.episodes = episodes
        self.audit = audit
        self.scope = scope
        self.limit = limit

    def newest_first(
        self, name: SessionName, kinds: Sequence[str], before: SortKey | None,
        top_seq: int | None,
    ) -> Iterator[TimelineEvent]:
        """The session's events older than `before` (None: all), newest first; its turns
        from `top_seq` down (None: from its last seq)."""
        streams: list[Iterator[TimelineEvent]] = []
        if "turn" in kinds:
            streams.append(self._turns(name, before, top_seq))
        if "episode" in kinds:
            streams.append(self._episodes(name, before))
        if "fact" in kinds:
            streams.append(self._facts(name, before))
        return heapq.merge(*streams, key=TimelineEvent.sort_key, reverse=True)

    def _turns(
        self, name: SessionName, before: SortKey | None, top_seq: int | None,
    ) -> Iterator[TimelineEvent]:
        high = self.state.last_seq(name)
        if top_seq is not None:
            high = min(high, top_seq)
        size = self.limit + 1
        while high >= 0:
            low = max(0, high - size + 1)
            turns = self.vectors.turns_between(name, low, high, self.scope)
            yield from _older(newest_first(turn_event(t) for t in turns), before)
            high = low - 1
            size = min(size * 2, MAX_WINDOW)
            if not turns and high >= 0:
                # A run of seqs without turns (or a counter past the last turn): jump to
                # the next stored one below instead of walking the run a window at a time.
                found = self.vectors.nearest_seq(name, 0, high, self.scope,
                                                 highest=True)
                high = -1 if found is None else found

    def _episodes(self, name: SessionName, before: SortKey | None) -> Iterator[TimelineEvent]:
        most = max(EPISODE_PAGE, self.limit + 1)
        size = min(FIRST_EPISODES, most)
        end = -1
        while True:
            # From the list's end (negative indexes): a page past its start is empty.
            found = self.episodes.episodes(name, end - size + 1, end)
            if not found:
                return
            seen = [e for e in found if self.scope is None
                    or self.scope.admits(e.namespace, e.visibility, e.agent_id)]
            yield from _older(newest_first(episode_event(e) for e in seen), before)
            end -= size
            size = min(size * 2, most)


    def _facts(self, name: SessionName, before: SortKey | None) -> Iterator[TimelineEvent]:
        # Always from the log's end, not from the cursor: an event appended twice is then
        # shown once, at the same position on every page.
        size = max(EPISODE_PAGE, self.limit + 1)
        events = self.audit.newest_first(name, size)
        while chunk := list(itertools.islice(events, size)):
            if self.scope is None:
                shown = chunk
            else:  # only the facts these events name are looked up
                named = {e.fact_id for e in chunk} | {r for e in chunk for r in e.related}
                seen = self.vectors.visible_fact_ids(name, named, self.scope)
                shown = [v for e in chunk if (v := visible(e, seen)) is not None]
            yield from _older(newest_first(fact_event(e) for e in shown), before)


def _older(events: Iterable[TimelineEvent], before: SortKey | None) -> Iterator[TimelineEvent]:
    return (e for e in events if before is None or e.sort_key() < before)
