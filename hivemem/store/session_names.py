"""Stores written before sessions were keyed by namespace: their sessions move to their names.

Until sessions were named by (namespace, id) (`hivemem.domain.names`), a session's keys and
its turns' point ids were derived from its id alone, whatever namespace owned it. The
``default`` namespace's sessions keep exactly those keys and ids (their internal name is
their bare id); another namespace's session (its owner, ``#ns`` in its ids hash, is not
``default``) is moved once to its internal name ``<namespace>/<id>``:

- every key of the session (found as repartition finds them: every `Keys` method that names
  one) and its closed episodes' bodies, by DUMP + RESTORE + DEL (its partition may change),
  each RESTORE before its DEL, so a crash at any point leaves a rerun something to finish;
- its entries in the partition's session set, its namespace's index and the boundary
  waiting set;
- its turns' points: written again under the ids its name derives (payload and vectors as
  stored; the keyword vectors made again from the text, as ingest makes them), then the old
  ids deleted.

A marker (`Keys.session_names_moved`) says it was done: every later start reads one key.
Entries still on the streams or jobs still queued from before carry the old name: drain the
pipeline (as for a repartition) before starting a version with this change.
"""

from __future__ import annotations

from typing import Any

import structlog

from hivemem.domain.names import SessionName, session_name
from hivemem.domain.scope import DEFAULT_NAMESPACE
from hivemem.pipeline.topology import Keys
from hivemem.providers.lexical import LexicalEncoder
from hivemem.store import head
from hivemem.store.redis import Redis, as_text, redis_errors, set_union
from hivemem.store.repartition import session_key_names
from hivemem.store.vectors.base import POINT_IDS, TURNS, Point, VectorStore, turn_point_id

log = structlog.get_logger(__name__)

_PAGE = 256  # points written again per upsert


def move_to_names(client: Redis, keys: Keys, vectors: VectorStore) -> int:
    """Move every session another namespace owns under a bare id to its internal name,
    once per store. Returns how many sessions moved (0: nothing to do, or done before)."""
    with redis_errors("check session names"):
        if client.exists(keys.session_names_moved):
            return 0
        bare = sorted(n for n in set_union(client, keys.all_sessions()) if "/" not in n)
    moved = 0
    lexical = LexicalEncoder()
    for start in range(0, len(bare), 1000):
        chunk = [SessionName(n) for n in bare[start:start + 1000]]
        with redis_errors("read session owners"):
            pipe = client.pipeline(transaction=False)
            for name in chunk:
                head.queue_read(pipe, keys, name)
            owners = [head.decode(*r)[1] for r in _pairs(pipe.execute())]
        for old, owner in zip(chunk, owners, strict=True):
            if owner is None or owner == DEFAULT_NAMESPACE:
                continue
            new = session_name(owner, old)
            with redis_errors("move a session to its name"):
                _move_keys(client, keys, old, new, owner)
            _move_points(vectors, lexical, old, new, owner)
            moved += 1
            log.info("session_names.moved", session_id=old, namespace=owner)
    with redis_errors("mark session names moved"):
        client.set(keys.session_names_moved, 1)
    return moved


def _pairs(replies: list[Any]) -> list[list[Any]]:
    return [replies[i:i + head.READS] for i in range(0, len(replies), head.READS)]


def _move(client: Redis, source: str, target: str) -> None:
    if source == target:
        return
    dumped = client.dump(source)
    if dumped is None:
        return
    ttl = client.pttl(source)
    client.restore(target, max(int(ttl), 0), dumped, replace=True)
    client.delete(source)


def _move_keys(client: Redis, keys: Keys, old: SessionName, new: SessionName,
               owner: str) -> None:
    for raw in client.lrange(keys.session_episodes(old), 0, -1):
        episode = as_text(raw)
        _move(client, keys.episode(old, episode), keys.episode(new, episode))
    for key_of in session_key_names(keys):
        _move(client, key_of(old), key_of(new))
    client.sadd(keys.session_set(new), new)
    client.srem(keys.session_set(old), old)
    # The namespace's index lists ids (unchanged); its partition follows the name.
    client.sadd(keys.namespace_session_set(new), old)
    old_index = keys.namespace_sessions(keys.partition(old), owner)
    if old_index != keys.namespace_session_set(new):
        client.srem(old_index, old)
    waiting_old = keys.boundary_waiting(keys.partition(old))
    since = client.zscore(waiting_old, old)
    if since is not None:
        client.zadd(keys.boundary_waiting(keys.partition(new)), {new: since})
        client.zrem(waiting_old, old)


def _move_points(vectors: VectorStore, lexical: LexicalEncoder, old: SessionName,
                 new: SessionName, owner: str) -> None:
    """The session's turns under the point ids its name derives (`turn_point_id`)."""
    hits = list(vectors.scroll(TURNS, {"session_id": old, "namespace": owner},
                               with_vectors=True))
    stale = [h.id for h in hits if h.id != turn_point_id(new, str(h.payload["turn_id"]))]
    for start in range(0, len(hits), _PAGE):
        page = [h for h in hits[start:start + _PAGE] if h.vector is not None]
        sparse = lexical.documents([str(h.payload.get("content") or "") for h in page])
        vectors.upsert(TURNS, [
            Point(turn_point_id(new, str(h.payload["turn_id"])), h.vector, h.payload,
                  sparse[i], h.window)
            for i, h in enumerate(page) if h.vector is not None])
    for start in range(0, len(stale), _PAGE):
        vectors.delete(TURNS, {POINT_IDS: stale[start:start + _PAGE]})
