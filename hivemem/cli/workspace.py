"""Workspace commands: `hivemem init`, `recent`, `status` (`ingest` and `recall` are in
`hivemem.cli.memory`).

They run on the nearest `.hivemem/` workspace (embedded mode, no server), or on a deployment
(see `hivemem.cli.target` for which one wins). Every command takes `--json`: one JSON
document on stdout, nothing else there. Bad input (a bad session id) is rejected before any
store is opened, with exit code 2; an unknown session is an error (exit 1).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from hivemem.cli.output import cells, emit_json, facts_table, plain, stdout
from hivemem.cli.session_args import (
    require_session,
    session_option,
    sessions_option,
)
from hivemem.cli.target import Target, opened, with_target
from hivemem.config import Settings
from hivemem.domain.fact import FactStatus
from hivemem.domain.models import StageLag
from hivemem.errors import HivememError
from hivemem.pipeline.topology import STAGE_NAMES
from hivemem.producer.client import MemoryClient
from hivemem.runtime.workspace import init_workspace
from hivemem.store.status import PipelineStatus

# -- init -----------------------------------------------------------------------------------


@click.command()
@click.argument("folder", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def init(ctx: click.Context, folder: Path | None, as_json: bool) -> None:
    """Create a .hivemem/ workspace here (or in FOLDER); an existing one keeps its data."""
    settings: Settings = ctx.obj["settings"]
    try:
        workspace, created = init_workspace(folder or Path.cwd(), settings)
    except (OSError, HivememError) as exc:
        raise click.ClickException(f"cannot create the workspace: {exc}") from None
    if as_json:
        emit_json({
            "created": created,
            "workspace": str(workspace.root),
            "dir": str(workspace.dir),
            "store": str(workspace.store_path),
            "config": workspace.config.model_dump(mode="json"),
        })
        return
    verb = "Initialized empty" if created else "Reinitialized existing (data kept)"
    stdout().print(plain(f"{verb} hivemem workspace in {workspace.dir}"))
    if created:
        stdout().print(plain('Next: hivemem ingest "We chose PostgreSQL" --kind decision ; '
                             'hivemem recall "database"'))


# -- recent ---------------------------------------------------------------------------------


@click.command()
@session_option()
@click.option("--limit", type=click.IntRange(1, 1000), default=10, show_default=True)
@click.option("--include-inactive", is_flag=True,
              help="Also superseded facts (replaced by a newer version).")
@click.option("--include-archived", is_flag=True,
              help="Also archived facts (retracted by reflection).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@with_target
def recent(
    target: Target, session: str | None, limit: int, include_inactive: bool,
    include_archived: bool, as_json: bool,
) -> None:
    """The newest turns of the session and its current facts (with their ids)."""
    session_id = target.default_session(session)
    shown = {FactStatus.ACTIVE, FactStatus.CONFLICTED}
    if include_inactive:
        shown.add(FactStatus.SUPERSEDED)
    if include_archived:
        shown.add(FactStatus.ARCHIVED)
    with opened(target, read_only=True) as client:
        require_session(client, session_id)
        turns = client.admin.recent_turns(session_id, limit)
        facts = [f for f in client.admin.facts(session_id, include_history=True)
                 if f.status in shown]
    facts.sort(key=lambda f: f.valid_from, reverse=True)
    facts = facts[:limit]
    if as_json:
        emit_json({
            "session_id": session_id,
            "turns": [t.model_dump(mode="json", exclude={"duplicate"}) for t in turns],
            "facts": [f.model_dump(mode="json") for f in facts],
            "statuses": sorted(s.value for s in shown),
            **target.describe(),
        })
        return
    console = stdout()
    table = Table(title=plain(f"newest turns of {session_id}"), expand=True)
    for column in ("seq", "when", "who", "markers", "tags", "content"):
        table.add_column(column, ratio=4 if column == "content" else None)
    for t in turns:
        tags = t.metadata.get("tags") or []
        table.add_row(*cells(t.seq, f"{t.timestamp:%Y-%m-%d %H:%M}",
                             t.agent_id or t.role.value, ", ".join(t.markers),
                             ", ".join(map(str, tags)), t.content))
    console.print(table if turns else plain(f"no turns in session {session_id} yet"))
    if facts:
        console.print(facts_table("facts (newest first)", facts))


# -- status ---------------------------------------------------------------------------------


def session_summary(client: MemoryClient, session_id: str) -> dict[str, Any]:
    stats = client.admin.session_stats(session_id)
    facts = client.admin.facts(session_id, include_history=True)
    return {
        "turns": stats.turns_enqueued,
        "turns_processed": stats.turns_processed,
        "turns_pending": stats.turns_pending,
        "turns_dead_lettered": stats.turns_dead_lettered,
        "episodes": stats.episodes,
        "open_episode_turns": stats.open_episode_turns,
        "markers": stats.markers,
        "facts": len(facts),
        "facts_by_status": dict(Counter(f.status.value for f in facts)),
        "facts_by_kind": dict(Counter(f.kind.value for f in facts)),
        "facts_by_layer": dict(Counter(f.layer for f in facts)),
        "last_activity": stats.last_activity.isoformat() if stats.last_activity else None,
    }


@click.command()
@sessions_option("Only this session (repeatable; default: every session).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@with_target
def status(target: Target, sessions: tuple[str, ...], as_json: bool) -> None:
    """Where memory lives, what it holds per session, and the pipeline's queues."""
    with opened(target, read_only=True) as client:
        if sessions:
            require_session(client, *sessions)
        sessions = tuple(sessions) or tuple(client.admin.sessions())
        summaries = {s: session_summary(client, s) for s in sessions}
        pipeline = client.admin.pipeline_status()
        forgets = {"pending": [r.model_dump(mode="json")
                               for r in client.admin.pending_forgets()],
                   "last": client.admin.erasures(1)}
        stages = [StageLag(stage=s.stage, stream=s.stream, lag=s.lag, pending=s.pending,
                           dead_letters=s.dead_letters).model_dump(mode="json")
                  for s in pipeline.stages if s.stage in STAGE_NAMES]
    reflect_jobs = pipeline.reflect_jobs["queued"]
    data = {**target.describe(), "sessions": summaries, "stages": stages,
            "reflect_queue": reflect_jobs, "pipeline": pipeline.model_dump(mode="json"),
            "forgets": forgets}
    if as_json:
        emit_json(data)
        return
    console = stdout()
    where = target.workspace.root if target.workspace else target.store or data["redis_url"]
    console.print(plain(f"{target.mode} {where}"
                        + (f"  (store {target.store})" if target.store else "")
                        + (f"  through process {data['owner_pid']}, the folder's owner"
                           if data["owner_pid"] else "")))
    if not summaries:
        console.print(plain('no sessions yet: hivemem ingest "..." to remember something'))
    table = Table(title="sessions", expand=True)
    for column in ("session", "turns", "pending", "episodes", "open", "facts by status",
                   "facts by kind", "markers"):
        table.add_column(column)
    for sid, s in summaries.items():
        table.add_row(*cells(
            sid, s["turns"], s["turns_pending"], s["episodes"], s["open_episode_turns"],
            ", ".join(f"{k} {v}" for k, v in sorted(s["facts_by_status"].items())),
            ", ".join(f"{k} {v}" for k, v in sorted(s["facts_by_kind"].items())),
            ", ".join(f"{k} {v}" for k, v in sorted(s["markers"].items())),
        ))
    if summaries:
        console.print(table)
    queues = Table(title="pipeline (all sessions)")
    for column in ("stage", "lag", "pending", "dead letters"):
        queues.add_column(column)
    for stage in stages:
        queues.add_row(stage["stage"], str(stage["lag"]), str(stage["pending"]),
                       str(stage["dead_letters"]))
    queues.add_row("reflect", str(reflect_jobs), "", "")
    console.print(queues)
    print_forgets(console, forgets)
    print_workers(console, pipeline)


