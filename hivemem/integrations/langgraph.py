"""LangGraph: `HivememStore`, a `BaseStore` over a scoped hivemem handle, and the nodes
`recall_node` / `ingest_node` that bring hivemem's recall into a graph's state and its turns
back into hivemem.

How a LangGraph store maps onto hivemem (the handle fixes hivemem's namespace and agent):

- A LangGraph namespace tuple is one hivemem *session* of the handle's namespace:
  ``("memories", "user-1")`` is session ``lg.memories.user-1`` (labels joined with ``.``,
  which LangGraph forbids inside a label; a character outside ``[A-Za-z0-9_-]`` is written
  ``:xxxx``, its code in hex, ``::xxxxxx`` beyond U+FFFF). Another handle of the same
  namespace sees the same items; a handle of another namespace sees none; a handle bound
  to an agent writes shared turns by default (``visibility="private"``: only that agent
  reads them back).
- ``put(ns, key, value)`` remembers one turn whose content is the JSON
  ``{"key": key, "value": value}``: the value is what recall embeds and ranks, and a put
  is an ordinary turn, so hivemem's reflection and currency see it too.
- ``get`` answers the newest put of the key through hivemem's key index
  (`latest`: the put's turn carries its key in ``metadata["langgraph_key"]``), on the
  embedded, server and remote handles alike, not by reading the namespace's every turn.
  ``delete`` (or ``put(..., None)``) remembers a tombstone
  ``{"key": key, "deleted": true}`` (``"deleted": true`` in its metadata too): hivemem's
  memory is append-only (nothing a scoped handle does erases a turn; an operator's forget
  does), so the history stays and reads skip what a tombstone ended.
- ``search(prefix, query=...)`` is hivemem's recall over each matching session, keeping
  the items that are still the current value of their key (the key index says which);
  ``score`` is recall's score.
  Without a query it lists the current items, newest first. Which namespaces exist is
  the hivemem namespace's session listing, reused for `list_cache` seconds (1 by
  default; this store's own puts show at once). ``filter`` matches the value
  as LangGraph's own stores do (exact values, ``$eq $ne $gt $gte $lt $lte``).
- A read of a namespace this process wrote to waits (up to `read_wait` seconds) until
  those turns are stored, so a read follows the writes before it; another process's
  writes show once stored (milliseconds later).
- No TTL (`supports_ttl` is False): retention is hivemem's job. ``index=`` is accepted
  and ignored: every put is recallable.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import orjson
from langchain_core.messages import AnyMessage
from langchain_core.runnables import RunnableConfig
from langgraph.store.base import (
    NOT_PROVIDED,
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    NotProvided,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    validate_op_namespace,
)

from hivemem import ContextItem, KeyedTurn, NotFound, TimelineEvent, ValidationError
from hivemem.integrations.handle import (
    ListingCached,
    MemoryHandle,
    SessionListing,
    decode_label,
    encode_label,
    in_thread,
    session_latest,
    session_turns,
    settle,
    wrote,
)

SESSION_PREFIX = "lg."
KEY_FIELD = "langgraph_key"  # the turn metadata field that holds an item's key
_MAX_SESSION = 128


@functools.lru_cache(maxsize=4096)
def namespace_to_session(namespace: tuple[str, ...]) -> str:
    """The hivemem session id of a LangGraph namespace tuple (see the module doc).
    Cached: every read and write of the store makes it (a regex per character)."""
    if not namespace:
        raise ValidationError("namespace", "must have at least one label")
    labels = []
    for label in namespace:
        if not isinstance(label, str) or not label or "." in label:
            raise ValidationError("namespace", "labels are non-empty strings without '.'")
        labels.append(encode_label(label))
    session = SESSION_PREFIX + ".".join(labels)
    if len(session) > _MAX_SESSION:
        raise ValidationError("namespace", f"encodes to more than {_MAX_SESSION} characters")
    return session


def session_to_namespace(session_id: str) -> tuple[str, ...] | None:
    """The namespace tuple a session id stands for; None for a session the store did
    not make."""
    if not session_id.startswith(SESSION_PREFIX):
        return None
    body = session_id[len(SESSION_PREFIX):]
    return tuple(decode_label(label) for label in body.split("."))


@dataclass(frozen=True)
class _Version:
    value: dict[str, Any]
    turn_id: str
    created_at: datetime
    updated_at: datetime


def _current(events: Iterable[TimelineEvent]) -> dict[str, _Version]:
    """Each key's current value from a session's turns, oldest first (tombstones end a
    key; a later put starts it again with a new `created_at`)."""
    live: dict[str, _Version] = {}
    for event in events:
        record = _decode(event.summary)
        if record is None:
            continue
        key, value = record
        if value is None:
            live.pop(key, None)
            continue
        before = live.get(key)
        created = before.created_at if before else event.at
        live[key] = _Version(value, event.ref_id, created, event.at)
    return live


def _decode(content: str) -> tuple[str, dict[str, Any] | None] | None:
    """(key, value or None for a tombstone) of a turn the store wrote; None otherwise."""
    try:
        # orjson: one C call per read (a get decodes one turn, a search each hit).
        record = orjson.loads(content)
    except ValueError:
        try:  # what orjson refuses and `json.dumps` writes: NaN, Infinity
            record = json.loads(content)
        except ValueError:
            return None
    if not isinstance(record, dict) or not isinstance(record.get("key"), str):
        return None
    if record.get("deleted") is True:
        return record["key"], None
    value = record.get("value")
    return (record["key"], value) if isinstance(value, dict) else None


def _best(result: Iterable[ContextItem]) -> list[ContextItem]:
    """The recalled turns, best first."""
    return sorted((i for i in result if i.source_type == "turn"), key=lambda i: -i.score)


def _keys(items: Iterable[ContextItem]) -> list[str]:
    """The item keys these turns carry (a put's key is in its metadata too)."""
    return list({k: None for i in items
                 if isinstance(k := i.metadata.get(KEY_FIELD), str) and k})


def _matches(value: Any, wanted: Any) -> bool:
    """LangGraph's filter semantics (as its InMemoryStore applies them)."""
    if isinstance(wanted, dict):
        if any(k.startswith("$") for k in wanted):
            return all(_operator(value, op, arg) for op, arg in wanted.items())
        return isinstance(value, dict) and all(
            _matches(value.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, list | tuple):
        return (isinstance(value, list | tuple) and len(value) == len(wanted)
                and all(_matches(a, b) for a, b in zip(value, wanted, strict=True)))
    return bool(value == wanted)


def _operator(value: Any, op: str, arg: Any) -> bool:
    if op == "$eq":
        return bool(value == arg)
    if op == "$ne":
        return bool(value != arg)
    if value is None:
        return False
    try:
        if op == "$gt":
            return bool(value > arg)
        if op == "$gte":
            return bool(value >= arg)
        if op == "$lt":
            return bool(value < arg)
        if op == "$lte":
            return bool(value <= arg)
    except TypeError:
        return False
    raise ValidationError("filter", f"unknown operator {op!r}")


def _path_matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    pairs = (zip(namespace, path, strict=False) if condition.match_type == "prefix"
             else zip(reversed(namespace), reversed(path), strict=False))
    return all(p in ("*", n) for n, p in pairs)


class HivememStore(ListingCached, BaseStore):
    """A LangGraph `BaseStore` over a scoped hivemem handle (local or remote).

    ``HivememStore(MemoryClient.local("./memory").scoped(namespace="app", agent_id="bot"))``
    then ``graph.compile(store=store)``. `visibility`: what puts write (``"shared"`` with
    the namespace, or ``"private"`` to the handle's agent). `recall_budget`: the token
    budget of the recall behind a search with a query. `read_wait`: seconds a read waits
    for the writes before it to be stored (0: no wait). `list_cache`: seconds a search
    reuses the listing of the hivemem namespace's sessions (which LangGraph namespaces
    exist) before listing again: a namespace another handle creates shows in searches
    within that time (this store's own puts show at once; 0: list on every search).
    """

    supports_ttl = False

    def __init__(
        self, memory: MemoryHandle, *, visibility: str = "shared",
        recall_budget: int = 4000, read_wait: float = 10.0, list_cache: float = 1.0,
    ) -> None:
        self.memory = memory
        self.visibility = visibility
        self.recall_budget = recall_budget
        self.read_wait = read_wait
        # A search pays the listing (two round trips) once per `list_cache` seconds, not
        # once per call.
        self._listing = SessionListing(memory, list_cache)

    # -- BaseStore ---------------------------------------------------------------------------

    def get(self, namespace: tuple[str, ...], key: str, *,
            refresh_ttl: bool | None = None) -> Item | None:
        """`BaseStore.get` without a batch around its one read (no TTL to refresh): the
        labels checked as LangGraph checks them, then one key index read."""
        op = GetOp(namespace, str(key))
        validate_op_namespace(op)
        return self._get(op)

    async def aget(self, namespace: tuple[str, ...], key: str, *,
                   refresh_ttl: bool | None = None) -> Item | None:
        op = GetOp(namespace, str(key))
        validate_op_namespace(op)
        return await in_thread(self._get, op)

    def put(self, namespace: tuple[str, ...], key: str, value: Mapping[str, Any] | None,
            index: Literal[False] | list[str] | None = None, *,
            ttl: float | NotProvided | None = NOT_PROVIDED) -> None:
        """`BaseStore.put` without a batch around its one write (what an agent calls on
        every turn): LangGraph's checks, then the one ingest."""
        self._write_one(self._put_op(namespace, key, value, index, ttl))

    async def aput(self, namespace: tuple[str, ...], key: str,
                   value: Mapping[str, Any] | None,
                   index: Literal[False] | list[str] | None = None, *,
                   ttl: float | NotProvided | None = NOT_PROVIDED) -> None:
        op = self._put_op(namespace, key, value, index, ttl)
        await in_thread(self._write_one, op)

    def _put_op(self, namespace: tuple[str, ...], key: str, value: Mapping[str, Any] | None,
                index: Literal[False] | list[str] | None, ttl: float | NotProvided | None,
                ) -> PutOp:
        """The put as `BaseStore.put` checks it: a namespace LangGraph accepts (not empty,
        its labels, not under "langgraph"), no TTL (this store has none)."""
        if not namespace:
            raise InvalidNamespaceError("Namespace cannot be empty.")
        op = PutOp(tuple(namespace), str(key), value, index=index)
        validate_op_namespace(op)
        if namespace[0] == "langgraph":
            raise InvalidNamespaceError(
                f'Root label for namespace cannot be "langgraph". Got: {namespace}')
        if ttl is not NOT_PROVIDED and ttl is not None:
            raise NotImplementedError(
                f"TTL is not supported by {type(self).__name__}. "
                "Use a store implementation that supports TTL or set ttl=None.")
        return op

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """The batch's reads see the store as it was before the batch; its puts are applied
        after them, all in one ingest (as LangGraph's InMemoryStore does)."""
        ops = list(ops)
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append(self._get(op))
            elif isinstance(op, SearchOp):
                results.append(self._search(op))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(op))
            elif isinstance(op, PutOp):
                results.append(None)
            else:
                raise ValidationError("ops", f"unknown operation {type(op).__name__}")
        self._write([op for op in ops if isinstance(op, PutOp)])
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await in_thread(self.batch, list(ops))

    # -- the operations ----------------------------------------------------------------------

    def _write(self, puts: list[PutOp]) -> None:
        """All the batch's puts in one ingest (all or nothing on bad input); the last put
        of a key in a batch wins, as LangGraph's stores do."""
        if not puts:
            return
        last: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for op in puts:
            last[(tuple(op.namespace), op.key)] = op
        self._ingest([self._row(op) for op in last.values()])

    def _write_one(self, op: PutOp) -> None:
        """`_write` of one put."""
        self._ingest([self._row(op)])

    def _ingest(self, rows: list[dict[str, Any]]) -> None:
        """The puts' turns in one ingest; later reads here wait for them."""
        self.memory.ingest_many(rows)
        written = [str(row["session_id"]) for row in rows]
        wrote(self.memory, written)
        self._listing.add(written)  # a namespace this store made is searched at once

    def _row(self, op: PutOp) -> dict[str, Any]:
        """The turn a put remembers: its JSON record, the key in the metadata (what
        hivemem's key index reads, `latest`)."""
        key = op.key
        if op.value is None:
            record: dict[str, Any] = {"key": key, "deleted": True}
            meta: dict[str, Any] = {KEY_FIELD: key, "deleted": True}
        else:
            record = {"key": key, "value": dict(op.value)}
            meta = {KEY_FIELD: key}
        return {"session_id": namespace_to_session(tuple(op.namespace)), "role": "system",
                "content": json.dumps(record, ensure_ascii=False, default=str),
                "visibility": self.visibility, "metadata": meta}

    def _items(self, namespace: tuple[str, ...], keys: list[str] | None = None
               ) -> dict[str, _Version]:
        """The namespace's current items (only `keys`, when given): through hivemem's key
        index when the handle has one, else from the session's turns."""
        session = namespace_to_session(namespace)
        latest = session_latest(self.memory, session, KEY_FIELD, keys, wait=self.read_wait)
        if latest is None:
            found = _current(session_turns(self.memory, session, wait=self.read_wait))
            return found if keys is None else {k: found[k] for k in keys if k in found}
        items = {}
        for key, keyed in latest.items():
            record = _decode(keyed.turn.content) if keyed.turn is not None else None
            if record is not None and record[1] is not None:
                items[key] = _Version(record[1], keyed.turn_id, keyed.since, keyed.at)
        return items

    def _current_keys(self, namespace: tuple[str, ...], keys: list[str] | None = None
                      ) -> dict[str, KeyedTurn] | None:
        """key -> its current entry (no values read), only `keys` when given; None when
        the handle has no key index."""
        session = namespace_to_session(namespace)
        return session_latest(self.memory, session, KEY_FIELD, keys, wait=self.read_wait,
                              with_turns=False)

    def _get(self, op: GetOp) -> Item | None:
        namespace = tuple(op.namespace)
        session = namespace_to_session(namespace)
        latest = session_latest(self.memory, session, KEY_FIELD, [op.key],
                                wait=self.read_wait)
        if latest is None:  # no key index: from the session's turns
            found = self._items(namespace, [op.key]).get(op.key)
            if found is None:
                return None
            return Item(value=found.value, key=op.key, namespace=namespace,
                        created_at=found.created_at, updated_at=found.updated_at)
        keyed = latest.get(op.key)
        if keyed is None or keyed.turn is None:
            return None
        record = _decode(keyed.turn.content)
        if record is None or record[1] is None:
            return None
        return Item(value=record[1], key=op.key, namespace=namespace,
                    created_at=keyed.since, updated_at=keyed.at)

    def _sessions(self, cached: bool) -> Iterable[str]:
        return self._listing.get() if cached else self.memory.sessions()

    def _namespaces(self, conditions: Iterable[MatchCondition], *, cached: bool = False
                    ) -> list[tuple[str, ...]]:
        found = []
        for session in self._sessions(cached):
            namespace = session_to_namespace(session)
            if namespace is not None and all(_path_matches(c, namespace) for c in conditions):
                found.append(namespace)
        return sorted(found)

    def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = MatchCondition("prefix", tuple(op.namespace_prefix))
        hits: list[SearchItem] = []
        for namespace in self._namespaces([prefix], cached=True):
            if op.query and not op.filter:
                found = self._recalled_current(namespace, op.query, op.offset + op.limit)
                if found is not None:  # values from recall's items: no turn read
                    hits.extend(found)
                    continue
            items = self._items(namespace)
            chosen = {k: v for k, v in items.items()
                      if not op.filter or _matches(v.value, op.filter)}
            if op.query:
                hits.extend(self._recalled(namespace, op.query, chosen))
            else:
                hits.extend(SearchItem(namespace, k, v.value, v.created_at, v.updated_at)
                            for k, v in chosen.items())
        if op.query:
            hits.sort(key=lambda h: -(h.score or 0.0))
        else:
            hits.sort(key=lambda h: h.updated_at, reverse=True)
        return hits[op.offset:op.offset + op.limit]

    def _recalled(
        self, namespace: tuple[str, ...], query: str, items: Mapping[str, _Version],
    ) -> list[SearchItem]:
        """Recall over the namespace's session, kept to the turns that are still their
        key's current value."""
        current = {v.turn_id: k for k, v in items.items()}
        try:
            result = self.memory.recall(namespace_to_session(namespace), query,
                                        self.recall_budget)
        except NotFound:
            return []
        hits = []
        for item in result:
            key = current.get(item.source_id) if item.source_type == "turn" else None
            if key is not None:
                v = items[key]
                hits.append(SearchItem(namespace, key, v.value, v.created_at, v.updated_at,
                                       score=item.score))
        return hits

    def _recalled_current(self, namespace: tuple[str, ...], query: str, wanted: int
                          ) -> list[SearchItem] | None:
        """The `wanted` best recalled items of the namespace's session that are still
        their key's current value, each value read from its item: the key index is asked
        about the best-scored items' keys only, a few more than wanted at a time (an item
        an update or delete made stale is passed over). None when the handle has no key
        index."""
        if getattr(self.memory, "latest", None) is None:
            return None
        session = namespace_to_session(namespace)
        chunk = max(2 * wanted, 8)
        both = getattr(self.memory, "recall_latest", None)
        try:
            if both is None:  # a handle without it: recall, then `latest` per chunk
                result = self.memory.recall(session, query, self.recall_budget)
                first: dict[str, KeyedTurn] | None = None
            else:
                # Recall and the first chunk's key lookup in one call: the session's
                # scope is checked once (the check is a round trip), not twice.
                settle(self.memory, session, self.read_wait)
                result, first = both(session, query, KEY_FIELD, self.recall_budget,
                                     keys_of=lambda r: _keys(_best(r)[:chunk]))
        except NotFound:
            return []
        turns = _best(result)
        hits: list[SearchItem] = []
        for start in range(0, len(turns), chunk):
            # Each decoded only when its chunk is reached (most searches stop at the first).
            part = []
            for item in turns[start:start + chunk]:
                record = _decode(item.content)
                if record is not None and record[1] is not None:
                    part.append((item, record[0], record[1]))
            if not part:
                continue
            if start == 0 and first is not None:
                current = first
            else:
                current = self._current_keys(namespace, list({k for _, k, _ in part})) or {}
            for item, key, value in part:
                keyed = current.get(key)
                if keyed is not None and keyed.turn_id == item.source_id:
                    hits.append(SearchItem(namespace, key, value, keyed.since, keyed.at,
                                           score=item.score))
            if len(hits) >= wanted:
                break
        return hits[:wanted]

    def _any_items(self, namespace: tuple[str, ...]) -> bool:
        keys = self._current_keys(namespace)
        return bool(keys) if keys is not None else bool(self._items(namespace))

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        found = [ns for ns in self._namespaces(op.match_conditions or ())
                 if self._any_items(ns)]
        if op.max_depth is not None:
            found = sorted({ns[:op.max_depth] for ns in found})
        return found[op.offset:op.offset + op.limit]


# -- nodes ---------------------------------------------------------------------------------

_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}
_TURN_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def thread_session(config: RunnableConfig) -> str:
    """The hivemem session of a LangGraph run: its ``thread_id``."""
    thread = (config.get("configurable") or {}).get("thread_id")
    if not thread:
        raise ValidationError("thread_id", "the run's config needs configurable.thread_id")
    return str(thread)


