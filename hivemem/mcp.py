"""An MCP server (the `mcp` package; install the ``mcp`` extra): hivemem as tools any
MCP-capable agent can call. Transports: stdio (the agent starts ``hivemem mcp``) and
streamable HTTP (``hivemem mcp --transport http``).

Tools: ``remember`` (store a turn), ``recall`` (the context for a question within a token
budget), ``known_facts`` (what is known: the session's facts and who stated them). The
server holds one `ScopedMemory` of its namespace (``--namespace``) and nothing unscoped;
agents pass their ``agent_id`` to see their private memories beside the shared ones (the
handle narrows to that agent, never to another namespace).
"""

from typing import Any, Literal

from hivemem import __version__
from hivemem.producer.client import MemoryClient
from hivemem.producer.scoped import ScopedMemory

INSTRUCTIONS = (
    "hivemem is shared memory for agents. Call `remember` with each message worth keeping "
    "(decisions, constraints, failures, goals are detected), `recall` before answering to get "
    "the relevant context, and `known_facts` for the distilled current facts of a session."
)


def build_server(memory: ScopedMemory) -> Any:
    """An MCP server (mcp 2's `MCPServer`) acting through `memory` (one namespace)."""
    # Lazy like every heavy optional dependency (see pyproject's banned-module-level-imports).
    from mcp.server.mcpserver import MCPServer  # noqa: PLC0415

    server = MCPServer("hivemem", instructions=INSTRUCTIONS, version=__version__)

    @server.tool()
    def remember(
        session_id: str,
        content: str,
        role: Literal["user", "assistant", "system", "tool"] = "assistant",
        agent_id: str | None = None,
        visibility: Literal["private", "shared"] = "shared",
        markers: list[str] | None = None,
    ) -> dict[str, Any]:
        """Store one message in a session's memory. `visibility`: shared with every agent of
        the namespace, or private to `agent_id`. Returns its id and sequence number."""
        turn = memory.for_agent(agent_id).ingest(session_id, role, content, markers=markers,
                                                 visibility=visibility)
        return {"session_id": turn.session_id, "turn_id": turn.turn_id, "seq": turn.seq,
                "visibility": turn.visibility, "duplicate": turn.duplicate}

    @server.tool()
    def recall(
        session_id: str,
        query: str,
        token_budget: int = 1000,
        agent_id: str | None = None,
        preset: Literal["cheap", "balanced", "high_recall", "agent_state"] | None = None,
    ) -> dict[str, Any]:
        """The context that matters for `query` in the session, best first, within
        `token_budget` tokens: `context` is ready to put in a prompt (oldest first)."""
        result = memory.for_agent(agent_id).recall(session_id, query, token_budget,
                                                   preset=preset)
        return {
            "context": result.render(),
            "used_tokens": result.used_tokens,
            "items": [
                {"content": i.content, "source": i.source_type, "agent_id": i.agent_id,
                 "score": round(i.score, 4), "why": i.components.reasons(),
                 "timestamp": i.timestamp.isoformat() if i.timestamp else None}
                for i in result
            ],
        }

    @server.tool()
    def known_facts(
        session_id: str, agent_id: str | None = None, include_history: bool = False
    ) -> dict[str, Any]:
        """What is known in the session: its current facts (decisions, constraints,
        failures, goals, preferences), each with who stated it; with `include_history`,
        superseded versions too."""
        facts = memory.for_agent(agent_id).facts(session_id, include_history=include_history)
        return {"facts": [
            {"fact_id": f.fact_id, "content": f.content, "kind": f.kind.value,
             "status": f.status.value, "stated_by": f.agent_id, "visibility": f.visibility,
             "valid_from": f.valid_from.isoformat()}
            for f in facts
        ]}

    return server


def run(client: MemoryClient, *, transport: str, namespace: str, host: str, port: int) -> None:
    server = build_server(client.scoped(namespace=namespace))
    if transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host=host, port=port)
