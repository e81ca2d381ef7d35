"""The vector-store interface, with two backends: a Qdrant server and embedded Qdrant Edge.

Qdrant is the system of record for turns: the payload holds the whole turn, so Redis state
can be rebuilt from it. Point ids derive from (session, turn id): a redelivery overwrites.
"""

from __future__ import annotations

import functools
import struct
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, cast

import numpy as np
import numpy.typing as npt

from hivemem.domain.fact import Fact
from hivemem.domain.models import Role, Turn, trusted_turn
from hivemem.domain.names import SessionName, session_name, split_session_name
from hivemem.domain.scope import DEFAULT_NAMESPACE, Scope
from hivemem.errors import ConfigurationError
from hivemem.pipeline.wire import turn_fields
from hivemem.providers.lexical import SparseVector

TURNS = "turns"
FACTS = "facts"
COLLECTIONS = (TURNS, FACTS)
# Which vector a turn search compares the query with.
TurnSearch = Literal["dense", "lexical"]
DENSE = "dense"
# BM25 term weights; the collection's IDF modifier supplies the IDF (see providers/lexical.py).
LEXICAL = "lexical"
# A turn embedded with the turns before it (`EmbeddingSettings.window_turns`): a reply such as
# "Yes, last Tuesday" matches the question its context was about. Turns only; optional per
# point (stores made before it, or a window of 0, have none).
WINDOW = "window"
# A turn's vector and its window's in one, (dense + W * window) / (1 + W) with W =
# `FUSED_WINDOW_WEIGHT`, both unit length (dot product, not cosine): its dot with a query is
# the dense similarity that recall ranks turns on (`scoring.dense_similarity` at the default
# `weights.window`), so one nearest-neighbour search finds the turns that the dense and the
# window searches found together (measured on LoCoMo dev: the same R@5/10/20 within 0.004,
# `bench/results/archive/2026-12-03/locomo_arms_fused.json`). A store that keeps it (qdrant-edge)
# keeps no window
# vector: the window is ((1 + W) * fused - dense) / W. A turn without a window: fused = dense.
FUSED = "fused"
FUSED_WINDOW_WEIGHT = 1.0
# Fields recall and rebuild filter or order on: each gets a payload index.
KEYWORD_FIELDS = (
    "session_id", "agent_id", "role", "markers", "status", "subject", "kind",
    "namespace", "visibility",
)
INTEGER_FIELDS = ("seq",)
# When `upsert_facts` wrote a fact (seconds, the writer's clock; not part of `Fact`): recall
# keeps a session's facts between calls and re-reads only those written since it last looked.
WRITTEN_AT = "written_at"
FLOAT_FIELDS = (WRITTEN_AT,)

_POINT_NAMESPACE = uuid.UUID("7d1c6f4e-8f0b-4c52-9a61-3f0c2b9e8a11")

Vector = npt.NDArray[np.float32]


# Point ids derived lately (recall reads the recent window's turns by id on every call:
# a uuid5 each, ~4 us, ~1% of a LoCoMo recall).
_POINT_IDS_KEPT = 16384


@functools.lru_cache(maxsize=_POINT_IDS_KEPT)
def turn_point_id(name: SessionName, turn_id: str) -> str:
    """A turn's point id, from its session's internal name (`hivemem.domain.names`):
    ``default``'s turns keep the ids they had before namespaces named sessions."""
    return str(uuid.uuid5(_POINT_NAMESPACE, f"turn/{name}/{turn_id}"))


def turn_payload(turn: Turn) -> dict[str, Any]:
    return {"kind": "turn", **turn_fields(turn), "ts": turn.timestamp.timestamp(),
            "seq": turn.seq}


def turn_from_payload(payload: dict[str, Any]) -> Turn:
    # Payloads are written by `turn_payload` from validated turns: constructing without
    # validation again is ~10x cheaper (and `trusted_turn` ~5x cheaper than
    # `model_construct`), and recall reads up to a hundred per call.
    return trusted_turn(
        turn_id=payload["turn_id"],
        session_id=payload["session_id"],
        agent_id=payload.get("agent_id"),
        role=Role(payload["role"]),
        content=payload["content"],
        markers=tuple(payload.get("markers") or ()),
        metadata=payload.get("metadata") or {},
        timestamp=datetime.fromisoformat(payload["timestamp"]),
        seq=int(payload["seq"]),
        token_count=int(payload.get("token_count", 0)),
        namespace=payload.get("namespace") or "default",
        visibility=payload.get("visibility") or "shared",
        duplicate=False,
    )


