"""The write side and its progress: turns in (one, or a batch validated whole first), episode
controls, and how far the pipeline has got with a session (stats, waits, recent turns)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from hivemem.domain.episode import Episode
from hivemem.domain.models import Role, SessionStats, Turn, trusted_turn
from hivemem.domain.names import SessionName
from hivemem.domain.scope import Access, Scope, store_scope
from hivemem.domain.turn import TurnDraft
from hivemem.errors import (
    NotFound,
    ProcessingTimeout,
    ReflectionFailed,
    ReflectionTimeout,
    ValidationError,
)
from hivemem.pipeline.topology import Topology
from hivemem.service.access import SessionAccess
from hivemem.service.guard import ack_level
from hivemem.service.parts import Parts
from hivemem.service.reads import Reads
from hivemem.store.reflection import ReflectionState
from hivemem.store.vectors.base import TURNS, scoped, session_where


class Turns:
    """Ingest, episode controls and pipeline progress, each for a required scope."""

    def __init__(self, parts: Parts, access: SessionAccess, reads: Reads) -> None:
        self.parts = parts
        self.access = access
        self.reads = reads

    # -- writes ----------------------------------------------------------------------------

    def ingest(
        self, scope: Scope, session_id: str, role: str | Role, content: str, *,
        markers: Iterable[str] | None = None, metadata: Mapping[str, Any] | None = None,
        timestamp: datetime | None = None, turn_id: str | None = None,
        visibility: str = "shared", durable: bool | None = None, ack: str | None = None,
    ) -> Turn:
        """One turn, written by `scope`'s agent into its namespace (see
        `MemoryClient.ingest`)."""
        settings = self.parts.settings.ingest
        draft = TurnDraft(
            session_id, role, content, settings=settings, agent_id=scope.agent_id,
            markers=markers, metadata=metadata, timestamp=timestamp, turn_id=turn_id,
            namespace=scope.namespace, visibility=visibility,
        )
        guard = self.parts.guard
        wait = guard.ack_wait(ack_level(settings, ack, durable))
        guard.admit(1)
        seq, duplicate = self.parts.state.append_turn(draft, wait)
        return _turn(draft, seq, duplicate)

    def ingest_many(
        self, rows: Sequence[tuple[Scope, Mapping[str, Any]]], *, durable: bool | None = None,
        validate_only: bool = False, ack: str | None = None,
    ) -> list[Turn]:
        """Turns, each with the scope that writes it: every one is validated first (nothing
        is written if one is bad, or names another namespace's session), then they are
        pipelined. `validate_only`: check and write nothing (returns ``[]``)."""
        settings = self.parts.settings.ingest
        level = ack_level(settings, ack, durable)
        drafts: list[TurnDraft] = []
        for index, (scope, raw) in enumerate(rows):
            try:
                drafts.append(TurnDraft(
                    raw["session_id"], raw["role"], raw["content"], settings=settings,
                    agent_id=scope.agent_id, markers=raw.get("markers"),
                    metadata=raw.get("metadata"), timestamp=raw.get("timestamp"),
                    turn_id=raw.get("turn_id"), namespace=scope.namespace,
                    visibility=raw.get("visibility", "shared"),
                ))
            except ValidationError as exc:
                raise ValidationError(f"turns[{index}].{exc.field}", exc.message) from None
        state = self.parts.state
        state.check_scopes(list(dict.fromkeys((d.session_id, d.namespace) for d in drafts)))
        if validate_only:
            return []
        guard = self.parts.guard
        wait = guard.ack_wait(level)
        guard.admit(len(drafts))
        results = state.append_turns(drafts, wait)
        return [_turn(d, seq, dup) for d, (seq, dup) in zip(drafts, results, strict=True)]

    def close_episode(self, access: Access, session_id: str) -> int:
        """Close the session's open episode after the turns ingested so far (returns the
        control's seq)."""
        return self._control(access, session_id, "close_episode")

    def close_session(self, access: Access, session_id: str) -> int:
        """The session is over: its open episode closes, whatever its size."""
        return self._control(access, session_id, "close_session")

    def _control(self, access: Access, session_id: str, action: str) -> int:
        name = self.access.require(access, session_id)
        seq = self.parts.state.append_control(name, action)
        if seq is None:
            raise NotFound("session_id", f"unknown session {session_id!r} (no turns)")
        return seq

    # -- progress --------------------------------------------------------------------------

    def stats(
        self, access: Access, session_id: str, *, visible_markers: bool = True,
    ) -> SessionStats:
        """Turns, episodes, open-episode turns, markers, and each stage's backlog.

        With `visible_markers` (a scope's handle), the marker counts are of the turns the
        scope may see (another agent's private custom marker would name what it is about),
        counted in the vector store; without, the session's own counts from Redis (what a
        producer that opens no vector store reads). The pipeline counts are the session's."""
        name = self.access.require(access, session_id)
        return self._stats(access, name, visible_markers=visible_markers)

    def _stats(self, access: Access, name: SessionName, *,
               visible_markers: bool) -> SessionStats:
        parts = self.parts
        stats = parts.state.stats(name)
        assigned, closed, open_ep, markers = parts.episodes.progress(name)
        stages = [parts.streams.stage_lag(stage) for stage in Topology(parts.keys).stages]
        scope = store_scope(access)
        if visible_markers and scope is not None and markers:
            vectors = self.reads.vectors()
            # The session's counts are what the scope sees when no turn of it is private
            # (its turns are its namespace's): one count of those, not one per marker.
            if vectors.count(TURNS, {**session_where(name), "visibility": "private"}):
                markers = {marker: seen for marker in markers if (seen := vectors.count(
                    TURNS, {**session_where(name), "markers": marker, **scoped(scope)}))}
        return stats.model_copy(update={
            "turns_assigned": assigned,
            "episodes": closed,
            "open_episode_turns": open_ep.size if open_ep else 0,
            "markers": markers,
            "stages": stages,
            "reflections_failed": _failed_reflections(parts.reflection, name),
        })

    def episodes(self, access: Access, session_id: str) -> list[Episode]:
        """The session's closed episodes `access` may see, oldest first."""
        name = self.access.require(access, session_id)
        return self.parts.episodes.episodes(name, scope=store_scope(access))

    def recent_turns(self, access: Access, session_id: str, limit: int = 10) -> list[Turn]:
        """The session's newest `limit` turns `access` may see, newest first, one per seq.

        After an embedded store is reopened the window can hold a turn twice (as ingested,
        and as restored from Qdrant with its detected markers): the restored one wins."""
        name = self.access.require(access, session_id)
        by_seq: dict[int, Turn] = {}
        for turn in self.parts.state.recent_turns(name, limit * 2, store_scope(access)):
            known = by_seq.get(turn.seq)
            if known is None or len(turn.markers) > len(known.markers):
                by_seq[turn.seq] = turn
        return [by_seq[seq] for seq in sorted(by_seq, reverse=True)[:limit]]

    def wait_until_processed(
        self, access: Access, session_id: str, timeout: float = 30.0, *, stage: str = "embed",
        visible_markers: bool = True,
    ) -> SessionStats:
        """Block until every turn enqueued so far for the session is recallable and current
        (the boundary stage's slot table has it; with ``stage="boundary"``: also assigned
        to episodes). Dead-lettered turns count as
        settled; `ProcessingTimeout` when the workers have not caught up in time."""
        name = self.access.require(access, session_id)
        if stage not in ("embed", "boundary"):
            raise ValidationError("stage", "must be 'embed' or 'boundary'")
        state, episodes = self.parts.state, self.parts.episodes
        target = state.last_seq(name)
        deadline = time.monotonic() + timeout
        delay = 0.002
        while True:
            if stage == "embed":
                _, done, dead = state.progress(name)
                # Recallable means current too: the boundary stage keeps the slot table
                # (what each turn changes), so its pointer counts as well.
                settled = min(done + dead, episodes.progress(name)[0])
            else:
                settled = episodes.progress(name)[0]
            if settled >= target:
                return self._stats(access, name, visible_markers=visible_markers)
            if time.monotonic() >= deadline:
                raise ProcessingTimeout(session_id, settled, target, timeout)
            time.sleep(delay)
            delay = min(delay * 1.5, 0.05)

    def wait_until_reflected(self, access: Access, session_id: str, timeout: float = 30.0
                             ) -> int:
        """Block until every episode closed so far is reflected; returns the last index."""
        name = self.access.require(access, session_id)
        state, episodes = self.parts.state, self.parts.episodes
        deadline = time.monotonic() + timeout
        # Every close issued before this call: first the boundary stage must have passed
        # the session's last seq (a close is a control entry with a seq), then reflection.
        last = state.last_seq(name)
        while (assigned := episodes.progress(name)[0]) < last:
            if time.monotonic() >= deadline:
                raise ProcessingTimeout(session_id, assigned, last, timeout)
            time.sleep(0.01)
        target = episodes.progress(name)[1]
        reflection = self.parts.reflection
        before = reflection.reflected(name)
        while (done := reflection.reflected(name)) < target:
            if time.monotonic() >= deadline:
                raise ReflectionTimeout(session_id, done, target, timeout)
            time.sleep(0.01)
        if done > before:
            failed = [t for t in reflection.traces(50, name)
                      if t.get("failed") and before < int(t.get("index", 0)) <= done]
            if failed:
                raise ReflectionFailed(session_id, int(failed[0]["index"]),
                                       str(failed[0].get("error", "")))
        return done


def _failed_reflections(state: ReflectionState, name: SessionName) -> list[int]:
    """Indexes of the session's episodes whose newest trace says the reflection failed."""
    kept = state.failed_indexes(name)
    if kept is not None:
        return kept
    # A session reflected only before the failures were kept: its newest traces say.
    newest: dict[int, bool] = {}
    for trace in state.traces(50, name):  # newest first
        newest.setdefault(int(trace.get("index", 0)), bool(trace.get("failed")))
    return sorted(i for i, failed in newest.items() if failed)


def _turn(draft: TurnDraft, seq: int, duplicate: bool) -> Turn:
    # The draft is validated already: skip a second pydantic pass on the hot path.
    return trusted_turn(
        turn_id=draft.turn_id,
        session_id=draft.session_id,
        agent_id=draft.agent_id,
        role=draft.role,
        content=draft.content,
        markers=draft.markers,
        metadata=draft.metadata,
        timestamp=draft.timestamp,
        seq=seq,
        token_count=draft.token_count,
        namespace=draft.namespace,
        visibility=draft.visibility,
        duplicate=duplicate,
    )
