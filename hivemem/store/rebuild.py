"""Rebuild Redis session state from Qdrant, the system of record."""

from __future__ import annotations

from collections import defaultdict

from hivemem.models import Turn
from hivemem.store.state import SessionState
from hivemem.store.vectors import VectorStore


def rebuild_state(state: SessionState, vectors: VectorStore, session_id: str | None = None) -> int:
    """Restore seq counters, idempotency ids, recent windows and progress. Returns sessions."""
    by_session: dict[str, list[Turn]] = defaultdict(list)
    for turn in vectors.iter_turns(session_id):
        by_session[turn.session_id].append(turn)
    for sid, turns in by_session.items():
        state.restore_session(sid, turns)
    return len(by_session)