# Not converted yet (None is a value: a point without that vector).
_PENDING: Any = object()


# A stored role's member by its value (a dict lookup: calling the enum costs ~1 us; a value
# that is no role still raises as `Role(...)` does).
_ROLES: dict[object, Role] = {role.value: role for role in Role}


def turn_item_fields(payload: dict[str, Any]) -> dict[str, Any]:
    """The `ContextItem` fields of a stored turn, read from its payload as
    `turn_from_payload` reads them (recall's chosen turns; no `Turn` built on the way):
    the values `ContextItem` validation would make of them (`trusted_turn_item`)."""
    return {
        "content": payload["content"],
        "role": _ROLES.get(payload["role"]) or Role(payload["role"]),
        "token_count": int(payload.get("token_count", 0)),
        "source_id": payload["turn_id"],
        "session_id": payload["session_id"],
        "agent_id": payload.get("agent_id"),
        "seq": int(payload["seq"]),
        "timestamp": datetime.fromisoformat(payload["timestamp"]),
        "markers": tuple(payload.get("markers") or ()),
        "metadata": payload.get("metadata") or {},
        "namespace": payload.get("namespace") or "default",
        "visibility": payload.get("visibility") or "shared",
    }


class TurnHit:
    """A turn the store returned. The `Turn` is built from the payload only when asked for:
    recall reads a hundred hits a call and keeps about twenty.

    A backend may hand over its reply point unread (`from_reply`): its vectors are read and
    converted to arrays each on first use (reading a point's two 384-d vectors out of the
    engine and converting them costs ~13 us). Recall sees one turn in up to three searches
    and uses the vectors of the first; the window (or fused) vector only of turns whose
    window similarity no search gave. The engine's lists are not kept once converted:
    alive through a recall, ~60 lists of 384 floats made the garbage collector's young
    collections traverse them (0.17 ms each, about one a recall at 100k points)."""

    __slots__ = ("_fused", "_reply", "_turn", "_vector", "_window", "payload", "score")

    def __init__(
        self, payload: dict[str, Any], score: float, vector: Vector | None,
        window: Vector | None = None,
    ) -> None:
        self.payload = payload
        self.score = score
        self._vector = vector
        self._window = window
        self._reply: Any = None
        # The reply's fused vector (`FUSED`), when it has one: converted with the dense one.
        self._fused: Vector | None = None
        self._turn: Turn | None = None

    @classmethod
    def from_reply(cls, payload: dict[str, Any], score: float, reply: Any) -> TurnHit:
        """`reply`: the engine's point; its `vector` is read as `as_vector` reads it."""
        hit = cls(payload, score, _PENDING, _PENDING)
        hit._reply = reply
        return hit

    @classmethod
    def from_rows(cls, payload: dict[str, Any], score: float, dense: Vector,
                  fused: Vector) -> TurnHit:
        """A hit whose vectors were read as rows (`edge_rows`): the dense and fused ones,
        the window recovered from the two on first use (as from a reply with both)."""
        hit = cls(payload, score, dense, _PENDING)
        hit._fused = fused
        return hit

    def _engine_vectors(self) -> Any:
        """The reply's vectors, read anew from the engine (not kept: see the class)."""
        return None if self._reply is None else self._reply.vector

    @property
    def point_id(self) -> str:
        """The point's id in the store (from the reply when there is one: deriving it costs
        ~6 us)."""
        if self._reply is not None:
            return str(self._reply.id)
        return turn_point_id(payload_session(self.payload), self.turn_id)

    @property
    def engine_id(self) -> Any:
        """The point's id as the engine gives it (qdrant-edge: a `uuid.UUID`, built anew on
        each read; comparing these skips formatting it, ~3 us a point)."""
        if self._reply is not None:
            return self._reply.id
        return uuid.UUID(self.point_id)

    @property
    def vector(self) -> Vector | None:
        if self._vector is _PENDING:
            self._read_vectors()
        return self._vector

    def _read_vectors(self) -> None:
        """The dense vector out of the reply, and the fused one when the reply has it (a
        backend asks for it only where recall needs the window similarity): one read."""
        values = self._engine_vectors()
        self._vector = as_vector(values)
        if isinstance(values, dict) and FUSED in values:
            self._fused = as_vector(values, FUSED)

    @property
    def carries_fused(self) -> bool:
        """Whether its window's similarity follows from what it carries (`window_score`)
        without asking the engine: its reply has the fused vector."""
        if self._vector is _PENDING:
            self._read_vectors()
        return self._fused is not None

    @property
    def window(self) -> Vector | None:
        if self._window is _PENDING:
            if self._reply is None and self._fused is not None and self._vector is not None:
                self._window = window_from_fused(self._fused, self._vector)
            else:
                self._window = window_of(self._engine_vectors())
        return self._window

    def window_score(self, query: Vector) -> float | None:
        """Its window's similarity to `query` (None: it has no window vector). From a reply
        with the fused vector: by `window_similarity`, the window not recovered (~4 us)."""
        if self._vector is _PENDING:
            self._read_vectors()
        if self._fused is not None and self._window is _PENDING:
            own = self._vector
            return None if own is None else window_similarity(
                float(self._fused @ query), float(own @ query))
        window = self.window
        return None if window is None else float(window @ query)

    @property
    def turn(self) -> Turn:
        if self._turn is None:
            self._turn = turn_from_payload(self.payload)
        return self._turn

    @property
    def turn_id(self) -> str:
        return str(self.payload["turn_id"])

    @property
    def session_id(self) -> str:
        return str(self.payload["session_id"])

    @property
    def seq(self) -> int:
        return int(self.payload["seq"])

    @property
    def markers(self) -> tuple[str, ...]:
        return tuple(self.payload.get("markers") or ())

    @property
    def content(self) -> str:
        return str(self.payload["content"])

    @property
    def token_count(self) -> int:
        return int(self.payload.get("token_count", 0))


