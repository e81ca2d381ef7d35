"""An MCP server (the `mcp` package; install the ``mcp`` extra): hivemem as tools any
MCP-capable agent can call. Transports: stdio (the agent starts ``hivemem mcp``) and
streamable HTTP (``hivemem mcp --transport http``).

Tools: ``ingest`` (store a turn), ``recall`` (the context for a question within a token
budget), ``known_facts`` (what is known: the session's facts and who stated them), the words
the SDK, HTTP API and CLI use. Each carries MCP's hints: ``recall`` and ``known_facts`` only
read; ``ingest`` writes without destroying anything. The server holds only `ScopedMemory`
handles, never anything unscoped:

- stdio: one handle of ``--namespace`` (the agent started the process, like the CLI);
  agents pass their ``agent_id`` to see their private memories beside the shared ones.
- HTTP: every request presents an API key (``Authorization: Bearer hm_...`` or
  ``X-API-Key``), checked like the HTTP API's: the key's namespace, and for an agent key its
  agent only (another ``agent_id`` is refused). A request without a valid key gets 401
  before it reaches MCP. Only on loopback may the server run without keys (``--no-auth``).

A tool that fails returns an MCP error result (``isError``) whose text is the one-line
reason, naming the field that was wrong; nothing else of the failure reaches the agent.
"""

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal

import structlog
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import ValidationError as PydanticError
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from hivemem import __version__
from hivemem.errors import HivememError, StoreUnavailable, ValidationError
from hivemem.producer.client import MemoryClient
from hivemem.producer.scoped import ScopedMemory
from hivemem.store.apikeys import ApiKeyInfo, ApiKeyStore, presented_key

log = structlog.get_logger(__name__)

INSTRUCTIONS = (
    "hivemem is shared memory for agents. Call `ingest` with each message worth keeping "
    "(decisions, constraints, failures, goals are detected), `recall` before answering to get "
    "the relevant context, `known_facts` for the distilled current facts of a session, and "
    "`forget` to remove a session, turns or facts for good."
)
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
# A turn is added, never anything overwritten or removed; a repeated call with the same
# content is a new turn (not idempotent). Reads are read-only; none reaches outside hivemem.
WRITES = ToolAnnotations(title="Ingest a message", read_only_hint=False,
                         destructive_hint=False, idempotent_hint=False, open_world_hint=False)
READS = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                        open_world_hint=False)
# A forget removes for good (destructive); repeating it removes nothing more.
FORGETS = ToolAnnotations(title="Forget", read_only_hint=False, destructive_hint=True,
                          idempotent_hint=True, open_world_hint=False)

# Who is asking: the headers of the tool call's HTTP request (None on stdio) -> a handle.
Resolver = Callable[[Any], ScopedMemory]


def reason(exc: HivememError) -> str:
    """The one line an agent gets for a failed call: the field and what was wrong."""
    if isinstance(exc, ValidationError):
        return f"{exc.field}: {exc.message}"
    if isinstance(exc, StoreUnavailable):
        return f"{exc.store} is unavailable; retry later"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


@contextmanager
def _tool_errors() -> Iterator[None]:
    try:
        yield
    except HivememError as exc:
        raise ToolError(reason(exc)) from None


def fixed(memory: ScopedMemory) -> Resolver:
    """Every call through one handle (stdio, or HTTP on loopback with ``--no-auth``)."""
    return lambda _headers: memory


def by_key(client: MemoryClient, keys: ApiKeyStore) -> Resolver:
    """Every call through the handle of the API key its request presents."""

    def resolve(headers: Any) -> ScopedMemory:
        info = keys.authenticate(presented_key(_lowered(headers)) or "")
        if info is None:
            raise ToolError("an API key is required (Authorization: Bearer hm_...)")
        return handle_of(client, info)

    return resolve


def handle_of(client: MemoryClient, info: ApiKeyInfo) -> ScopedMemory:
    if info.agent_id is None:
        return client.scoped(namespace=info.namespace)
    return client.scoped(namespace=info.namespace, agent_id=info.agent_id).pin()


def _lowered(headers: Any) -> dict[str, str]:
    if headers is None:
        return {}
    return {str(k).lower(): str(v) for k, v in dict(headers).items()}


def one_line(exc: PydanticError) -> str:
    """The arguments' first problem as ``field: what``, on one line (pydantic's own text is
    a multi-line dump with a documentation URL)."""
    errors = exc.errors()
    first = errors[0] if errors else {"loc": (), "msg": "invalid arguments"}
    field = ".".join(str(p) for p in first.get("loc", ())) or "arguments"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return " ".join(f"{field}: {first.get('msg', 'invalid')}{more}".split())


class _Server(MCPServer):
    """`MCPServer` whose argument errors are one line, like every other tool error."""

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, PydanticError):
                raise ToolError(one_line(cause)) from cause
            raise


