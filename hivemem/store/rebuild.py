"""Rebuild Redis session state from Qdrant, the system of record."""

from __future__ import annotations

from collections import defaultdict

from hivemem.domain.models import Turn
from hivemem.pipeline.messages import EmbeddedTurn
from hivemem.pipeline.topology import Keys, SessionName, session_name
from hivemem.store.episodes import EpisodeStore
from hivemem.store.redis import Redis, redis_errors
from hivemem.store.state import TurnLog
from hivemem.store.streams import StreamStore
from hivemem.store.vectors.base import VectorStore


def rebuild_state(state: TurnLog, vectors: VectorStore, name: SessionName | None = None) -> int:
    """Restore seq counters, idempotency ids, recent windows and progress. Returns sessions.
    `name`: only that session (`hivemem.domain.names`)."""
    by_session: dict[SessionName, list[Turn]] = defaultdict(list)
    for turn in vectors.iter_turns(name):
        by_session[session_name(turn.namespace, turn.session_id)].append(turn)
    for sid, turns in by_session.items():
        state.restore_session(sid, turns)
    return len(by_session)


def refeed_boundary(client: Redis, keys: Keys, vectors: VectorStore) -> int:
    """Publish again, for the boundary stage, every stored turn its state has not passed.

    Needed when Redis lost the embedded stream (embedded mode after a crash, or a Redis
    loss): the boundary stage would otherwise wait forever for those seqs. Entries it has
    already assigned are ignored by its pointer, so this is safe to run any time.
    """
    episodes = EpisodeStore(client, keys, 1000)
    streams = StreamStore(client, keys)
    by_session: dict[SessionName, list[Turn]] = defaultdict(list)
    for turn in vectors.iter_turns(None):
        by_session[session_name(turn.namespace, turn.session_id)].append(turn)
    refed = 0
    for sid, turns in by_session.items():
        assigned = episodes.progress(sid)[0]
        with redis_errors("read boundary buffer"):
            buffered = {
                int(f) for f in client.hkeys(keys.boundary_buffer(sid)) if f.isdigit()
            }
        todo = sorted(
            (t for t in turns if t.seq > assigned and t.seq not in buffered), key=lambda t: t.seq
        )
        hits = {h.turn.turn_id: h for h in vectors.get_turns(sid, [t.turn_id for t in todo])}
        entries = []
        for turn in todo:
            hit = hits.get(turn.turn_id)
            vector = hit.vector if hit is not None else None
            entries.append(EmbeddedTurn.of(turn, vector).to_fields())
        streams.append(keys.embedded_stream(keys.partition(sid)), entries)
        refed += len(entries)
    return refed