@dataclass(frozen=True, slots=True)
class Point:
    id: str
    vector: Vector
    payload: dict[str, Any]
    sparse: SparseVector | None = None
    window: Vector | None = None


@dataclass(frozen=True, slots=True)
class Hit:
    id: str
    score: float
    payload: dict[str, Any]
    vector: Vector | None
    window: Vector | None = None


@dataclass(frozen=True, slots=True)
class Between:
    """A numeric payload field within [`gte`, `lte`] (both ends kept; no `lte`: no upper
    end), through its payload index: the timeline reads a session's turns a window of seqs
    at a time; `facts_written_after`, the facts stamped since a time."""

    gte: float
    lte: float | None = None


# Payload conditions, all of which must hold: field -> value, or field -> list (any of), or
# field -> `Between` (a range); under SCOPE, a `Scope`: what that agent may see (backends
# turn it into a filter). ``namespace`` (a value or a list) also matches a point with no
# namespace for ``default`` (written before namespaces: `session_where`).
Where = Mapping[str, str | int | bool | Sequence[str] | Sequence[int] | Between | Scope]
SCOPE = "$scope"
# Under POINT_IDS, a list of point ids: only those points (a delete of exactly these).
POINT_IDS = "$ids"


def scoped(scope: Scope | None) -> dict[str, Scope]:
    """The `Where` entry that limits a read to what `scope` may see (none: no limit)."""
    return {} if scope is None else {SCOPE: scope}


