"""Sessions in Redis: what the caller says about a session (title, agent), and a session's
whole Redis state as plain data, for export, import and restore."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from hivemem.domain.episode import Episode
from hivemem.domain.models import Turn
from hivemem.domain.scope import DEFAULT_NAMESPACE
from hivemem.pipeline.topology import Keys, SessionName, session_name
from hivemem.store import head, recent
from hivemem.store.redis import Redis, as_text, redis_errors, set_union

_INFO_FIELDS = ("title", "agent_id", "created_at")
_INDEX_BATCH = 1000  # sessions per round trip while the namespace indexes are first built


def _hash(raw: dict[Any, Any]) -> dict[str, str]:
    return {as_text(k): as_text(v) for k, v in sorted(raw.items(), key=lambda kv: as_text(kv[0]))}


class SessionStore:
    def __init__(self, client: Redis, keys: Keys) -> None:
        self._r = client
        self.keys = keys
        self._index_built = False

    # -- metadata --------------------------------------------------------------------------

    def set_info(self, name: SessionName, fields: dict[str, str], created_at: datetime) -> None:
        k = self.keys
        with redis_errors("set session metadata"):
            pipe = self._r.pipeline(transaction=True)
            if fields:
                pipe.hset(k.session_info(name), mapping=fields)  # type: ignore[arg-type]
            pipe.hsetnx(k.session_info(name), "created_at", created_at.isoformat())
            pipe.sadd(k.session_set(name), name)
            pipe.execute()

    def write_info(self, name: SessionName, fields: dict[str, str]) -> None:
        """Set these metadata fields as they are (an import overwriting a session's)."""
        with redis_errors("write session metadata"):
            self._r.hset(self.keys.session_info(name), mapping=fields)  # type: ignore[arg-type]

    def info(self, name: SessionName) -> tuple[dict[str, str], dict[str, str]]:
        """(the caller's metadata, the activity hash: first_ts, last_ts, controls)."""
        k = self.keys
        with redis_errors("read session metadata"):
            pipe = self._r.pipeline(transaction=False)
            pipe.hgetall(k.session_info(name))
            recent.queue_activity(pipe, k, name)
            info, meta, tail = pipe.execute()
        return _hash(info), _hash(recent.activity(meta, tail))

    def exists(self, name: SessionName) -> bool:
        with redis_errors("check session"):
            return bool(self._r.sismember(self.keys.session_set(name), name))

    def session_ids(self, namespace: str | None = None) -> list[str]:
        """Every session's internal name (`Keys.session_name`), sorted; with a namespace,
        the ids of the sessions it owns (a session with turns but no owner record predates
        namespaces: it is the default one's).

        A namespace's list reads its own index (`Keys.namespace_sessions`), so what it costs
        follows that namespace's sessions, not every tenant's; each entry's owner is read
        back (an entry left behind by a session erased or replaced is not listed)."""
        k = self.keys
        if namespace is None:
            with redis_errors("list sessions"):
                return sorted(set_union(self._r, k.all_sessions()))
        self._ensure_namespace_index()
        with redis_errors("list sessions"):
            ids = sorted(set_union(self._r, k.all_namespace_sessions(namespace)))
            if not ids:
                return ids
            owners = self._owners([session_name(namespace, sid) for sid in ids])
        return [sid for sid, owner in zip(ids, owners, strict=True) if owner == namespace]

    def _owners(self, names: Sequence[SessionName]) -> list[str | None]:
        pipe = self._r.pipeline(transaction=False)
        for name in names:
            head.queue_read(pipe, self.keys, name)
        replies = pipe.execute()
        n = head.READS
        return [head.decode(*replies[n * i:n * i + n])[1] for i in range(len(names))]

    def _ensure_namespace_index(self) -> None:
        """List every session owned before the namespace indexes existed in its owner's
        index, once per store (a marker says it was done; the writes that give a session
        its owner keep the indexes since). Idempotent: two processes doing it at once add
        the same members."""
        if self._index_built:
            return
        k = self.keys
        with redis_errors("build namespace index"):
            if self._r.exists(k.namespace_index_built):
                self._index_built = True
                return
            names = sorted(SessionName(n) for n in set_union(self._r, k.all_sessions()))
            for start in range(0, len(names), _INDEX_BATCH):
                chunk = names[start:start + _INDEX_BATCH]
                pipe = self._r.pipeline(transaction=False)
                for name, owner in zip(chunk, self._owners(chunk), strict=True):
                    namespace, sid = Keys.split_name(name)
                    # A session under another namespace's name is a legacy one that
                    # `session_names.migrate` renames (and indexes) first.
                    if owner == namespace:
                        pipe.sadd(k.namespace_session_set(name), sid)
                pipe.execute()
            self._r.set(k.namespace_index_built, 1)
        self._index_built = True

    # -- state as data (export / import) ---------------------------------------------------

    def dump_state(self, name: SessionName) -> dict[str, Any]:
        """Everything about the session in Redis that its turns, episodes, facts and audit
        events do not already say. Transient keys (leases, locks, buffers) are left out."""
        k = self.keys
        with redis_errors("dump session state"):
            pipe = self._r.pipeline(transaction=False)
            recent.queue_activity(pipe, k, name)
            pipe.hgetall(k.session_info(name))
            head.queue_read(pipe, k, name)
            pipe.get(k.session_processed(name))
            pipe.get(k.session_dead(name))
            pipe.hgetall(k.boundary_state(name))
            pipe.get(k.reflected(name))
            (meta, tail, info, fields, done, dead, boundary, reflected) = pipe.execute()
        seq, owner = head.decode(fields)
        # An owner the session never recorded (it predates namespaces) is not written out.
        namespace = owner if fields[1] is not None else None
        return {
            "meta": _hash(recent.activity(meta, tail)),
            "info": _hash(info),
            "seq": seq,
            "processed": base64.b64encode(done).decode("ascii") if done else "",
            "dead": base64.b64encode(dead).decode("ascii") if dead else "",
            "boundary": _hash(boundary),
            "reflected": int(reflected or 0),
            "namespace": namespace,
        }

    def restore_state(self, name: SessionName, state: dict[str, Any]) -> None:
        """Write a dumped state back (over whatever the session has in those keys)."""
        k = self.keys
        with redis_errors("restore session state"):
            pipe = self._r.pipeline(transaction=True)
            for key, mapping in ((k.session_meta(name), state.get("meta")),
                                 (k.session_info(name), state.get("info")),
                                 (k.boundary_state(name), state.get("boundary"))):
                pipe.delete(key)
                if mapping:
                    pipe.hset(key, mapping=mapping)
            # The counter and owner go to the ids hash.
            if state.get("seq"):
                pipe.hset(k.session_turn_ids(name), head.SEQ_FIELD, int(state["seq"]))
            for key, blob in ((k.session_processed(name), state.get("processed")),
                              (k.session_dead(name), state.get("dead"))):
                pipe.delete(key)
                if blob:
                    pipe.set(key, base64.b64decode(blob))
            if state.get("reflected"):
                pipe.set(k.reflected(name), int(state["reflected"]))
            if state.get("namespace"):
                pipe.hset(k.session_turn_ids(name), head.NS_FIELD,
                          str(state["namespace"]))
            owner = state.get("namespace") or (DEFAULT_NAMESPACE if state.get("seq") else None)
            if owner:
                pipe.sadd(k.namespace_session_set(name), Keys.split_name(name)[1])
            pipe.sadd(k.session_set(name), name)
            pipe.execute()

    def add_turn_ids(self, name: SessionName, turns: Sequence[Turn]) -> None:
        """Idempotency ids for imported turns (a re-ingest of the same turn id is a no-op)."""
        if not turns:
            return
        ids = head.valid_ids(turns)
        if not ids:
            return
        with redis_errors("restore turn ids"):
            self._r.hset(self.keys.session_turn_ids(name),
                         mapping=ids)  # type: ignore[arg-type]

    def set_recent(self, name: SessionName, turns: Sequence[Turn], window: int) -> None:
        """The recent window from the session's newest turns."""
        if window <= 0 or not turns:
            return
        with redis_errors("restore recent window"):
            pipe = self._r.pipeline(transaction=True)
            recent.queue_write(pipe, self.keys, name, turns, window)
            pipe.execute()

    def add_episodes(self, name: SessionName, episodes: Sequence[Episode]) -> None:
        if not episodes:
            return
        k = self.keys
        with redis_errors("restore episodes"):
            pipe = self._r.pipeline(transaction=True)
            for episode in episodes:
                pipe.set(k.episode(name, episode.episode_id), episode.model_dump_json())
                pipe.rpush(k.session_episodes(name), episode.episode_id)
            pipe.execute()

    def overwrite_episodes(self, episodes: Sequence[Episode]) -> None:
        """Replace the bodies of episodes the session already lists (one MULTI per
        session: a MULTI stays in one slot)."""
        by_session: dict[SessionName, list[Episode]] = {}
        for episode in episodes:
            name = session_name(episode.namespace, episode.session_id)
            by_session.setdefault(name, []).append(episode)
        with redis_errors("overwrite episodes"):
            for name, group in by_session.items():
                pipe = self._r.pipeline(transaction=True)
                for episode in group:
                    pipe.set(self.keys.episode(name, episode.episode_id),
                             episode.model_dump_json())
                pipe.execute()

    def episode_ids(self, name: SessionName) -> list[str]:
        with redis_errors("list episodes"):
            return [as_text(i) for i in self._r.lrange(self.keys.session_episodes(name),
                                                       0, -1)]

    def episodes_exist(self, name: SessionName, episode_ids: Sequence[str]) -> bool:
        if not episode_ids:
            return False
        with redis_errors("check episodes"):
            return bool(self._r.exists(*[self.keys.episode(name, e) for e in episode_ids]))

    def purge(self, name: SessionName) -> int:
        """Remove the session's Redis state: every key `Keys.session_keys` lists, and its
        entry in the partition's session set and boundary waiting list (import --mode
        replace, before it writes the file's version; and every forget). Returns how many
        keys existed."""
        k = self.keys
        episodes = self.episode_ids(name)
        with redis_errors("purge session"):
            owner = self._owners([name])[0]
        with redis_errors("purge session"):
            # One MULTI: every key is in the session's slot (the session set too).
            pipe = self._r.pipeline(transaction=True)
            pipe.delete(*k.session_keys(name, episodes))
            pipe.srem(k.session_set(name), name)
            if owner is not None:
                pipe.srem(k.namespace_session_set(name), Keys.split_name(name)[1])
            pipe.zrem(k.boundary_waiting(k.partition(name)), name)
            deleted = pipe.execute()[0]
        return int(deleted)