def _text(message: AnyMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return " ".join(part if isinstance(part, str) else str(part.get("text", ""))
                    for part in content)


def recall_node(
    memory: MemoryHandle, *, key: str = "memory_context", token_budget: int | None = None,
    session: Callable[[RunnableConfig], str] = thread_session,
) -> Callable[[dict[str, Any], RunnableConfig], dict[str, Any]]:
    """A node that recalls what matters for the newest human message of
    ``state["messages"]`` from the run's session and writes the rendered context (prompt
    text, ``""`` for a session with no memory yet) to ``state[key]``."""

    def node(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        asked = [m for m in state.get("messages", []) if m.type == "human"]
        if not asked:
            return {key: ""}
        try:
            result = memory.recall(session(config), _text(asked[-1]), token_budget)
        except NotFound:
            return {key: ""}
        return {key: result.render()}

    return node


def ingest_node(
    memory: MemoryHandle, *, session: Callable[[RunnableConfig], str] = thread_session,
) -> Callable[[dict[str, Any], RunnableConfig], dict[str, Any]]:
    """A node that remembers the run's newest exchange (the last human message and what
    followed it) as turns of the run's session. A message's ``id`` is its turn id, so a
    node that runs twice over the same messages writes them once."""

    def node(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        messages: list[AnyMessage] = list(state.get("messages", []))
        starts = [i for i, m in enumerate(messages) if m.type == "human"]
        rows = []
        sid = session(config)
        for message in messages[starts[-1] if starts else 0:]:
            text = _text(message)
            role = _ROLES.get(message.type)
            if role is None or not text.strip():
                continue
            row: dict[str, Any] = {"session_id": sid, "role": role, "content": text}
            if message.id and _TURN_ID.fullmatch(message.id):
                row["turn_id"] = message.id
            rows.append(row)
        if rows:
            memory.ingest_many(rows)
        return {}

    return node
