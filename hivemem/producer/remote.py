"""`RemoteMemory`: the scoped handle over the HTTP API, for an agent in another process.

``memory = hivemem.connect("http://host:8080", api_key="hm_...", agent_id="planner")``. The
methods, parameters and result types are `ScopedMemory`'s (a test pins them), so code written
against the embedded or server client runs against a remote one unchanged. The namespace is
the API key's (the server decides; `connect` asks it once), the agent is bound at connect or
by `for_agent`, exactly as on `ScopedMemory`.

Each method only describes its request (a `Call`: route, body, how to read the answer) and
hands it to ``self._send``; the transport decides how it travels. `AsyncRemoteMemory` reuses
these very methods to describe the requests it then sends with asyncio
(`hivemem.producer.aio_remote`).

What the HTTP API cannot carry is refused before anything is sent, naming the argument:
`durable` and `ack` (the server's `ingest.durable` and `ingest.ack` decide),
`ingest_many(validate_only=True)`,
`recall(include_archived=True)`, and a `RecallPolicy` object as `preset` (send a preset name).
Beyond `ScopedMemory`, `import_file` appends an export of this namespace's (the one write a
file drives; the server checks every record is the key's namespace's).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Self, TypeVar

import httpx

from hivemem.config import AckLevel
from hivemem.domain.audit import AuditEvent
from hivemem.domain.episode import Episode
from hivemem.domain.fact import Fact
from hivemem.domain.forget import ForgetReceipt
from hivemem.domain.ids import check_id
from hivemem.domain.keyed import KeyedTurn
from hivemem.domain.models import (
    RecallResult,
    Role,
    SessionStats,
    Turn,
)
from hivemem.domain.recall.policy import RecallPolicy
from hivemem.domain.scope import Scope, scope_for
from hivemem.domain.session import RelatedSession, SessionContext, SessionInfo
from hivemem.domain.timeline import TimelineEvent, TimelinePage
from hivemem.errors import (
    NotPermitted,
    ProcessingTimeout,
    ReflectionFailed,
    ReflectionTimeout,
    ValidationError,
)
from hivemem.producer.remote_bodies import (
    EXPORT_COUNTS,
    TURN_KEYS,
    WAIT_SLACK_S,
    Draft,
    preset_name,
    recall_result,
    session_path,
    unsupported,
)
from hivemem.producer.remote_http import Call, RetryPolicy, Transport, segment
from hivemem.transfer import files
from hivemem.transfer.exporter import ExportSummary
from hivemem.transfer.format import parse_header
from hivemem.transfer.importer import ImportSummary
from hivemem.transfer.stores import Progress

R = TypeVar("R")


def _receipt(response: httpx.Response) -> ForgetReceipt:
    return ForgetReceipt.model_validate(response.json())


class RemoteMemory:
    """What one agent of one namespace may do, over the HTTP API (see `ScopedMemory`)."""

    def __init__(self, transport: Any, scope: Scope, *, pinned: bool = False) -> None:
        # `transport.send(call)` answers the call: a `Transport`, or the recorder with which
        # `AsyncRemoteMemory` collects the calls it sends itself.
        self._transport = transport
        self._scope = scope
        self._pinned = pinned

    @property
    def scope(self) -> Scope:
        return self._scope

    @property
    def pinned(self) -> bool:
        """True when the handle can act as its own agent only. The server enforces an
        agent-bound key whatever the client does; this refuses before the request."""
        return self._pinned

    def pin(self) -> RemoteMemory:
        """This handle, unable to become another agent (see `ScopedMemory.pin`)."""
        return RemoteMemory(self._transport, self._scope, pinned=True)

    def for_agent(self, agent_id: str | None) -> RemoteMemory:
        """The same namespace as another agent (or none), over the same connection pool."""
        if self._pinned:
            if agent_id is None or agent_id == self._scope.agent_id:
                return self
            raise NotPermitted(
                "agent_id", f"this handle acts as agent {self._scope.agent_id!r} only")
        return RemoteMemory(self._transport, scope_for(self._scope.namespace, agent_id))

    def _send(self, call: Call[R]) -> R:
        result: R = self._transport.send(call)
        return result

    @property
    def _agent(self) -> str | None:
        return self._scope.agent_id

    # -- writes ----------------------------------------------------------------------------

    def ingest(
        self,
        session_id: str,
        role: str | Role,
        content: str,
        *,
        markers: Iterable[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        timestamp: datetime | None = None,
        turn_id: str | None = None,
        visibility: str = "shared",
        durable: bool | None = None,
        ack: AckLevel | None = None,
    ) -> Turn:
        """Remember one turn, written by the bound agent (see `ScopedMemory.ingest`)."""
        if durable is not None:
            raise unsupported("durable", "the server's ingest.durable decides")
        if ack is not None:
            raise unsupported("ack", "the server's ingest.ack decides")
        draft = Draft({"session_id": session_id, "role": role, "content": content,
                        "markers": markers, "metadata": metadata, "timestamp": timestamp,
                        "turn_id": turn_id, "visibility": visibility}, self._agent)
        return self._send(Call("POST", session_path(session_id, "/turns"),
                               lambda r: draft.turn(r.json()), json=draft.body()))

    def ingest_many(
        self, turns: Iterable[Mapping[str, Any]], *, durable: bool | None = None,
        validate_only: bool = False, ack: AckLevel | None = None,
    ) -> list[Turn]:
        """Validate every turn, then write them all as the bound agent in one request (the
        server writes nothing if one is bad)."""
        if durable is not None:
            raise unsupported("durable", "the server's ingest.durable decides")
        if ack is not None:
            raise unsupported("ack", "the server's ingest.ack decides")
        if validate_only:
            raise unsupported("validate_only", "the batch route always writes")
        drafts: list[Draft] = []
        for index, raw in enumerate(turns):
            if not isinstance(raw, Mapping):
                raise ValidationError(f"turns[{index}]", "must be a mapping of turn fields")
            unknown = set(raw) - TURN_KEYS
            if unknown:
                raise ValidationError(f"turns[{index}]", f"unknown fields {sorted(unknown)}")
            if raw.get("namespace") not in (None, self._scope.namespace):
                raise ValidationError(f"turns[{index}].namespace", "is the handle's")
            if raw.get("agent_id") not in (None, self._agent):
                raise ValidationError(f"turns[{index}].agent_id", "is the handle's")
            for required in ("session_id", "role", "content"):
                if required not in raw:
                    raise ValidationError(f"turns[{index}].{required}", "is required")
            try:
                drafts.append(Draft(raw, self._agent))
            except ValidationError as exc:
                raise ValidationError(f"turns[{index}].{exc.field}", exc.message) from None
        body = {"turns": [{"session_id": d.session_id, **d.body()} for d in drafts]}

        def read(response: httpx.Response) -> list[Turn]:
            out = response.json()["turns"]
            return [d.turn(t) for d, t in zip(drafts, out, strict=True)]

        return self._send(Call("POST", "/v1/turns/batch", read, json=body))

    def close_episode(self, session_id: str) -> int:
        """Close the session's open episode after the turns ingested so far."""
        return self._send(Call("POST", session_path(session_id, "/episodes/close"),
                               lambda r: int(r.json()["seq"]), json={"session_end": False}))

    def close_session(self, session_id: str) -> int:
        """The session is over: its open episode closes, whatever its size."""
        return self._send(Call("POST", session_path(session_id, "/episodes/close"),
                               lambda r: int(r.json()["seq"]), json={"session_end": True}))

    def set_session_info(self, session_id: str, *, title: str | None = None) -> SessionInfo:
        """Name the session (and, with a bound agent, record it as the session's agent)."""
        return self._send(Call("PATCH", session_path(session_id),
                               lambda r: SessionInfo.model_validate(r.json()),
                               json={"title": title, "agent_id": self._agent}))

    def forget(
        self, session_id: str, *, turn_ids: Sequence[str] | None = None,
        fact_ids: Sequence[str] | None = None,
    ) -> ForgetReceipt:
        """Remove the session (neither ids given), or these turns and facts of it (an agent
        key: only what its agent wrote)."""
        check_id("session_id", session_id)
        if not turn_ids and not fact_ids:
            return self._send(Call("DELETE", session_path(session_id), _receipt))
        return self._send(Call("POST", session_path(session_id, "/forget"), _receipt,
                               json={"turn_ids": list(turn_ids or ()),
                                     "fact_ids": list(fact_ids or ())}))

    def forget_fact(self, fact_id: str) -> ForgetReceipt:
        """Forget one fact (and every version of it), by its id alone."""
        check_id("fact_id", fact_id)
        return self._send(Call("DELETE", f"/v1/facts/{segment(fact_id)}", _receipt))

    def forget_agent(self, agent_id: str | None = None) -> ForgetReceipt:
        """Forget what `agent_id` (default: the handle's agent) wrote in the namespace."""
        agent = agent_id if agent_id is not None else self._agent
        if agent is None:
            raise ValidationError("agent_id", "name the agent whose data to forget")
        check_id("agent_id", agent)
        if self._pinned and agent != self._agent:
            raise NotPermitted("agent_id", f"this handle acts as agent {self._agent!r} only")
        return self._send(Call("DELETE", f"/v1/agents/{segment(agent)}", _receipt))

    # -- reads -----------------------------------------------------------------------------

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
    ) -> RecallResult:
        """The context that matters for `query` (see `ScopedMemory.recall`)."""
        if include_archived:
            raise unsupported("include_archived", "the recall route reads no archive")
        if isinstance(related_sessions, str):
            related_sessions = [related_sessions]
        body = {"query": query, "agent_id": self._agent, "token_budget": token_budget,
                "preset": preset_name(preset), "limit": limit, "include_history": include_history,
                "explain": explain, "related_sessions": list(related_sessions)}
        return self._send(Call("POST", session_path(session_id, "/recall"),
                               lambda r: recall_result(r.json()), json=body))

    def facts(
        self, session_id: str, *, include_history: bool = False,
        include_inactive: bool = False, include_archived: bool = False,
    ) -> list[Fact]:
        """The session's facts this scope may see, oldest first."""
        params = {"agent_id": self._agent, "include_history": include_history,
                  "include_inactive": include_inactive, "include_archived": include_archived}
        return self._send(Call(
            "GET", session_path(session_id, "/facts/full"),
            lambda r: [Fact.model_validate(f) for f in r.json()["facts"]], params=params))

    def episodes(self, session_id: str) -> list[Episode]:
        """The session's closed episodes this scope may see, oldest first."""
        return self._send(Call(
            "GET", session_path(session_id, "/episodes"),
            lambda r: [Episode.model_validate(e) for e in r.json()["episodes"]],
            params={"agent_id": self._agent}))

    def get_session_stats(self, session_id: str) -> SessionStats:
        """Turns, episodes, open-episode turns, markers, and each stage's backlog."""
        return self._send(Call("GET", session_path(session_id, "/stats/full"),
                               lambda r: SessionStats.model_validate(r.json())))

    def wait_until_processed(
        self, session_id: str, timeout: float = 30.0, *, stage: str = "embed"
    ) -> SessionStats:
        """Block until every turn enqueued so far for the session is recallable (one long
        poll, which the server holds at most its `api.max_wait_s`, 300 s by default)."""

        def read(response: httpx.Response) -> SessionStats:
            out = response.json()
            if not out["done"]:
                raise ProcessingTimeout(session_id, out["processed"], out["target"], timeout)
            return SessionStats.model_validate(out["stats"])

        return self._send(Call("POST", session_path(session_id, "/wait"), read,
                               json={"stage": stage, "timeout": timeout},
                               timeout=timeout + WAIT_SLACK_S))

    def wait_until_reflected(self, session_id: str, timeout: float = 30.0) -> int:
        """Block until every episode closed so far is reflected; returns the last index."""

        def read(response: httpx.Response) -> int:
            out = response.json()
            outcome = out["outcome"]
            if outcome == "not_assigned":
                raise ProcessingTimeout(session_id, out["processed"], out["target"], timeout)
            if outcome == "not_reflected":
                raise ReflectionTimeout(session_id, out["processed"], out["target"], timeout)
            if outcome == "failed":
                raise ReflectionFailed(session_id, out["index"], out.get("error") or "")
            return int(out["index"])

        return self._send(Call("POST", session_path(session_id, "/wait-reflected"), read,
                               json={"timeout": timeout}, timeout=timeout + WAIT_SLACK_S))

    def sessions(self) -> list[str]:
        """This namespace's sessions."""
        return self._send(Call("GET", "/v1/sessions",
                               lambda r: [str(s) for s in r.json()["sessions"]]))

    def traces(self, count: int = 20, session_id: str | None = None) -> list[dict[str, Any]]:
        """The newest reflection traces of episodes this scope may see (secrets redacted)."""
        params = {"agent_id": self._agent, "count": count}
        path = "/v1/traces" if session_id is None else session_path(session_id, "/traces")

        def read(response: httpx.Response) -> list[dict[str, Any]]:
            found: list[dict[str, Any]] = response.json()["traces"]
            return found

        return self._send(Call("GET", path, read, params=params))

    def timeline(
        self, session_id: str, *, kinds: Sequence[str] | None = None,
        limit: int | None = None,
    ) -> list[TimelineEvent]:
        """Turns, episode closes and fact changes this scope may see."""
        if isinstance(kinds, str):
            kinds = [kinds]
        params = {"agent_id": self._agent, "kinds": None if kinds is None else list(kinds),
                  "limit": limit}
        return self._send(Call(
            "GET", session_path(session_id, "/timeline"),
            lambda r: [TimelineEvent.model_validate(e) for e in r.json()["events"]],
            params=params))

    def recall_latest(
        self, session_id: str, query: str, by: str, token_budget: int | None = None, *,
        keys_of: Callable[[RecallResult], Iterable[str]] | None = None,
        preset: str | RecallPolicy | None = None,
    ) -> tuple[RecallResult, dict[str, KeyedTurn]]:
        """`recall`, then `latest(session_id, by, keys_of(result), with_turns=False)` (see
        `ScopedMemory.recall_latest`): two requests here, each checked by the server."""
        result = self.recall(session_id, query, token_budget, preset=preset)
        keys = None if keys_of is None else list(keys_of(result))
        return result, self.latest(session_id, by, keys, with_turns=False)

    def latest(
        self, session_id: str, by: str, keys: Sequence[str] | None = None, *,
        with_turns: bool = True,
    ) -> dict[str, KeyedTurn]:
        """Each key's current value this scope may see, through the server's key index
        (see `ScopedMemory.latest`); the server checks `by` and `keys`."""
        if isinstance(keys, str):
            raise ValidationError("keys", "must be a list of keys, not one string")
        # A query string cannot carry an empty list: `[]` asks for every key without turns
        # (which still checks the session and `by`) and keeps nothing of the answer.
        none = keys is not None and not list(keys)

        def read(response: httpx.Response) -> dict[str, KeyedTurn]:
            if none:
                return {}
            return {str(k): KeyedTurn.model_validate(v)
                    for k, v in response.json()["latest"].items()}

        return self._send(Call(
            "GET", session_path(session_id, "/latest"), read,
            params={"agent_id": self._agent, "by": by,
                    "keys": None if keys is None or none else list(keys),
                    "with_turns": with_turns and not none}))

    def timeline_page(
        self, session_id: str, *, kinds: Sequence[str] | None = None, limit: int = 100,
        cursor: str | None = None,
    ) -> TimelinePage:
        """The `limit` newest events this scope may see older than `cursor` (the
        `next_cursor` of the page before; none: the newest), oldest first."""
        if isinstance(kinds, str):
            kinds = [kinds]
        params = {"agent_id": self._agent, "kinds": None if kinds is None else list(kinds),
                  "limit": limit, "cursor": cursor}
        return self._send(Call(
            "GET", session_path(session_id, "/timeline"),
            lambda r: TimelinePage.model_validate(r.json()), params=params))

    def audit(self, fact_id: str) -> list[AuditEvent]:
        """Why a fact has its status (`NotFound` for a fact this scope may not see)."""
        check_id("fact_id", fact_id)
        return self._send(Call(
            "GET", f"/v1/facts/{segment(fact_id)}/audit",
            lambda r: [AuditEvent.model_validate(e) for e in r.json()["events"]],
            params={"agent_id": self._agent}))

    def session_info(self, session_id: str) -> SessionInfo:
        """Title, agent, created, last active, and how much the session holds."""
        return self._send(Call("GET", session_path(session_id),
                               lambda r: SessionInfo.model_validate(r.json()),
                               params={"agent_id": self._agent}))

    def related_sessions(
        self, session_id: str, *, limit: int = 5, min_score: float = 0.05,
    ) -> list[RelatedSession]:
        """This namespace's other sessions about the same things."""
        return self._send(Call(
            "GET", session_path(session_id, "/related"),
            lambda r: [RelatedSession.model_validate(s) for s in r.json()["related"]],
            params={"agent_id": self._agent, "limit": limit, "min_score": min_score}))

    def session_context(
        self, session_id: str, query: str, token_budget: int | None = None, *,
        related: int = 0, preset: str | RecallPolicy | None = None,
    ) -> SessionContext:
        """The session's header and recall for `query` over it and its related sessions."""

        def read(response: httpx.Response) -> SessionContext:
            out = response.json()
            return SessionContext(
                info=SessionInfo.model_validate(out["info"]),
                related=[RelatedSession.model_validate(s) for s in out["related"]],
                result=recall_result(out["result"]))

        body = {"query": query, "agent_id": self._agent, "token_budget": token_budget,
                "related": related, "preset": preset_name(preset)}
        return self._send(Call("POST", session_path(session_id, "/context"), read,
                               json=body))

    def export(
        self, path: str | Path, session_ids: Sequence[str] | None = None, *,
        vectors: bool = False, progress: Progress | None = None,
    ) -> ExportSummary:
        """Download this namespace's sessions (default: all), as this scope sees them, into
        a versioned JSON Lines file (.gz: compressed). It appears complete or not at all."""
        target = Path(path)
        if isinstance(session_ids, str):
            session_ids = [session_ids]
        if session_ids is not None:
            for sid in session_ids:
                check_id("session_ids", sid)
        params = {"agent_id": self._agent, "vectors": vectors,
                  "gzip": target.suffix == ".gz",
                  "session_id": None if session_ids is None else list(session_ids)}

        def read(response: httpx.Response) -> ExportSummary:
            counts = {str(k): int(v) for k, v in
                      json.loads(response.headers.get(EXPORT_COUNTS, "{}")).items()}
            header = parse_header(next(files.read_lines(target))[1])
            if progress is not None:
                progress(sum(counts.values()))
            return ExportSummary(path=str(target), sessions=header.sessions, counts=counts,
                                 vectors=header.vectors, bytes=target.stat().st_size)

        return self._send(Call("GET", "/v1/export", read, params=params, download=target))

    def import_file(
        self, path: str | Path, *, mode: str = "append", progress: Progress | None = None,
    ) -> ImportSummary:
        """Upload an export file into this namespace: every record in it must be this
        namespace's, and it is appended (taken ids are renamed, nothing existing changes;
        the other modes are operator commands). The file must fit the server's
        ``api.max_body_bytes``."""
        source = Path(path)
        if mode != "append":
            raise unsupported("mode", "a namespace key may only append")
        try:
            content = source.read_bytes()
        except OSError as exc:
            raise ValidationError("path", f"cannot read {source}: {exc.strerror}") from None

        def read(response: httpx.Response) -> ImportSummary:
            summary = ImportSummary.model_validate(response.json())
            if progress is not None:
                progress(sum(summary.written.values()) + sum(summary.skipped.values()))
            return summary.model_copy(update={"path": str(source)})

        gz = source.suffix == ".gz"
        return self._send(Call(
            "POST", "/v1/import", read, params={"mode": mode, "gzip": gz}, content=content,
            content_type="application/gzip" if gz else "application/x-ndjson"))

    # -- the connection --------------------------------------------------------------------

    def close(self) -> None:
        """Close the connection pool (every handle `for_agent` made from this one shares
        it)."""
        self._transport.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def whoami_call(agent_id: str | None) -> Call[Scope]:
    """The key's namespace, as the handle's scope (the one request `connect` makes)."""
    return Call("GET", "/v1/whoami", lambda r: scope_for(r.json()["namespace"], agent_id))


def connect(
    url: str,
    *,
    api_key: str,
    agent_id: str | None = None,
    timeout: float = 30.0,
    retry: RetryPolicy | None = None,
    transport: httpx.BaseTransport | None = None,
) -> RemoteMemory:
    """A handle on a running ``hivemem serve`` at `url`, in the namespace of `api_key`,
    acting as `agent_id` (None: the namespace's shared memory). Checks the key at once
    (`Unauthorized` when the server refuses it). `retry`: how 429/503 answers are retried
    (`RetryPolicy`, default 5 attempts honouring Retry-After)."""
    if agent_id is not None:
        check_id("agent_id", agent_id)
    wire = Transport(url, api_key, timeout=timeout, retry=retry,
                     transport=transport)
    try:
        scope = wire.send(whoami_call(agent_id))
    except BaseException:
        wire.close()
        raise
    return RemoteMemory(wire, scope)
