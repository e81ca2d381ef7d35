"""What the adapters need of a hivemem handle: the methods `ScopedMemory` (embedded or
server) and `RemoteMemory` (`hivemem.connect`) both offer, so an adapter takes either.

Also the small shared pieces: running a sync handle from async code, and reading a
session's turns back in order (`session_turns`), which several adapters need.
"""

from __future__ import annotations

import asyncio
import functools
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, ParamSpec, Protocol, TypeVar

from hivemem import (
    KeyedTurn,
    NotFound,
    RecallPolicy,
    RecallResult,
    Role,
    Scope,
    SessionStats,
    TimelineEvent,
    Turn,
)

_PLAIN = re.compile(r"[A-Za-z0-9_-]")
_ESCAPE = re.compile(r"::([0-9a-f]{6})|:([0-9a-f]{4})")
P = ParamSpec("P")
R = TypeVar("R")


class MemoryHandle(Protocol):
    """The scoped surface the adapters use (a subset of `ScopedMemory` / `RemoteMemory`)."""

    @property
    def scope(self) -> Scope: ...

    def ingest(
        self, session_id: str, role: str | Role, content: str, *,
        markers: Iterable[str] | None = None, metadata: Mapping[str, Any] | None = None,
        timestamp: datetime | None = None, turn_id: str | None = None,
        visibility: str = "shared", durable: bool | None = None,
    ) -> Turn: ...

    def ingest_many(
        self, turns: Iterable[Mapping[str, Any]], *, durable: bool | None = None,
        validate_only: bool = False,
    ) -> list[Turn]: ...

    def recall(
        self, session_id: str, query: str, token_budget: int | None = None, *,
        preset: str | RecallPolicy | None = None, limit: int | None = None,
        include_history: bool = False, include_archived: bool = False,
        explain: bool = False, related_sessions: Sequence[str] = (),
    ) -> RecallResult: ...

    def timeline(
        self, session_id: str, *, kinds: Sequence[str] | None = None,
        limit: int | None = None,
    ) -> list[TimelineEvent]: ...

    def sessions(self) -> list[str]: ...

    def wait_until_processed(
        self, session_id: str, timeout: float = 30.0, *, stage: str = "embed"
    ) -> SessionStats: ...


async def in_thread(fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
    """Run a blocking handle call off the event loop (the handles are sync; their calls
    are short Redis/HTTP round trips)."""
    return await asyncio.to_thread(functools.partial(fn, *args, **kwargs))


# (namespace, session) written by this process and not read since, oldest first; bounded,
# so that a process that writes many sessions it never reads does not grow it forever (a
# session dropped from it is read without waiting).
_written: dict[tuple[str, str], None] = {}
_WRITTEN_MAX = 10_000
_written_lock = threading.Lock()


def wrote(memory: MemoryHandle, session_ids: Iterable[str]) -> None:
    """Note that this process wrote to these sessions: the next read of one waits until
    the writes are stored (`session_turns`)."""
    namespace = memory.scope.namespace
    with _written_lock:
        for sid in session_ids:
            _written.pop((namespace, sid), None)
            _written[(namespace, sid)] = None
        while len(_written) > _WRITTEN_MAX:
            del _written[next(iter(_written))]


def session_turns(
    memory: MemoryHandle, session_id: str, *, wait: float | None = 10.0,
    limit: int | None = None,
) -> list[TimelineEvent]:
    """The session's turns this handle may see, oldest first (`limit`: the newest that
    many); ``[]`` for a session that has none yet.

    Read-your-writes: when this process wrote to the session since its last read (`wrote`),
    the read first waits (at most `wait` seconds) until those turns are stored, since the
    timeline reads the stored turns. A session nobody here wrote to is read at once (a wait
    costs a stats read; another process's writes show once stored)."""
    try:
        settle(memory, session_id, wait)
        return memory.timeline(session_id, kinds=["turn"], limit=limit)
    except NotFound:
        return []


def settle(memory: MemoryHandle, session_id: str, wait: float | None) -> None:
    """Read-your-writes (see `session_turns`): wait until what this process wrote to the
    session is stored, when it wrote since its last read."""
    key = (memory.scope.namespace, session_id)
    if wait and key in _written:
        with _written_lock:  # first: a write during the wait marks it again
            _written.pop(key, None)
        memory.wait_until_processed(session_id, wait)


def session_latest(
    memory: MemoryHandle, session_id: str, by: str, keys: Sequence[str] | None = None, *,
    wait: float | None = 10.0, with_turns: bool = True,
) -> dict[str, KeyedTurn] | None:
    """Each key's latest turn through the handle's key index (`latest`: the embedded,
    server and remote handles have it), after `settle`; ``{}`` for a session with no
    turns; None when the handle has no key index (a handle of an older hivemem): the
    caller reads the turns instead."""
    latest = getattr(memory, "latest", None)
    if latest is None:
        return None
    try:
        settle(memory, session_id, wait)
        found: dict[str, KeyedTurn] = latest(session_id, by, keys, with_turns=with_turns)
    except NotFound:
        return {}
    return found


class SessionListing:
    """The hivemem namespace's session ids (`sessions()`), listed again once `ttl`
    seconds old (0: on every read): an adapter that must learn which sessions exist on
    each call (a search over a user's sessions) pays the listing (two round trips, and a
    read per session of the namespace) once per `ttl`, not once per call. This process's
    own new sessions show at once (`add`); another process's within `ttl` seconds."""

    def __init__(self, memory: MemoryHandle, ttl: float) -> None:
        self.memory = memory
        self.ttl = ttl
        self._listed: tuple[float, frozenset[str]] | None = None
        self._lock = threading.Lock()

    def get(self) -> frozenset[str]:
        if self.ttl <= 0:
            return frozenset(self.memory.sessions())
        now = time.monotonic()
        with self._lock:
            listed = self._listed
        if listed is None or now - listed[0] >= self.ttl:
            listed = (now, frozenset(self.memory.sessions()))
            with self._lock:
                self._listed = listed
        return listed[1]

    def add(self, session_ids: Iterable[str]) -> None:
        """Sessions this process wrote to: listed from now on, without listing again."""
        with self._lock:
            listed = self._listed
            if listed is not None:
                fresh = set(session_ids).difference(listed[1])
                if fresh:  # a copy only for a new session, not on every write
                    self._listed = (listed[0], listed[1].union(fresh))


class ListingCached:
    """Mixin of an adapter that keeps a `SessionListing` as ``_listing``: its ttl as the
    adapter's `list_cache` attribute (seconds a search reuses the listing; 0: list on
    every search), settable after construction."""

    _listing: SessionListing

    @property
    def list_cache(self) -> float:
        return self._listing.ttl

    @list_cache.setter
    def list_cache(self, seconds: float) -> None:
        self._listing.ttl = seconds


def encode_label(label: str) -> str:
    """A label as a piece of a session id: ``[A-Za-z0-9_-]`` kept, any other character
    written ``:xxxx`` (its code in hex; ``::xxxxxx`` beyond U+FFFF). Never holds a ``.``,
    so labels joined with ``.`` split back unambiguously."""
    return "".join(c if _PLAIN.fullmatch(c) else _escape(c) for c in label)


def decode_label(piece: str) -> str:
    return _ESCAPE.sub(lambda m: chr(int(m.group(1) or m.group(2), 16)), piece)


def _escape(char: str) -> str:
    code = ord(char)
    return f":{code:04x}" if code < 0x10000 else f"::{code:06x}"