class VectorStore(ABC):
    """Qdrant as hivemem uses it: turns and facts, each in its own collection.

    Backends implement the collection primitives; the turn and fact operations are shared.
    """

    dim: int

    @property
    def has_windows(self) -> bool:
        """Whether the turns collection holds context-window vectors (a store made before
        them may not: recall then ranks on the turn vectors alone)."""
        return False

    def changes(self, collection: str) -> int | None:
        """A number that grows with every write this object applies to `collection`
        (points upserted, vectors updated, points deleted), raised once the write is
        visible to reads; None when writes may reach the collection other ways (a Qdrant
        server, a guest's proxy). While it stays the same nothing changed there, so a
        reader that keeps what it read (`hivemem.recall.known_facts`) need not read again."""
        return None

    # -- backend primitives ----------------------------------------------------------------

    @abstractmethod
    def upsert(self, collection: str, points: Sequence[Point]) -> None: ...

    @abstractmethod
    def search(
        self, collection: str, vector: Vector, limit: int, where: Where | None
    ) -> list[Hit]: ...

    def search_window(
        self, collection: str, vector: Vector, limit: int, where: Where | None
    ) -> list[Hit]:
        """Nearest by the `WINDOW` vector; a backend that keeps none (or only `FUSED`
        vectors) finds none."""
        return []

    @abstractmethod
    def search_sparse(
        self, collection: str, sparse: SparseVector, limit: int, where: Where | None
    ) -> list[Hit]:
        """BM25 ranking (IDF over the collection); hits carry their dense vector."""

    @abstractmethod
    def retrieve(self, collection: str, ids: Sequence[str]) -> list[Hit]: ...

    @abstractmethod
    def scroll(
        self, collection: str, where: Where | None, *, with_vectors: bool = False
    ) -> Iterator[Hit]: ...

    @abstractmethod
    def count(self, collection: str, where: Where | None) -> int: ...

    @abstractmethod
    def delete(self, collection: str, where: Where) -> None:
        """Remove the points that match (only `import --mode replace` does this)."""

    def vacuum(self) -> str:
        """Take deleted points off disk (a forget's last step). "done": gone from the
        store's files now; "server": a Qdrant server's optimizer vacuums them by itself;
        "none": nothing to do here."""
        return "none"

    @abstractmethod
    def close(self) -> None: ...

    def update_vectors(self, collection: str, name: str,
                       vectors: Sequence[tuple[str, Vector]]) -> int:
        """Replace the `name` vector of existing points (point id, vector), nothing else of
        them; a point that is gone stays gone. Returns how many were updated."""
        raise ConfigurationError(
            f"{type(self).__name__} cannot update vectors in place (the window stage runs"
            " where the vector store is: the embedded owner or a worker with a server)")

    # -- turns -----------------------------------------------------------------------------

    def upsert_turns(
        self,
        turns: Sequence[Turn],
        vectors: Vector,
        sparse: Sequence[SparseVector] | None = None,
        windows: Vector | None = None,
    ) -> None:
        """`windows`: each turn's context-window vector (row i for turn i), if embedded."""
        points = [
            Point(
                turn_point_id(session_name(t.namespace, t.session_id), t.turn_id),
                vectors[i],
                turn_payload(t),
                None if sparse is None else sparse[i],
                None if windows is None else windows[i],
            )
            for i, t in enumerate(turns)
        ]
        if points:
            self.upsert(TURNS, points)

    def update_windows(self, name: SessionName, turn_ids: Sequence[str], windows: Vector) -> int:
        """Replace the window vectors of these turns (row i for turn i), in place: the rest
        of each point (payload, dense and BM25 vectors) is left as it is, and a turn deleted
        meanwhile is not brought back. Returns how many were updated."""
        return self.update_vectors(TURNS, WINDOW, [
            (turn_point_id(name, t), windows[i]) for i, t in enumerate(turn_ids)])

    def search_turns(
        self, sessions: SessionName | Sequence[SessionName], vector: Vector, limit: int,
        scope: Scope | None = None,
    ) -> list[TurnHit]:
        return self._search_turns(
            "dense", vector, limit, {**session_where(sessions, scope), **scoped(scope)}
        )

    def search_turns_and_windows(
        self, sessions: SessionName | Sequence[SessionName], vector: Vector, limit: int,
        scope: Scope | None = None,
    ) -> tuple[list[TurnHit], list[TurnHit]]:
        """The `limit` turns nearest on the fused similarity (`FUSED`), best first: each in
        the first list with its dense similarity as `score` and, when it has a window
        vector, in the second with its window's."""
        hits = self.search_fused(TURNS, vector, limit,
                                 {**session_where(sessions, scope), **scoped(scope)})
        dense: list[TurnHit] = []
        window: list[TurnHit] = []
        for h in hits:
            own = 0.0 if h.vector is None else float(h.vector @ vector)
            dense.append(TurnHit(h.payload, own, h.vector, h.window))
            if h.window is not None:
                window.append(TurnHit(h.payload, window_similarity(h.score, own), h.vector,
                                      h.window))
        return dense, window

    def search_fused(
        self, collection: str, vector: Vector, limit: int, where: Where | None
    ) -> list[Hit]:
        """Nearest on the fused similarity (`FUSED`; a hit's `score`). Here from the dense
        and the window searches, their hits ranked on it together (a backend that keeps
        fused vectors searches them)."""
        return rank_fused(self.search(collection, vector, limit, where),
                          self.search_window(collection, vector, limit, where), vector, limit)

    def window_similarities(self, hits: Sequence[TurnHit], vector: Vector) -> list[float | None]:
        """The similarity of each hit's context-window vector to `vector` (None: it has no
        window vector). Here from the vectors the hits carry; a backend whose hits carry
        none asks its engine."""
        return [None if (w := h.window) is None else float(w @ vector) for h in hits]

    def search_turns_lexical(
        self, sessions: SessionName | Sequence[SessionName], sparse: SparseVector, limit: int,
        scope: Scope | None = None,
    ) -> list[TurnHit]:
        if not sparse:
            return []
        return self._search_turns(
            "lexical", sparse, limit, {**session_where(sessions, scope), **scoped(scope)}
        )

    def _search_turns(
        self, using: TurnSearch, query: Vector | SparseVector, limit: int, where: Where
    ) -> list[TurnHit]:
        """The turn searches' one path: the generic searches, wrapped. A backend overrides
        it to build the hits from its reply directly."""
        if using == "lexical":
            hits = self.search_sparse(TURNS, cast(SparseVector, query), limit, where)
        else:
            hits = self.search(TURNS, cast(Vector, query), limit, where)
        return [TurnHit(h.payload, h.score, h.vector, h.window) for h in hits]

    def turns_by_seq(
        self, name: SessionName, seqs: Sequence[int], scope: Scope | None = None, *,
        with_vectors: bool = True, with_windows: bool = False,
    ) -> list[TurnHit]:
        """The session's turns with these sequence numbers (those that are embedded).
        Their hits carry the dense vector (`with_vectors`) and, `with_windows`, the window
        vector (a backend may give it either way)."""
        if not seqs:
            return []
        where: Where = {**session_where(name, scope), "seq": sorted(set(seqs)), **scoped(scope)}
        return [
            TurnHit(h.payload, 0.0, h.vector, h.window)
            for h in self.scroll(TURNS, where, with_vectors=with_vectors)
        ]

    def get_turns(
        self, name: SessionName, turn_ids: Sequence[str], scope: Scope | None = None
    ) -> list[TurnHit]:
        """These turns of the session named `name` (`hivemem.domain.names`)."""
        if not turn_ids:
            return []
        hits = self.retrieve(TURNS, [turn_point_id(name, t) for t in turn_ids])
        return [
            TurnHit(h.payload, 0.0, h.vector, h.window)
            for h in hits if scope is None or scope.allows(h.payload)
        ]

    def iter_turns(
        self, name: SessionName | None = None, scope: Scope | None = None
    ) -> Iterator[Turn]:
        where: dict[str, Any] = {**scoped(scope)}
        if name is not None:
            where.update(session_where(name, scope))
        for hit in self.scroll(TURNS, where or None):
            yield turn_from_payload(hit.payload)

    def turns_between(
        self, name: SessionName, first: int, last: int, scope: Scope | None = None
    ) -> list[Turn]:
        """The session's stored turns with `first <= seq <= last` that `scope` may see (any
        order): a range on the seq payload index, so only those points are read."""
        if last < first:
            return []
        where: Where = {**session_where(name, scope), "seq": Between(first, last),
                        **scoped(scope)}
        return [turn_from_payload(hit.payload) for hit in self.scroll(TURNS, where)]

    def nearest_seq(
        self, name: SessionName, first: int, last: int, scope: Scope | None = None, *,
        highest: bool = False,
    ) -> int | None:
        """The lowest (`highest`: the highest) seq in [`first`, `last`] of a stored turn
        `scope` may see; None: there is none. By halving the range with counts (about
        log2(last - first) of them): a reader that walks a session's seqs jumps over a run
        without turns instead of walking it, so what it costs follows the turns there are,
        not the session's counter."""
        def any_in(low: int, high: int) -> bool:
            where: Where = {**session_where(name, scope), "seq": Between(low, high),
                            **scoped(scope)}
            return self.count(TURNS, where) > 0

        if last < first or not any_in(first, last):
            return None
        low, high = first, last
        while low < high:
            if highest:
                mid = (low + high + 1) // 2
                if any_in(mid, high):
                    low = mid
                else:
                    high = mid - 1
            else:
                mid = (low + high) // 2
                if any_in(low, mid):
                    high = mid
                else:
                    low = mid + 1
        return low

    def count_turns(self, name: SessionName | None = None) -> int:
        return self.count(TURNS, None if name is None else session_where(name))

    # -- facts -----------------------------------------------------------------------------

    def upsert_facts(
        self,
        facts: Sequence[Fact],
        vectors: Vector,
        sparse: Sequence[SparseVector] | None = None,
    ) -> None:
        written = time.time()
        points = [
            Point(
                f.fact_id,
                vectors[i],
                {**f.model_dump(mode="json"), WRITTEN_AT: written},
                None if sparse is None else sparse[i],
            )
            for i, f in enumerate(facts)
        ]
        if points:
            self.upsert(FACTS, points)

    def search_facts(
        self,
        sessions: SessionName | Sequence[SessionName],
        vector: Vector,
        limit: int,
        statuses: Sequence[str],
        scope: Scope | None = None,
        known: FactOf | None = None,
    ) -> list[FactHit]:
        """`known`: the `Fact` already read for a hit's payload, or None (validated)."""
        where: dict[str, Any] = {
            **session_where(sessions, scope), "status": list(statuses), **scoped(scope)
        }
        hits = self.search(FACTS, vector, limit, where)
        return [FactHit(fact_of(h.payload, known), h.score, h.vector) for h in hits]

    def search_facts_lexical(
        self,
        sessions: SessionName | Sequence[SessionName],
        sparse: SparseVector,
        limit: int,
        statuses: Sequence[str],
        scope: Scope | None = None,
        known: FactOf | None = None,
    ) -> list[FactHit]:
        """As `search_facts`, by the BM25 vector."""
        if not sparse:
            return []
        where: dict[str, Any] = {
            **session_where(sessions, scope), "status": list(statuses), **scoped(scope)
        }
        hits = self.search_sparse(FACTS, sparse, limit, where)
        return [FactHit(fact_of(h.payload, known), h.score, h.vector) for h in hits]

    def get_facts(
        self, fact_ids: Sequence[str], scope: Scope | None = None
    ) -> list[FactHit]:
        # A fact id is a point id, a UUID: anything else names no fact (and would be refused
        # by the engine as a malformed request, not answered as missing).
        fact_ids = [f for f in fact_ids if is_uuid(f)]
        if not fact_ids:
            return []
        hits = self.retrieve(FACTS, list(fact_ids))
        return [FactHit(Fact.model_validate(h.payload), 0.0, h.vector)
                for h in hits if scope is None or scope.allows(h.payload)]

    def visible_fact_ids(
        self, name: SessionName, fact_ids: Collection[str], scope: Scope
    ) -> set[str]:
        """Which of these facts of the session `scope` may see: read by id (a timeline page
        checks the few facts its events name, not every fact of the session)."""
        wanted = [f for f in fact_ids if is_uuid(f)]
        if not wanted:
            return set()
        return {str(h.payload.get("fact_id")) for h in self.retrieve(FACTS, wanted)
                if payload_session(h.payload) == name and scope.allows(h.payload)}

    def list_facts(
        self, name: SessionName, statuses: Sequence[str] | None = None,
        scope: Scope | None = None,
    ) -> list[Fact]:
        where: dict[str, Any] = {**session_where(name, scope), **scoped(scope)}
        if statuses is not None:
            where["status"] = list(statuses)
        facts = [Fact.model_validate(h.payload) for h in self.scroll(FACTS, where)]
        return sorted(facts, key=lambda f: (f.created_at, f.fact_id))

    def list_fact_hits(self, name: SessionName, statuses: Sequence[str]) -> list[FactHit]:
        """`list_facts` (every scope) with each fact's stored vector: one read where a
        listing and a `get_facts` of the same facts would be two."""
        where: dict[str, Any] = {**session_where(name), "status": list(statuses)}
        hits = [FactHit(Fact.model_validate(h.payload), 0.0, h.vector)
                for h in self.scroll(FACTS, where, with_vectors=True)]
        return sorted(hits, key=lambda h: (h.fact.created_at, h.fact.fact_id))

    def count_facts(self, name: SessionName, statuses: Sequence[str] | None = None,
                    scope: Scope | None = None) -> int:
        """How many facts the session holds (every status and scope unless limited: the
        same facts `list_facts` would list)."""
        if statuses is None and scope is None:
            return self.count(FACTS, session_where(name))
        where: dict[str, Any] = {**session_where(name, scope), **scoped(scope)}
        if statuses is not None:
            where["status"] = list(statuses)
        return self.count(FACTS, where)

    def facts_written_after(
        self, name: SessionName, after: float | None
    ) -> list[tuple[Fact, float]]:
        """The session's facts (every status, every scope) whose `WRITTEN_AT` is later than
        `after` (None: all of them), each with that time (0.0: written before the field
        existed). Only those cross from the store (a range on the field's payload index):
        a reader that keeps a session's facts (`hivemem.recall.known_facts`) pays for what
        changed, also through the owner's API (a guest's proxy) in the embedded mode."""
        where: dict[str, Any] = dict(session_where(name))
        if after is not None:
            where[WRITTEN_AT] = Between(after)
        out: list[tuple[Fact, float]] = []
        for hit in self.scroll(FACTS, where):
            written = written_at(hit.payload)
            if after is None or written > after:
                out.append((Fact.model_validate(hit.payload), written))
        return out


