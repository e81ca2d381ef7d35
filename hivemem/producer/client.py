"""`MemoryClient`: the synchronous SDK. Ingest enqueues and returns; recall reads.

A tenant's code holds `memory.scoped(namespace=..., agent_id=...)` (a `ScopedMemory`); what
crosses scopes (compaction, audit, session metadata, timelines, export/import, dead letters)
is only on `memory.admin` (an `Admin`): the client does not repeat it. The client's own
methods that take a `namespace=` stay for single-tenant use.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, Self, TypedDict

from hivemem.config import Settings
from hivemem.domain.episode import Episode
from hivemem.domain.fact import Fact
from hivemem.domain.ids import check_id
from hivemem.domain.models import RecallResult, Role, SessionStats, Turn, trusted_turn
from hivemem.domain.recall.policy import RecallPolicy, resolve_policy
from hivemem.domain.scope import DEFAULT_NAMESPACE, Scope, check_namespace, scope_for
from hivemem.domain.turn import TurnDraft, check_budget, check_query
from hivemem.errors import (
    NotFound,
    ProcessingTimeout,
    ReflectionFailed,
    ReflectionTimeout,
    ValidationError,
)
from hivemem.logs import ensure_quiet_default
from hivemem.pipeline.topology import Topology
from hivemem.producer import views
from hivemem.producer.admin import Admin
from hivemem.producer.guard import IngestGuard
from hivemem.producer.scoped import ScopedMemory
from hivemem.recall.recaller import Recaller
from hivemem.runtime.embedded import EmbeddedRuntime
from hivemem.runtime.guest import guest_of
from hivemem.runtime.wiring import Wiring
from hivemem.store.redis import Redis
from hivemem.store.reflection import ReflectionState

if TYPE_CHECKING:
    from hivemem.providers.embedders import Embedder
    from hivemem.providers.reflector import Reflector
    from hivemem.recall.recaller import Recaller
    from hivemem.runtime.embedded import EmbeddedRuntime
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
        self._wiring = Wiring(self.settings, redis=redis_client, vectors=vector_store,
                              embedder=embedder)
        self._redis = self._wiring.redis
        self.keys = self._wiring.keys
        self._state = self._wiring.state
        self._streams = self._wiring.streams
        self._guard = IngestGuard(self._redis, Topology(self.keys).embed, self.settings.ingest)
        self._episodes = self._wiring.episodes
        self._vectors = vector_store
        self._embedder = embedder
        self._runtime = runtime
        self._recaller: Recaller | None = None
        self._lock = threading.Lock()
        self._admin = Admin(self)

    # -- scopes ----------------------------------------------------------------------------

    def scoped(
        self, *, namespace: str = DEFAULT_NAMESPACE, agent_id: str | None = None
    ) -> ScopedMemory:
        """A handle bound to one namespace and (optionally) one agent: every read and write
        through it is narrowed to what that agent may see (`hivemem.producer.scoped`)."""
        return ScopedMemory(self, scope_for(namespace, agent_id))

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
        return cls(
            settings,
            redis_client=runtime.redis(),
            vector_store=runtime.vectors,
            embedder=runtime.query_embedder,
            runtime=runtime,
        )

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
    ) -> Turn:
        """Validate and enqueue one turn; returns at once with its sequence number.

        A `turn_id` seen before in the session is a no-op: the returned turn carries the
        original seq and ``duplicate=True``. `namespace` (default ``"default"``): the
        session belongs to the namespace of its first turn, a turn of another one is
        refused (`OutOfScope`, a `ValidationError`). `visibility`: ``"shared"`` with the
        namespace, or ``"private"`` to `agent_id`.

        With `ingest.max_backlog` set, raises `Backpressure` (or blocks, per
        `ingest.backpressure`) before writing while the embed backlog is over it.
        `durable=True` (default `ingest.durable`) returns only once the turn is fsynced to
        the server's AOF (`hivemem.producer.guard`).
        """
        draft = TurnDraft(
            session_id,
            role,
            content,
            settings=self.settings.ingest,
            agent_id=agent_id,
            markers=markers,
            metadata=metadata,
            timestamp=timestamp,
            turn_id=turn_id,
            namespace=namespace,
            visibility=visibility,
        )
        durable = self.settings.ingest.durable if durable is None else durable
        if durable:
            self._guard.require_durable()
        self._guard.admit(1)
        seq, duplicate = self._state.append_turn(draft)
        if durable:
            self._guard.wait_durable()
        return _turn(draft, seq, duplicate)

    def ingest_many(
        self, turns: Iterable[TurnInput | Mapping[str, Any]], *, durable: bool | None = None
    ) -> list[Turn]:
        """Validate every turn first (nothing is written if one is bad), then pipeline them.
        Backpressure and `durable` as for `ingest`, for the batch as a whole."""
        return self._ingest_rows(turns, durable=durable)

    def _ingest_rows(
        self, turns: Iterable[TurnInput | Mapping[str, Any]], *, durable: bool | None,
        validate_only: bool = False,
    ) -> list[Turn]:
        drafts: list[TurnDraft] = []
        ingest = self.settings.ingest
        for index, raw in enumerate(turns):
            # A dict of known fields with the three required ones (the usual row) passes
            # the row checks in three tests; anything else takes them one by one.
            if not (type(raw) is dict and raw.keys() <= _TURN_INPUT_KEYS
                    and "session_id" in raw and "role" in raw and "content" in raw):
                _check_row(index, raw)
            try:
                drafts.append(
                    TurnDraft(
                        raw["session_id"],
                        raw["role"],
                        raw["content"],
                        settings=ingest,
                        agent_id=raw.get("agent_id"),
                        markers=raw.get("markers"),
                        metadata=raw.get("metadata"),
                        timestamp=raw.get("timestamp"),
                        turn_id=raw.get("turn_id"),
                        namespace=raw.get("namespace"),
                        visibility=raw.get("visibility", "shared"),
                    )
                )
            except ValidationError as exc:
                raise ValidationError(f"turns[{index}].{exc.field}", exc.message) from None
        # Nothing is written when one turn names another namespace's session.
        self._state.check_scopes(list(dict.fromkeys((d.session_id, d.namespace) for d in drafts)))
        if validate_only:
            return []
        durable = self.settings.ingest.durable if durable is None else durable
        if durable:
            self._guard.require_durable()
        self._guard.admit(len(drafts))
        results = self._state.append_turns(drafts)
        if durable and drafts:
            self._guard.wait_durable()
        return [_turn(d, seq, dup) for d, (seq, dup) in zip(drafts, results, strict=True)]

    # -- progress --------------------------------------------------------------------------

    def get_session_stats(
        self, session_id: str, *, namespace: str | None = None
    ) -> SessionStats:
        """Turns, episodes, open-episode turns, markers, and each stage's backlog.

        With `namespace`, the session must be that namespace's (else `OutOfScope`)."""
        check_id("session_id", session_id)
        self._in_namespace(session_id, namespace)
        stats = self._state.stats(session_id)
        assigned, closed, open_ep, markers = self._episodes.progress(session_id)
        stages = [self._streams.stage_lag(stage) for stage in Topology(self.keys).stages]
        return stats.model_copy(
            update={
                "turns_assigned": assigned,
                "episodes": closed,
                "open_episode_turns": open_ep.size if open_ep else 0,
                "markers": markers,
                "stages": stages,
                "reflections_failed": _failed_reflections(
                    ReflectionState(self._redis, self.keys), session_id),
            }
        )

    def close_episode(self, session_id: str, *, namespace: str | None = None) -> int:
        """Close the session's open episode after the turns ingested so far.

        Goes through the pipeline in order with the turns (it takes the next seq, which it
        returns). Raises `ValidationError` for a session that has no turns.
        """
        return self._control(session_id, "close_episode", namespace)

    def close_session(self, session_id: str, *, namespace: str | None = None) -> int:
        """The session is over: its open episode closes, whatever its size."""
        return self._control(session_id, "close_session", namespace)

    def _in_namespace(self, session_id: str, namespace: str | None) -> None:
        """With a namespace: `OutOfScope` unless the session exists and is that one's."""
        if namespace is not None:
            self._state.check_scope(session_id, check_namespace(namespace), must_exist=True)

    def _control(self, session_id: str, action: str, namespace: str | None = None) -> int:
        check_id("session_id", session_id)
        self._in_namespace(session_id, namespace)
        seq = self._state.append_control(session_id, action)
        if seq is None:
            raise NotFound("session_id", f"unknown session {session_id!r} (no turns)")
        return seq

    def episodes(self, session_id: str, *, namespace: str | None = None) -> list[Episode]:
        """The session's closed episodes, oldest first."""
        check_id("session_id", session_id)
        self._in_namespace(session_id, namespace)
        return self._episodes.episodes(session_id)

    def wait_until_processed(
        self, session_id: str, timeout: float = 30.0, *, stage: str = "embed"
    ) -> SessionStats:
        """Block until every turn enqueued so far for the session is recallable, and current:
        what it changes is in the slot table (the boundary stage keeps it, per turn).

        With ``stage="boundary"``, until the boundary stage has also assigned them (and every
        control so far) to episodes. Dead-lettered turns count as settled. Raises
        `ProcessingTimeout` when the workers have not caught up in time.
        """
        check_id("session_id", session_id)
        if stage not in ("embed", "boundary"):
            raise ValidationError("stage", "must be 'embed' or 'boundary'")
        target = self._state.last_seq(session_id)
        deadline = time.monotonic() + timeout
        delay = 0.002
        while True:
            if stage == "embed":
                _, done, dead = self._state.progress(session_id)
                # Recallable means current too: the boundary stage keeps the slot table
                # (what each turn changes), so its pointer counts as well.
                settled = min(done + dead, self._episodes.progress(session_id)[0])
            else:
                settled = self._episodes.progress(session_id)[0]
            if settled >= target:
                return self.get_session_stats(session_id)
            if time.monotonic() >= deadline:
                raise ProcessingTimeout(session_id, settled, target, timeout)
            time.sleep(delay)
            delay = min(delay * 1.5, 0.05)

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
        session) of another namespace raises `OutOfScope`.
        """
        check_id("session_id", session_id)
        check_query(query)
        access = scope_for(namespace, agent_id)
        policy = resolve_policy(preset, self.settings.recall.default_preset)
        budget = check_budget(
            token_budget, policy.token_budget or self.settings.recall.default_token_budget
        )
        if policy.reserve_tokens >= budget:
            raise ValidationError(
                "token_budget", f"must exceed the policy's reserve_tokens ({policy.reserve_tokens})"
            )
        bad_limit = isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0
        if limit is not None and bad_limit:
            raise ValidationError("limit", "must be a positive integer")
        related = views.check_related(related_sessions)
        for sid in (session_id, *related):
            self._state.check_scope(sid, access.namespace)
        updates: dict[str, Any] = {}
        if limit is not None:
            updates["limit"] = limit
        if include_history:
            updates["include_history"] = True
        if include_archived:  # archived facts (compacted or retracted), ranked as history
            updates["include_archived"] = True
        if updates:
            policy = policy.model_copy(update=updates)
        return self._get_recaller().recall(
            session_id, query, budget, policy,
            related_sessions=related, explain=bool(explain), access=access,
        )

    def facts(
        self, session_id: str, *, include_history: bool = False,
        agent_id: str | None = None, namespace: str | None = None,
        include_inactive: bool = False, include_archived: bool = False,
    ) -> list[Fact]:
        """The session's facts (current ones; with history, every version), oldest first.

        Current: active and conflicted. `include_inactive` adds superseded versions,
        `include_archived` archived facts (compacted or retracted); `include_history`, both.

        Without `namespace` and `agent_id`, every fact (an operator's view); with either,
        what that agent of that namespace may see."""
        check_id("session_id", session_id)
        if namespace is None and agent_id is None:  # the operator's view: every fact
            return self._admin.facts(session_id, include_history=include_history,
                                     include_inactive=include_inactive,
                                     include_archived=include_archived)
        access: Scope = scope_for(namespace, agent_id)
        self._state.check_scope(session_id, access.namespace)
        return views.facts(self, session_id, access, include_history=include_history,
                           include_inactive=include_inactive, include_archived=include_archived)

    def traces(
        self, count: int = 20, session_id: str | None = None, *, namespace: str | None = None
    ) -> list[dict[str, Any]]:
        """The newest reflection traces (secrets redacted). Without `namespace`, an admin
        read of every session's; with one, only of `session_id`, which must be that
        namespace's, and only traces of its shared episodes."""
        if namespace is None:
            return self._admin.traces(count, session_id)
        if session_id is None:
            raise ValidationError("session_id", "is required with a namespace")
        return self.scoped(namespace=namespace).traces(count, session_id)

    def wait_until_reflected(self, session_id: str, timeout: float = 30.0) -> int:
        """Block until every episode closed so far is reflected; returns the last index."""
        check_id("session_id", session_id)
        deadline = time.monotonic() + timeout
        # Every close issued before this call: first the boundary stage must have passed
        # the session's last seq (a close is a control entry with a seq), then reflection.
        last = self._state.last_seq(session_id)
        while (assigned := self._episodes.progress(session_id)[0]) < last:
            if time.monotonic() >= deadline:
                raise ProcessingTimeout(session_id, assigned, last, timeout)
            time.sleep(0.01)
        target = self._episodes.progress(session_id)[1]
        state = ReflectionState(self._redis, self.keys)
        before = state.reflected(session_id)
        while (done := state.reflected(session_id)) < target:
            if time.monotonic() >= deadline:
                raise ReflectionTimeout(session_id, done, target, timeout)
            time.sleep(0.01)
        if done > before:
            failed = [t for t in state.traces(50, session_id)
                      if t.get("failed") and before < int(t.get("index", 0)) <= done]
            if failed:
                raise ReflectionFailed(session_id, int(failed[0]["index"]),
                                       str(failed[0].get("error", "")))
        return done

    def vector_store(self) -> VectorStore:
        """The vector store recall reads (opened, with the query model, on first use)."""
        return self._get_recaller().vectors

    def _get_recaller(self) -> Recaller:
        # The model and the vector store load on first recall: ingest-only producers skip both.
        with self._lock:
            if self._recaller is None:
                self._embedder = self._wiring.query_embedder
                self._vectors = self._wiring.vectors
                self._recaller = Recaller(
                    self._state, self._episodes, self._vectors, self._embedder,
                    reflection=self.settings.reflection, slots=self._wiring.slot_tables,
                )
            return self._recaller

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Embedded mode drains the queue and stops its workers; then connections close."""
        if self._recaller is not None:
            self._recaller.close()
        if self._runtime is not None:
            self._runtime.close()
            self._runtime = None
        elif self._vectors is not None:
            self._vectors.close()
        self._redis.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- used by the CLI: numbers and stores it shows, so that it reads no private field

    def recent_turns(self, session_id: str, limit: int = 10) -> list[Turn]:
        """The session's newest `limit` turns (its recent window), newest first, one per seq.

        After an embedded store is reopened the window can hold a turn twice (as ingested,
        and as restored from Qdrant with its detected markers): the restored one wins."""
        check_id("session_id", session_id)
        by_seq: dict[int, Turn] = {}
        for turn in self._state.recent_turns(session_id, limit * 2):
            known = by_seq.get(turn.seq)
            if known is None or len(turn.markers) > len(known.markers):
                by_seq[turn.seq] = turn
        return [by_seq[seq] for seq in sorted(by_seq, reverse=True)[:limit]]


def _failed_reflections(state: ReflectionState, session_id: str) -> list[int]:
    """Indexes of the session's episodes whose newest trace says the reflection failed."""
    newest: dict[int, bool] = {}
    for trace in state.traces(50, session_id):  # newest first
        newest.setdefault(int(trace.get("index", 0)), bool(trace.get("failed")))
    return sorted(i for i, failed in newest.items() if failed)


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
