"""Pipeline commands: `ingest`, `recall`, `stats`, `facts`, `episodes`, `traces`,
`close-episode`, `reflect`, `rebuild-state`, `dlq list|replay`.

Each runs on the target `hivemem.cli.target` resolves (flags, `--local`, the nearest
workspace, the environment), the same one as every other memory command.
"""

from __future__ import annotations

import json
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from hivemem.cli.output import cells, emit_json, history_table, id_param, items_table, stderr
from hivemem.cli.output import stdout as out
from hivemem.cli.target import Target, opened, with_target
from hivemem.domain.recall.policy import PRESETS

SESSION_ID = id_param("session", "SESSION_ID")


@click.command()
@click.argument("session_id", callback=SESSION_ID)
@click.argument("query")
@click.option("--budget", type=int, default=None, help="Token budget (default from config).")
@click.option("--limit", type=int, default=None, help="At most this many items.")
@click.option("--preset", type=click.Choice(sorted(PRESETS)), default=None,
              help="Recall policy (default: balanced).")
@click.option("--explain", is_flag=True, help="Also list what was left out, and why.")
@click.option("--related", "related", multiple=True, help="Also search this session.")
@click.option("--namespace", default=None, help="The session's namespace (default: default).")
@click.option("--agent", default=None, help="Recall as this agent (adds its private memories).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@with_target
def recall(
    target: Target, session_id: str, query: str, budget: int | None, limit: int | None,
    preset: str | None, explain: bool, related: tuple[str, ...], namespace: str | None,
    agent: str | None, as_json: bool,
) -> None:
    """Print the recalled context for QUERY in SESSION_ID."""
    with opened(target) as client:
        result = client.recall(session_id, query, token_budget=budget, limit=limit,
                               preset=preset, explain=explain, related_sessions=related,
                               agent_id=agent, namespace=namespace)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
        return
    console = out()
    console.print(items_table(
        escape(f"{query}  ({result.preset}: {result.used_tokens}/{result.token_budget} tokens)"),
        result, speakers=True,
    ))
    if explain and result.excluded:
        table = Table(title=f"left out ({len(result.excluded)})", expand=True)
        for column in ("reason", "score", "detail", "content"):
            table.add_column(column, ratio=1 if column == "content" else None)
        for x in result.excluded:
            table.add_row(*cells(x.reason, f"{x.score:.3f}", x.detail, x.content[:120]))
        console.print(table)


@click.command()
@click.argument("session_id", callback=SESSION_ID)
@click.argument("role")
@click.argument("content")
@click.option("--agent", default=None)
@click.option("--marker", "markers", multiple=True)
@click.option("--namespace", default=None, help="The session's namespace (default: default).")
@click.option("--private", is_flag=True, help="Visible to --agent only (default: shared).")
@with_target
def ingest(
    target: Target, session_id: str, role: str, content: str, agent: str | None,
    markers: tuple[str, ...], namespace: str | None, private: bool,
) -> None:
    """Enqueue one turn."""
    with opened(target) as client:
        turn = client.ingest(session_id, role, content, agent_id=agent, markers=markers or None,
                             namespace=namespace, visibility="private" if private else "shared")
    click.echo(json.dumps({"turn_id": turn.turn_id, "seq": turn.seq, "duplicate": turn.duplicate}))


@click.command()
@click.argument("session_id", callback=SESSION_ID)
@click.option("--json", "as_json", is_flag=True)
@with_target
def stats(target: Target, session_id: str, as_json: bool) -> None:
    """Show a session's progress through the pipeline."""
    with opened(target) as client:
        result = client.admin.session_stats(session_id)
    data: dict[str, Any] = result.model_dump(mode="json")
    data["turns_pending"] = result.turns_pending
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    stages = data.pop("stages")
    table = Table(title=f"session {session_id}")
    table.add_column("field")
    table.add_column("value")
    for key, value in data.items():
        table.add_row(*cells(key, value))
    console = out()
    console.print(table)
    backlog = Table(title="pipeline (all sessions)")
    columns = ("stage", "stream", "lag", "pending", "dead_letters")
    for column in columns:
        backlog.add_column(column)
    for stage in stages:
        backlog.add_row(*cells(*(stage[c] for c in columns)))
    console.print(backlog)


@click.command("close-episode")
@click.argument("session_id", callback=SESSION_ID)
@click.option("--session-end", is_flag=True, help="The session is over (close_session).")
@with_target
def close_episode(target: Target, session_id: str, session_end: bool) -> None:
    """Close SESSION_ID's open episode after the turns ingested so far."""
    with opened(target) as client:
        seq = client.close_session(session_id) if session_end else client.close_episode(session_id)
    click.echo(json.dumps({"session_id": session_id, "seq": seq}))


@click.command("rebuild-state")
@click.option("--session", "session_id", default=None, callback=id_param("session", "--session"),
              help="Only this session.")
@with_target
def rebuild_state(target: Target, session_id: str | None) -> None:
    """Rebuild Redis session state from Qdrant (after a Redis loss)."""
    with opened(target) as client, stderr().status("Scrolling Qdrant..."):
        count = client.admin.rebuild_state(session_id)
    click.echo(f"rebuilt {count} session(s)")


@click.command()
@click.argument("session_id", callback=SESSION_ID)
@click.option("--history", is_flag=True, help="Every version, with its validity.")
@click.option("--json", "as_json", is_flag=True)
@with_target
def facts(target: Target, session_id: str, history: bool, as_json: bool) -> None:
    """The facts reflected for SESSION_ID."""
    with opened(target) as client:
        found = client.admin.facts(session_id, include_history=history)
    if as_json:
        emit_json([f.model_dump(mode="json") for f in found])
    else:
        out().print(history_table(found))


@click.command()
@click.argument("session_id", callback=SESSION_ID)
@click.option("--json", "as_json", is_flag=True)
@with_target
def episodes(target: Target, session_id: str, as_json: bool) -> None:
    """The closed episodes of SESSION_ID."""
    with opened(target) as client:
        found = client.admin.episodes(session_id)
    if as_json:
        emit_json([e.model_dump(mode="json", exclude={"centroid"}) for e in found])
        return
    table = Table(title=f"episodes of {session_id}")
    for column in ("index", "seqs", "turns", "reason", "markers", "agents"):
        table.add_column(column)
    for e in found:
        table.add_row(*cells(e.index, f"{e.seq_start}-{e.seq_end}", e.turn_count,
                             e.close_reason, ", ".join(e.markers), ", ".join(e.agent_ids)))
    out().print(table)


@click.command()
@click.option("--replay", "session_id", required=True, callback=id_param("session", "--replay"),
              help="Reflect this session's episodes again (after failures).")
@click.option("--episode", "episode_id", default=None, help="Only this episode.")
@with_target
def reflect(target: Target, session_id: str, episode_id: str | None) -> None:
    """Enqueue reflection jobs again; a reflect worker runs them."""
    with opened(target) as client:
        jobs = client.admin.replay_reflection(session_id, episode_id)
    click.echo(json.dumps({"session_id": session_id, "jobs": jobs}))


@click.command()
@click.option("--session", "session_id", default=None, callback=id_param("session", "--session"))
@click.option("--count", default=10, show_default=True)
@with_target
def traces(target: Target, session_id: str | None, count: int) -> None:
    """The newest reflection traces (secrets redacted), as JSON lines."""
    with opened(target) as client:
        found = client.admin.traces(count, session_id)
    for trace in found:
        click.echo(json.dumps(trace, default=str))


@click.group()
def dlq() -> None:
    """Dead-lettered entries."""


@dlq.command("list")
@click.option("--count", default=20, show_default=True)
@with_target
def dlq_list(target: Target, count: int) -> None:
    """Entries a worker gave up on, with the error and delivery count (JSON lines)."""
    with opened(target) as client:
        letters = client.admin.dead_letters(count)
    for letter in letters:
        click.echo(json.dumps(letter.model_dump(mode="json")))
    if not letters:
        stderr().print("no dead letters")


@dlq.command("replay")
@click.argument("entry_ids", nargs=-1)
@click.option("--stage", type=click.Choice(["embed", "boundary"]), default="embed",
              show_default=True, help="Whose dead letters.")
@click.option("--count", default=1000, show_default=True, help="At most this many.")
@with_target
def dlq_replay(target: Target, entry_ids: tuple[str, ...], stage: str, count: int) -> None:
    """Re-enqueue dead letters (all, or only these original entry ids)."""
    with opened(target) as client:
        replayed = client.admin.replay_dead_letters(
            list(entry_ids) if entry_ids else None, stage=stage, count=count
        )
    click.echo(json.dumps({"stage": stage, "replayed": replayed}))


COMMANDS: tuple[click.Command, ...] = (
    ingest, recall, stats, facts, episodes, traces, close_episode, reflect, rebuild_state, dlq,
)