# A stored fact's payload -> the `Fact` already read for it, or None.
FactOf = Callable[[Mapping[str, Any]], Fact | None]


def fact_of(payload: dict[str, Any], known: FactOf | None = None) -> Fact:
    """The fact a stored payload holds: the one `known` gives for it, else validated."""
    fact = None if known is None else known(payload)
    return Fact.model_validate(payload) if fact is None else fact


@dataclass(frozen=True, slots=True)
class FactHit:
    fact: Fact
    score: float
    vector: Vector | None


def written_at(payload: Mapping[str, Any]) -> float:
    value = payload.get(WRITTEN_AT)
    return float(value) if isinstance(value, int | float) else 0.0


def rank_fused(dense: Sequence[Hit], window: Sequence[Hit], vector: Vector,
               limit: int) -> list[Hit]:
    """The hits of a dense and a window search of `vector`, ranked together on the fused
    similarity (`FUSED`): each hit's other similarity from the vectors it carries."""
    by_id: dict[str, tuple[Hit, float | None, float | None]] = {}
    for h in dense:
        by_id[h.id] = (h, h.score, None)
    for h in window:
        kept, own, _w = by_id.get(h.id, (h, None, None))
        by_id[h.id] = (kept, own, h.score)
    ranked: list[Hit] = []
    for h, found_own, found_win in by_id.values():
        own = found_own if found_own is not None else (
            0.0 if h.vector is None else float(h.vector @ vector))
        win = found_win if found_win is not None else (
            None if h.window is None else float(h.window @ vector))
        score = own if win is None else (
            (own + FUSED_WINDOW_WEIGHT * win) / (1.0 + FUSED_WINDOW_WEIGHT))
        ranked.append(Hit(h.id, score, h.payload, h.vector, h.window))
    ranked.sort(key=lambda h: h.score, reverse=True)
    return ranked[:limit]