def build_server(memory: ScopedMemory | Resolver) -> Any:
    """An MCP server (mcp 2's `MCPServer`) acting through `memory`: one handle, or a
    resolver from each call's request headers to its handle."""
    resolve = fixed(memory) if isinstance(memory, ScopedMemory) else memory
    server = _Server("hivemem", instructions=INSTRUCTIONS, version=__version__)

    def handle(ctx: Context, agent_id: str | None) -> ScopedMemory:
        return resolve(ctx.headers).for_agent(agent_id)

    @server.tool(annotations=WRITES)
    def ingest(
        session_id: str,
        content: str,
        ctx: Context,
        role: Literal["user", "assistant", "system", "tool"] = "assistant",
        agent_id: str | None = None,
        visibility: Literal["private", "shared"] = "shared",
        markers: list[str] | None = None,
    ) -> dict[str, Any]:
        """Store one message in a session's memory. `visibility`: shared with every agent of
        the namespace, or private to `agent_id`. Returns its id and sequence number."""
        with _tool_errors():
            turn = handle(ctx, agent_id).ingest(session_id, role, content, markers=markers,
                                                visibility=visibility)
        return {"session_id": turn.session_id, "turn_id": turn.turn_id, "seq": turn.seq,
                "visibility": turn.visibility, "duplicate": turn.duplicate}

    @server.tool(annotations=READS.model_copy(update={"title": "Recall context"}))
    def recall(
        session_id: str,
        query: str,
        ctx: Context,
        token_budget: int = 1000,
        agent_id: str | None = None,
        preset: Literal["cheap", "balanced", "high_recall", "agent_state"] | None = None,
    ) -> dict[str, Any]:
        """The context that matters for `query` in the session, best first, within
        `token_budget` tokens: `context` is ready to put in a prompt (oldest first)."""
        with _tool_errors():
            result = handle(ctx, agent_id).recall(session_id, query, token_budget,
                                                  preset=preset)
        return {
            "context": result.render(),
            "used_tokens": result.used_tokens,
            "items": [
                {"content": i.content, "source": i.source_type, "agent_id": i.agent_id,
                 "fact_id": i.source_id if i.source_type == "fact" else None,
                 "score": round(i.score, 4), "why": i.components.reasons(),
                 "timestamp": i.timestamp.isoformat() if i.timestamp else None}
                for i in result
            ],
        }

    @server.tool(annotations=READS.model_copy(update={"title": "Known facts"}))
    def known_facts(
        session_id: str, ctx: Context, agent_id: str | None = None,
        include_history: bool = False,
    ) -> dict[str, Any]:
        """What is known in the session: its current facts (decisions, constraints,
        failures, goals, preferences), each with who stated it; with `include_history`,
        superseded versions too."""
        with _tool_errors():
            facts = handle(ctx, agent_id).facts(session_id, include_history=include_history)
        return {"facts": [
            {"fact_id": f.fact_id, "content": f.content, "kind": f.kind.value,
             "status": f.status.value, "stated_by": f.agent_id, "visibility": f.visibility,
             "valid_from": f.valid_from.isoformat()}
            for f in facts
        ]}

    @server.tool(annotations=FORGETS)
    def forget(
        session_id: str, ctx: Context, turn_ids: list[str] | None = None,
        fact_ids: list[str] | None = None, agent_id: str | None = None,
    ) -> dict[str, Any]:
        """Remove from memory, for good: the whole session (no ids given), or these turns
        and facts of it (what was derived only from them goes too). An agent key forgets
        only what its agent wrote. Returns what was removed, by store and kind."""
        with _tool_errors():
            receipt = handle(ctx, agent_id).forget(session_id, turn_ids=turn_ids,
                                                   fact_ids=fact_ids)
        return receipt.model_dump(mode="json")

    return server


class RequireKey:
    """ASGI gate in front of the MCP HTTP app: no valid API key, no MCP (401 problem JSON)."""

    def __init__(self, app: ASGIApp, keys: ApiKeyStore) -> None:
        self.app = app
        self.keys = keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers") or []}
        presented = presented_key(headers)
        info = await run_in_threadpool(self.keys.authenticate, presented or "")
        if info is None:
            body = json.dumps({"type": "about:blank", "title": "Unauthorized", "status": 401,
                               "detail": "an API key is required (Authorization: Bearer"
                               " hm_...)"}).encode()
            await send({"type": "http.response.start", "status": 401, "headers": [
                (b"content-type", b"application/problem+json"),
                (b"www-authenticate", b"Bearer"),
                (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)


def check_bind(host: str, *, auth: bool) -> None:
    """Without keys, the MCP HTTP server may listen on loopback only."""
    if not auth and host not in LOOPBACK:
        raise ValidationError(
            "host", f"{host!r} is beyond loopback: the MCP HTTP server needs API keys there"
            " (drop --no-auth)")


def run(client: MemoryClient, *, transport: str, namespace: str, host: str, port: int,
        auth: bool = True) -> None:
    if transport == "stdio":
        build_server(client.scoped(namespace=namespace)).run("stdio")
        return
    check_bind(host, auth=auth)
    import uvicorn  # noqa: PLC0415 (optional dep)

    keys = client.admin.api_keys()
    resolver = by_key(client, keys) if auth else fixed(client.scoped(namespace=namespace))
    app: ASGIApp = build_server(resolver).streamable_http_app(host=host)
    if auth:
        app = RequireKey(app, keys)
    log.info("mcp.http.started", host=host, port=port, auth=auth)
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
