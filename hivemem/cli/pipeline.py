"""Pipeline commands: `stats`, `facts`, `episodes`, `traces`, `close-episode`, `reflect`,
`rebuild-state`, `dlq list|replay`.

Each runs on the target `hivemem.cli.target` resolves (flags, `--local`, the nearest
workspace, the environment), the same one as every other memory command, and takes the
session as every command does (`hivemem.cli.session_args`).
"""

from __future__ import annotations

import json
from typing import Any

import click
from rich.table import Table

from hivemem.cli.output import cells, emit_json, history_table, id_param, plain, stderr
from hivemem.cli.output import stdout as out
from hivemem.cli.session_args import (
    legacy_sessions,
    pick_session,
    require_session,
    session_option,
)
from hivemem.cli.target import Target, opened, with_target


@click.command()
@session_option()
@legacy_sessions()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@with_target
def stats(target: Target, session: str | None, legacy: str | None, as_json: bool) -> None:
    """Show a session's progress through the pipeline."""
    session_id = target.default_session(pick_session("stats", legacy, session))
    with opened(target, read_only=True) as client:
        require_session(client, session_id)
        result = client.admin.session_stats(session_id)
    data: dict[str, Any] = result.model_dump(mode="json")
    data["turns_pending"] = result.turns_pending
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    stages = data.pop("stages")
    table = Table(title=plain(f"session {session_id}"))
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
@session_option()
@legacy_sessions()
@click.option("--session-end", is_flag=True, help="The session is over (close_session).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@with_target
def close_episode(target: Target, session: str | None, legacy: str | None, session_end: bool,
                  as_json: bool) -> None:
    """Close the session's open episode after the turns ingested so far."""
    session_id = target.default_session(pick_session("close-episode", legacy, session))
    with opened(target) as client:
        seq = client.close_session(session_id) if session_end else client.close_episode(session_id)
    if as_json:
        emit_json({"session_id": session_id, "seq": seq})
    else:
        out().print(plain(f"closed the open episode of {session_id} at #{seq}"
                          + (" (the session is over)" if session_end else "")))


@click.command("rebuild-state")
@session_option("Only this session (default: every session).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@with_target
def rebuild_state(target: Target, session: str | None, as_json: bool) -> None:
    """Rebuild Redis session state from Qdrant (after a Redis loss)."""
    with opened(target) as client, stderr().status("Scrolling Qdrant..."):
        count = client.admin.rebuild_state(session)
    if as_json:
        emit_json({"rebuilt": count})
    else:
        click.echo(f"rebuilt {count} session(s)")


@click.command()
@session_option()
@legacy_sessions()
@click.option("--history", is_flag=True, help="Every version, with its validity.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@with_target
def facts(target: Target, session: str | None, legacy: str | None, history: bool,
          as_json: bool) -> None:
    """The facts reflected for the session, with their ids (`hivemem audit ID`)."""
    session_id = target.default_session(pick_session("facts", legacy, session))
    with opened(target, read_only=True) as client:
        require_session(client, session_id)
        found = client.admin.facts(session_id, include_history=history)
    if as_json:
        emit_json([f.model_dump(mode="json") for f in found])
    else:
        out().print(history_table(found))


@click.command()
@session_option()
@legacy_sessions()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@with_target
def episodes(target: Target, session: str | None, legacy: str | None, as_json: bool) -> None:
    """The closed episodes of the session."""
    session_id = target.default_session(pick_session("episodes", legacy, session))
    with opened(target, read_only=True) as client:
        require_session(client, session_id)
        found = client.admin.episodes(session_id)
    if as_json:
        emit_json([e.model_dump(mode="json", exclude={"centroid"}) for e in found])
        return
    table = Table(title=plain(f"episodes of {session_id}"))
    for column in ("index", "seqs", "turns", "reason", "markers", "agents"):
        table.add_column(column)
    for e in found:
        table.add_row(*cells(e.index, f"{e.seq_start}-{e.seq_end}", e.turn_count,
                             e.close_reason, ", ".join(e.markers), ", ".join(e.agent_ids)))
    out().print(table)


@click.command()
@session_option("The session whose episodes to reflect again (default: the workspace's"
                " default session, else `default`).")
@click.option("--replay", "replay", default=None, hidden=True,
              callback=id_param("session", "--replay"))
@click.option("--episode", "episode_id", default=None, help="Only this episode.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@with_target
def reflect(target: Target, session: str | None, replay: str | None, episode_id: str | None,
            as_json: bool) -> None:
    """Enqueue the session's reflection jobs again (after failures); a reflect worker runs
    them."""
    if replay is not None:
        if session is not None:
            raise click.UsageError("give the session once, as --session")
        click.echo("note: `--replay SESSION` is deprecated and goes away in the next release;"
                   " use `--session SESSION`", err=True)
    session_id = target.default_session(session or replay)
    with opened(target) as client:
        require_session(client, session_id)
        jobs = client.admin.replay_reflection(session_id, episode_id)
    if as_json:
        emit_json({"session_id": session_id, "jobs": jobs})
    else:
        click.echo(f"{len(jobs)} reflection job(s) enqueued for {session_id}")


@click.command()
@session_option("Only this session's (default: every session's).")
@click.option("--count", default=10, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON document (a list).")
@with_target
def traces(target: Target, session: str | None, count: int, as_json: bool) -> None:
    """The newest reflection traces (secrets redacted), as JSON lines."""
    with opened(target, read_only=True) as client:
        if session is not None:
            require_session(client, session)
        found = client.admin.traces(count, session)
    if as_json:
        emit_json(found)
        return
    for trace in found:
        click.echo(json.dumps(trace, default=str))


@click.group()
def dlq() -> None:
    """Dead-lettered entries."""


@dlq.command("list")
@click.option("--count", default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON document (a list).")
@with_target
def dlq_list(target: Target, count: int, as_json: bool) -> None:
    """Entries a worker gave up on, with the error and delivery count (JSON lines)."""
    with opened(target, read_only=True) as client:
        letters = client.admin.dead_letters(count)
    if as_json:
        emit_json([letter.model_dump(mode="json") for letter in letters])
        return
    for letter in letters:
        click.echo(json.dumps(letter.model_dump(mode="json")))
    if not letters:
        stderr().print("no dead letters")


@dlq.command("replay")
@click.argument("entry_ids", nargs=-1)
@click.option("--stage", type=click.Choice(["embed", "boundary"]), default="embed",
              show_default=True, help="Whose dead letters.")
@click.option("--count", default=1000, show_default=True, help="At most this many.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (as without it).")
@with_target
def dlq_replay(target: Target, entry_ids: tuple[str, ...], stage: str, count: int,
               as_json: bool) -> None:
    """Re-enqueue dead letters (all, or only these original entry ids)."""
    with opened(target) as client:
        replayed = client.admin.replay_dead_letters(
            list(entry_ids) if entry_ids else None, stage=stage, count=count
        )
    click.echo(json.dumps({"stage": stage, "replayed": replayed}))


COMMANDS: tuple[click.Command, ...] = (
    stats, facts, episodes, traces, close_episode, reflect, rebuild_state, dlq,
)