def session_where(sessions: SessionName | Sequence[SessionName],
                  scope: Scope | None = None) -> dict[str, Any]:
    """The payload conditions of these sessions (internal names: `hivemem.domain.names`):
    their ids and namespaces (a ``namespace`` condition matches a point that has none for
    ``default``: points written before namespaces). Names of several namespaces give the
    ids in any of them: callers pass one namespace's sessions (a scope's), or post-filter.
    With `scope` (whose own filter holds the namespace, `scoped`) and the sessions all of
    its namespace, no second namespace condition: recall's searches filter as before."""
    names = [sessions] if isinstance(sessions, str) else list(sessions)
    parts = [split_session_name(n) for n in names]
    namespaces = sorted({ns for ns, _ in parts})
    ids: str | list[str] = (parts[0][1] if isinstance(sessions, str)
                            else [sid for _, sid in parts])
    if scope is not None and namespaces == [scope.namespace]:
        return {"session_id": ids}
    return {"session_id": ids,
            "namespace": namespaces[0] if len(namespaces) == 1 else namespaces}


def payload_session(payload: Mapping[str, Any]) -> SessionName:
    """The internal name of a stored point's session."""
    return session_name(str(payload.get("namespace") or DEFAULT_NAMESPACE),
                        str(payload.get("session_id") or ""))


