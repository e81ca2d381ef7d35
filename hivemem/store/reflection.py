"""Redis state of reflection: the per-session lock, the in-order pointer, traces."""

from __future__ import annotations

import contextlib
import json
import secrets
import threading
import time
from typing import Any

from hivemem.domain.scope import DEFAULT_NAMESPACE, Scope
from hivemem.errors import MalformedEntry, RetryLater
from hivemem.pipeline.messages import TraceEntry
from hivemem.pipeline.topology import Keys, SessionName, session_name
from hivemem.store.redis import Redis, as_text, redis_errors
from hivemem.store.scripts import lua


def trace_session(trace: dict[str, Any]) -> SessionName:
    """The internal name of a reflection trace's session (traces from before namespaces
    name none: ``default``'s)."""
    return session_name(str(trace.get("namespace") or DEFAULT_NAMESPACE),
                        str(trace.get("session_id") or ""))


class SessionLock:
    """A lease on one session's facts, renewed in the background while held.

    `check()` (a Lua compare-and-renew) runs right before every write: a holder whose lease
    lapsed (a stalled process) finds out there and writes nothing.
    """

    def __init__(self, client: Redis, key: str, lease_ms: int, token: str | None = None) -> None:
        self._r = client
        self.key = key
        self.lease_ms = lease_ms
        # A holder that may die and come back (a forget resumed by the next process) names
        # its token: the lease it left is then taken over, not waited out.
        self.token = token or secrets.token_hex(8)
        self._renew = client.register_script(lua("renew_lease"))
        self._release = client.register_script(lua("release_lease"))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def acquire(self, wait_s: float) -> None:
        deadline = time.monotonic() + wait_s
        while True:
            with redis_errors("acquire reflect lock"):
                if self._r.set(self.key, self.token, nx=True, px=self.lease_ms) or self._renew(
                        keys=[self.key], args=[self.token, self.lease_ms]):
                    break
            if time.monotonic() >= deadline:
                raise RetryLater(f"{self.key} is held by another reflection")
            time.sleep(0.05)
        self._thread = threading.Thread(target=self._keep_alive, daemon=True)
        self._thread.start()

    def _keep_alive(self) -> None:
        while not self._stop.wait(self.lease_ms / 3000):
            try:
                if not self._renew(keys=[self.key], args=[self.token, self.lease_ms]):
                    return
            except Exception:
                return

    def check(self) -> None:
        with redis_errors("check reflect lock"):
            ok = self._renew(keys=[self.key], args=[self.token, self.lease_ms])
        if not ok:
            raise RetryLater(f"lost {self.key} (lease expired)")

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1)
        with contextlib.suppress(Exception):  # if it fails, the lease expires on its own
            self._release(keys=[self.key], args=[self.token])


_TRACKED = "tracked"


class ReflectionState:
    def __init__(self, client: Redis, keys: Keys, traces_maxlen: int = 1000) -> None:
        self._r = client
        self.keys = keys
        self.traces_maxlen = traces_maxlen
        self._advance = client.register_script(lua("reflection_advance"))

    def lock(self, name: SessionName, lease_ms: int, token: str | None = None) -> SessionLock:
        return SessionLock(self._r, self.keys.reflect_lock(name), lease_ms, token)

    def reflected(self, name: SessionName) -> int:
        with redis_errors("read reflected pointer"):
            raw = self._r.get(self.keys.reflected(name))
        return 0 if raw is None else int(raw)

    def advance(self, name: SessionName, lock: SessionLock, index: int) -> None:
        with redis_errors("advance reflected pointer"):
            result = self._advance(
                keys=[lock.key, self.keys.reflected(name)], args=[lock.token, index]
            )
        if int(result) < 0:
            raise RetryLater(f"lost {lock.key} before recording episode {index}")

    def add_trace(self, trace: dict[str, Any]) -> None:
        with redis_errors("record trace"):
            self._r.xadd(
                self.keys.traces_stream,
                TraceEntry(trace=trace).to_fields(),  # type: ignore[arg-type]
                maxlen=self.traces_maxlen,
                approximate=True,
            )
            session_id, index = trace.get("session_id"), trace.get("index")
            if isinstance(session_id, str) and isinstance(index, int):
                # Kept beside the bounded traces stream so that a session's failed
                # reflections are one read, not a decode of the newest (large) traces.
                failed = self.keys.reflections_failed(trace_session(trace))
                pipe = self._r.pipeline(transaction=False)
                pipe.hset(failed, _TRACKED, "1")
                if trace.get("failed"):
                    pipe.hset(failed, str(index), "1")
                else:
                    pipe.hdel(failed, str(index))
                pipe.execute()

    def failed_indexes(self, name: SessionName) -> list[int] | None:
        """Indexes of the session's episodes whose latest reflection failed; None for a
        session with no reflection recorded since these were kept (read its traces)."""
        with redis_errors("read failed reflections"):
            fields = self._r.hkeys(self.keys.reflections_failed(name))
        names = [as_text(f) for f in fields]
        if _TRACKED not in names:
            return None
        return sorted(int(n) for n in names if n != _TRACKED)

    def traces(
        self, count: int = 20, name: SessionName | None = None, *, scope: Scope | None = None
    ) -> list[dict[str, Any]]:
        """Newest first. With a scope, only traces of episodes it may see (a trace shows
        its episode's turns): their episode bodies are read in one round trip per page."""
        with redis_errors("read traces"):
            scan = count * (5 if name or scope else 1)
            rows = self._r.xrevrange(self.keys.traces_stream, count=scan)
        out: list[dict[str, Any]] = []
        for _entry_id, fields in rows or []:
            decoded = {as_text(k): as_text(v) for k, v in (fields or {}).items()}
            try:
                trace = TraceEntry.from_fields(decoded).trace
            except MalformedEntry:
                continue
            if name is None or trace_session(trace) == name:
                out.append(trace)
        if scope is not None:
            out = self._visible(out, scope)
        return out[:count]

    def _visible(self, traces: list[dict[str, Any]], scope: Scope) -> list[dict[str, Any]]:
        if not traces:
            return []
        with redis_errors("read trace episodes"):
            # One GET each, pipelined: the episodes live in their sessions' slots.
            pipe = self._r.pipeline(transaction=False)
            for t in traces:
                pipe.get(self.keys.episode(trace_session(t), str(t.get("episode_id") or "")))
            bodies = pipe.execute()
        kept: list[dict[str, Any]] = []
        for trace, body in zip(traces, bodies, strict=True):
            # No episode body (purged, or never one): nothing to prove the trace is visible.
            if body is not None and scope.allows(json.loads(body)):
                kept.append(trace)
        return kept
