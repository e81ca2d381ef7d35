"""`MemoryClient`: the synchronous SDK. Ingest enqueues and returns; recall reads.

A thin facade over the service (`hivemem.service`): a tenant's code holds
`memory.scoped(namespace=..., agent_id=...)` (a `ScopedMemory`); what crosses scopes
(compaction, audit, session metadata, timelines, export/import, dead letters) is only on
`memory.admin` (an `Admin`). The client's own methods act in one scope too: the namespace
(default ``"default"``) and agent they are given, never as the operator.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, Self, TypedDict

from hivemem.config import AckLevel, Settings
from hivemem.domain.episode import Episode
from hivemem.domain.fact import Fact
from hivemem.domain.models import RecallResult, Role, SessionStats, Turn
from hivemem.domain.recall.policy import RecallPolicy
from hivemem.domain.scope import DEFAULT_NAMESPACE, Scope, scope_for
from hivemem.errors import ValidationError
from hivemem.logs import ensure_quiet_default
from hivemem.producer.admin import Admin
from hivemem.producer.scoped import ScopedMemory
from hivemem.runtime.embedded import EmbeddedRuntime
from hivemem.runtime.guest import guest_of
from hivemem.runtime.wiring import Wiring, wire
from hivemem.store.redis import Redis
from hivemem.store.state import TurnLog

if TYPE_CHECKING:
    from hivemem.providers.embedders import Embedder
    from hivemem.providers.reflector import Reflector
    from hivemem.store.vectors.base import VectorStore


class TurnInput(TypedDict):
    """One turn for `ingest_many`."""

    session_id: str
    role: str | Role
    content: str
    agent_id: NotRequired[str | None]
    markers: NotRequired[list[str] | None]
    metadata: NotRequired[dict[str, Any] | None]
    timestamp: NotRequired[datetime | None]
    turn_id: NotRequired[str | None]
    namespace: NotRequired[str | None]
    visibility: NotRequired[str]


_TURN_INPUT_KEYS = frozenset(TurnInput.__annotations__)


class MemoryClient:
    """Shared memory for agents.

    Against servers: ``MemoryClient(Settings())`` (Redis URL and Qdrant URL from the
    environment). With no server at all: ``MemoryClient.local("./memory")``.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        redis_client: Redis | None = None,
        vector_store: VectorStore | None = None,
        embedder: Embedder | None = None,
        runtime: EmbeddedRuntime | None = None,
    ) -> None:
        ensure_quiet_default()
        self.settings = settings or Settings()
        # Embedded mode's client shares its runtime's wiring: one per process.
        self._wiring: Wiring = runtime.wiring if runtime is not None else wire(
            self.settings, redis=redis_client, vectors=vector_store, embedder=embedder)
        self._handed_in = (redis_client, vector_store)
        self._runtime = runtime
        self._service = self._wiring.service
        self.keys = self._wiring.keys
        self._admin = Admin(self._service)

    # -- scopes ----------------------------------------------------------------------------

    def scoped(
        self, *, namespace: str = DEFAULT_NAMESPACE, agent_id: str | None = None
    ) -> ScopedMemory:
        """A handle bound to one namespace and (optionally) one agent: every read and write
        through it is narrowed to what that agent may see (`hivemem.producer.scoped`)."""
        return ScopedMemory(self._service, scope_for(namespace, agent_id))

    @property
    def admin(self) -> Admin:
        """The cross-scope operations (compaction, dead letters, export/import, API keys):
        for operators only."""
        return self._admin

    @classmethod
    def local(
        cls,
        path: str | Path,
        settings: Settings | None = None,
        *,
        embedder: Embedder | None = None,
        reflector: Reflector | None = None,
        workers: int | None = None,
        durable: bool | None = None,
        serve_guests: bool = True,
        as_guest: bool = True,
    ) -> Self:
        """Embedded mode: a Redis server of its own (a child process, AOF in the folder),
        Qdrant Edge under `path`, worker threads.

        The first process to open a folder owns it; a client opened while another process
        owns it is that owner's guest (Redis through its socket, vectors through its owner
        API). `workers`: embed threads (default: one per core, at most four). Reflection
        uses `reflector`, else the configured LLM, else the heuristic reflector.
        `durable`: fsync every write (default `settings.embedded.durable`).
        `serve_guests`: let other processes use the folder while this client is open.
        `as_guest=False`: own the folder or fail (`FolderBusy`), never be a guest.
        """
        ensure_quiet_default()
        settings = settings or Settings()
        guest = guest_of(Path(path), settings) if as_guest else None
        if guest is not None:
            return cls(guest.settings, vector_store=guest.vectors, embedder=embedder)
        runtime = EmbeddedRuntime(
            Path(path), settings, embedder=embedder, reflector=reflector, workers=workers,
            durable=durable, serve_guests=serve_guests,
        )
        return cls(settings, runtime=runtime)

    # -- ingest ----------------------------------------------------------------------------

    def ingest(
        self,
        session_id: str,
        role: str | Role,
        content: str,
        *,
        agent_id: str | None = None,
        markers: Iterable[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        timestamp: datetime | None = None,
        turn_id: str | None = None,
        namespace: str | None = None,
        visibility: str = "shared",
        durable: bool | None = None,
        ack: AckLevel | None = None,
    ) -> Turn:
        """Validate and enqueue one turn; returns at once with its sequence number.

        A `turn_id` seen before in the session is a no-op: the returned turn carries the
        original seq and ``duplicate=True``. `namespace` (default ``"default"``): whose
        session it is (the same id in another namespace is another session).
        `visibility`: ``"shared"`` with the namespace, or ``"private"`` to `agent_id`.

        With `ingest.max_backlog` set, raises `Backpressure` (or blocks, per
        `ingest.backpressure`) before writing while the embed backlog is over it.
        `ack` (default `ingest.ack`): what the turn must reach before this returns:
        ``"memory"`` (the master), ``"aof"`` (its AOF on disk), ``"replica"``
        (`ingest.ack_replicas` replicas), ``"replica_aof"`` (their AOFs); `AckTimeout` when
        it does not within `ingest.durable_timeout_ms` (the turn may exist: retry with the
        same `turn_id`). `durable=True` (default `ingest.durable`) adds the AOF to the level
        (docs/durability.md).
        """
        return self._service.turns.ingest(
            scope_for(namespace, agent_id), session_id, role, content, markers=markers,
            metadata=metadata, timestamp=timestamp, turn_id=turn_id, visibility=visibility,
            durable=durable, ack=ack,
        )

    def ingest_many(
        self, turns: Iterable[TurnInput | Mapping[str, Any]], *, durable: bool | None = None,
        ack: AckLevel | None = None,
    ) -> list[Turn]:
        """Validate every turn first (nothing is written if one is bad), then pipeline them.
        Each row is written in its own `namespace` (default ``"default"``) as its
        `agent_id`. Backpressure, `durable` and `ack` as for `ingest`, for the batch as a
        whole."""
        rows: list[tuple[Scope, Mapping[str, Any]]] = []
        scopes: dict[tuple[str | None, str | None], Scope] = {}  # a batch names few
        for index, raw in enumerate(turns):
            # A dict of known fields with the three required ones (the usual row) passes
            # the row checks in three tests; anything else takes them one by one.
            if not (type(raw) is dict and raw.keys() <= _TURN_INPUT_KEYS
                    and "session_id" in raw and "role" in raw and "content" in raw):
                _check_row(index, raw)
            namespace, agent = raw.get("namespace"), raw.get("agent_id")
            if not (isinstance(namespace, str | None) and isinstance(agent, str | None)):
                rows.append((_row_scope(index, raw), raw))  # refused there, with its field
                continue
            scope = scopes.get((namespace, agent))
            if scope is None:
                scope = scopes[(namespace, agent)] = _row_scope(index, raw)
            rows.append((scope, raw))
        return self._service.turns.ingest_many(rows, durable=durable, ack=ack)

    # -- progress --------------------------------------------------------------------------

    def get_session_stats(
        self, session_id: str, *, namespace: str | None = None
    ) -> SessionStats:
        """Turns, episodes, open-episode turns, markers, and each stage's backlog, of a
        session of `namespace` (default ``"default"``; else `NotFound`). The marker counts
        are the session's own, read from Redis (a producer needs no vector store for them);
        a `scoped` handle counts only the turns its agent may see."""
        return self._service.turns.stats(scope_for(namespace), session_id,
                                         visible_markers=False)

    def close_episode(self, session_id: str, *, namespace: str | None = None) -> int:
        """Close the session's open episode after the turns ingested so far.

        Goes through the pipeline in order with the turns (it takes the next seq, which it
        returns). Raises `NotFound` for a session that has no turns.
        """
        return self._service.turns.close_episode(scope_for(namespace), session_id)

    def close_session(self, session_id: str, *, namespace: str | None = None) -> int:
        """The session is over: its open episode closes, whatever its size."""
        return self._service.turns.close_session(scope_for(namespace), session_id)

    def episodes(self, session_id: str, *, namespace: str | None = None) -> list[Episode]:
        """The session's closed episodes (shared ones of `namespace`), oldest first."""
        return self._service.turns.episodes(scope_for(namespace), session_id)

    def wait_until_processed(
        self, session_id: str, timeout: float = 30.0, *, stage: str = "embed",
        namespace: str | None = None,
    ) -> SessionStats:
        """Block until every turn enqueued so far for the session is recallable.

        With ``stage="boundary"``, until the boundary stage has also assigned them (and every
        control so far) to episodes. Dead-lettered turns count as settled. Raises
        `ProcessingTimeout` when the workers have not caught up in time.
        """
        return self._service.turns.wait_until_processed(
            scope_for(namespace), session_id, timeout, stage=stage, visible_markers=False)

    # -- recall ----------------------------------------------------------------------------

    def recall(
        self,
        session_id: str,
        query: str,
        token_budget: int | None = None,
        *,
        preset: str | RecallPolicy | None = None,
        limit: int | None = None,
        include_history: bool = False,
        include_archived: bool = False,
        explain: bool = False,
        related_sessions: Sequence[str] = (),
        agent_id: str | None = None,
        namespace: str | None = None,
    ) -> RecallResult:
        """The context that matters for `query`, best first, within `token_budget` tokens.

        Turns and facts compete on one score (dense similarity fused with BM25 keywords, plus
        relevance-scaled boosts; see `ScoreComponents`). `preset` is a name (`cheap`,
        `balanced`, `high_recall`, `agent_state`) or a `RecallPolicy`. Superseded facts
        appear only with `include_history` (ranked below current ones); conflicted facts
        always appear, flagged `metadata["conflict"]`. `related_sessions` are searched too,
        with a smaller session boost. With `explain`, `result.excluded` lists every
        candidate left out and why (budget, threshold, duplicate, superseded, quota, limit).

        Scope: `agent_id` sees its own memories plus the shared ones of `namespace`
        (default ``"default"``); without an agent, only shared ones. A session (or related
        session) that is unknown or of another namespace raises `NotFound`.
        """
        return self._service.reads.recall(
            scope_for(namespace, agent_id), session_id, query, token_budget, preset=preset,
            limit=limit, include_history=include_history, include_archived=include_archived,
            explain=explain, related_sessions=related_sessions,
        )

    def facts(
        self, session_id: str, *, include_history: bool = False,
        agent_id: str | None = None, namespace: str | None = None,
        include_inactive: bool = False, include_archived: bool = False,
    ) -> list[Fact]:
        """The session's facts (current ones; with history, every version), oldest first,
        as `agent_id` of `namespace` (default ``"default"``) sees them: its own plus the
        shared ones (every fact of every agent: `admin.facts`).

        Current: active and conflicted. `include_inactive` adds superseded versions,
        `include_archived` archived facts (compacted or retracted); `include_history`, both."""
        return self._service.reads.facts(
            scope_for(namespace, agent_id), session_id, include_history=include_history,
            include_inactive=include_inactive, include_archived=include_archived)

    def traces(
        self, count: int = 20, session_id: str | None = None, *, namespace: str | None = None
    ) -> list[dict[str, Any]]:
        """The newest reflection traces (secrets redacted) of the shared episodes of
        `namespace` (default ``"default"``), of `session_id` or of every session there
        (every namespace's: `admin.traces`)."""
        return self._service.sessions.traces(scope_for(namespace), count, session_id)

    def wait_until_reflected(
        self, session_id: str, timeout: float = 30.0, *, namespace: str | None = None,
    ) -> int:
        """Block until every episode closed so far is reflected; returns the last index."""
        return self._service.turns.wait_until_reflected(
            scope_for(namespace), session_id, timeout)

    def vector_store(self) -> VectorStore:
        """The vector store recall reads (opened, with the query model, on first use)."""
        return self._service.reads.vectors()

    def recent_turns(
        self, session_id: str, limit: int = 10, *, namespace: str | None = None,
    ) -> list[Turn]:
        """The session's newest `limit` shared turns of `namespace` (default
        ``"default"``), newest first, one per seq (every agent's: `admin.recent_turns`)."""
        return self._service.turns.recent_turns(scope_for(namespace), session_id, limit)

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Embedded mode drains the queue and stops its workers; then connections close
        (a handed-in Redis client and vector store too)."""
        if self._runtime is not None:
            self._runtime.close()
            self._runtime = None
            return
        redis_client, vector_store = self._handed_in
        self._wiring.close()
        if vector_store is not None:
            vector_store.close()
        if redis_client is not None:
            redis_client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- for tests and benchmarks that swap one part (they may reach in; the SDK never does)

    @property
    def _redis(self) -> Redis:
        return self._wiring.redis

    @property
    def _state(self) -> TurnLog:
        return self._wiring.state


def _row_scope(index: int, raw: Mapping[str, Any]) -> Scope:
    """The scope one `ingest_many` row is written in (its namespace and agent)."""
    try:
        return scope_for(raw.get("namespace"), raw.get("agent_id"))
    except ValidationError as exc:
        raise ValidationError(f"turns[{index}].{exc.field}", exc.message) from None


def _check_row(index: int, raw: object) -> None:
    """One `ingest_many` row: a mapping of known turn fields with the required ones."""
    if not isinstance(raw, Mapping):
        raise ValidationError(f"turns[{index}]", "must be a mapping of turn fields")
    unknown = set(raw) - _TURN_INPUT_KEYS
    if unknown:
        raise ValidationError(f"turns[{index}]", f"unknown fields {sorted(unknown)}")
    for required in ("session_id", "role", "content"):
        if required not in raw:
            raise ValidationError(f"turns[{index}].{required}", "is required")