def as_vector(values: Any, name: str = DENSE) -> Vector | None:
    """The named vector out of what the engine returned (a bare list is the dense one)."""
    if values is None:
        return None
    if isinstance(values, dict):
        values = values.get(name)
        if values is None:
            return None
    elif name != DENSE:
        return None
    if isinstance(values, list):
        return _from_floats(values)
    return np.asarray(values, dtype=np.float32)


@functools.cache
def _packer(size: int) -> struct.Struct:
    return struct.Struct(f"{size}f")


def _from_floats(values: list[float]) -> Vector:
    """A list of Python floats (the engine hands each vector over as one) as float32.
    Packed in C by `struct` and viewed by numpy: 5.5 us for 384 floats against 14 for
    `np.fromiter` and 13 for `np.array` (recall converts ~80 a call). The same values as
    numpy's cast (both round each double to the nearest float32); a value `struct` will
    not pack (beyond float32's range, not a float) goes through numpy as before."""
    try:
        return np.frombuffer(_packer(len(values)).pack(*values), dtype=np.float32)
    except (OverflowError, struct.error):
        return np.asarray(values, dtype=np.float32)


def fused_vector(dense: Vector, window: Vector | None) -> Vector:
    """The `FUSED` vector of a turn (its dense vector alone when it has no window)."""
    own = _unit(dense)
    if window is None:
        return own
    return ((own + FUSED_WINDOW_WEIGHT * _unit(window)) / (1.0 + FUSED_WINDOW_WEIGHT)
            ).astype(np.float32)


def window_of(values: Any) -> Vector | None:
    """The window vector out of what the engine returned: stored as it is, or recovered from
    the fused and dense vectors (`FUSED`)."""
    if isinstance(values, dict) and WINDOW not in values and FUSED in values:
        fused, dense = as_vector(values, FUSED), as_vector(values, DENSE)
        if fused is None or dense is None:
            return None
        return window_from_fused(fused, dense)
    return as_vector(values, WINDOW)


def window_from_fused(fused: Vector, dense: Vector) -> Vector:
    return ((1.0 + FUSED_WINDOW_WEIGHT) * fused - _unit(dense)) / FUSED_WINDOW_WEIGHT


def window_similarity(fused_score: float, dense_score: float) -> float:
    """A window's similarity to a query, from the fused and dense ones (`FUSED`)."""
    return ((1.0 + FUSED_WINDOW_WEIGHT) * fused_score - dense_score) / FUSED_WINDOW_WEIGHT


def _unit(vector: Vector) -> Vector:
    norm = float(np.linalg.norm(vector))
    return (vector / norm).astype(np.float32) if norm > 0 else vector.astype(np.float32)


def is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except (ValueError, TypeError, AttributeError):
        return False
    return True