def print_forgets(console: Console, forgets: dict[str, Any]) -> None:
    """Forgets under way (a process finishes them when it starts) and the last one done:
    when its bytes left the store's files."""
    for pending in forgets["pending"]:
        console.print(plain(f"forget {pending['forget_id']} ({pending['target']}) under way"
                            f" since {pending['requested_at']}"))
    for done in forgets["last"]:
        disk = done.get("disk") or {}
        console.print(plain(
            f"last forget {done['forget_id']} ({done['target']}) finished"
            f" {done['finished_at']}; on disk: redis AOF"
            f" {'rewritten' if disk.get('redis_aof_rewritten') else 'not rewritten'},"
            f" vectors {disk.get('vectors_vacuum', 'none')}"
            f" ({disk.get('seconds', 0)} s after it began)"))


def print_workers(console: Console, pipeline: PipelineStatus) -> None:
    """The consumers of each stage (XINFO CONSUMERS), rq jobs by state, dead letters."""
    workers = Table(title="workers")
    for column in ("stage", "consumer", "pending", "idle"):
        workers.add_column(column)
    for stage in pipeline.stages:
        for consumer in stage.consumers:
            workers.add_row(stage.stage, consumer.name, str(consumer.pending),
                            f"{consumer.idle_ms / 1000:.1f}s")
        if not stage.consumers:
            workers.add_row(stage.stage, "(none yet)", "", "")
    stale = (f", {pipeline.reflect_workers_stale} not heard from lately"
             if pipeline.reflect_workers_stale else "")
    workers.add_row("reflect", f"{pipeline.reflect_workers} rq worker(s){stale}", "", "")
    console.print(workers)
    if pipeline.boundary_waiting_oldest_ms is not None:
        console.print(f"boundary: {pipeline.boundary_waiting} session(s) with buffered entries,"
                      f" the oldest waiting {pipeline.boundary_waiting_oldest_ms / 1000:.1f}s")
    jobs = ", ".join(f"{k} {v}" for k, v in pipeline.reflect_jobs.items())
    dead = ", ".join(f"{s.stage} {s.dead_letters}" for s in pipeline.stages)
    console.print(f"reflect jobs: {jobs}\ndead letters: {dead} (hivemem dlq list)")


COMMANDS: tuple[click.Command, ...] = (init, recent, status)
