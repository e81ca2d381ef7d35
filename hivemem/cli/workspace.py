"""Workspace commands: `hivemem init`, `add`, `recent`, `search`, `context`, `status`.

They run on the nearest `.hivemem/` workspace (embedded mode, no server), or on a deployment
(see `hivemem.cli.target` for which one wins). Every command takes `--json`: one JSON
document on stdout, nothing else there. Bad input (empty text or query, a bad session id)
is rejected before any store is opened, with exit code 2.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from hivemem.cli.output import (
    checked,
    emit_json,
    facts_table,
    id_param,
    item_json,
    items_table,
    stdout,
)
from hivemem.cli.recall_view import RecallView, recall_view
from hivemem.cli.target import Target, opened, with_target
from hivemem.config import Settings
from hivemem.domain.fact import FactStatus
from hivemem.domain.models import BUILTIN_MARKERS, StageLag
from hivemem.domain.turn import check_content, check_query
from hivemem.errors import HivememError, ValidationError
from hivemem.pipeline.topology import STAGE_NAMES
from hivemem.producer.client import MemoryClient
from hivemem.runtime.workspace import init_workspace
from hivemem.store.status import PipelineStatus

KINDS = ("decision", "constraint", "failure", "goal", "preference")
PRESETS = ("cheap", "balanced", "high_recall", "agent_state")
SESSION = id_param("session", "--session")


def _text_arg(ctx: click.Context, _param: click.Parameter, value: str) -> str:
    settings: Settings = ctx.obj["settings"]
    return str(checked("TEXT", lambda v: check_content(v, settings.ingest.max_content_bytes),
                       value))


def _query_arg(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    return str(checked("QUERY", check_query, value))


def _tags(_ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]
          ) -> tuple[str, ...]:
    for tag in value:
        if not tag.strip():
            raise click.BadParameter("must not be empty", param_hint="--tag")
    return value


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
    stdout().print(f"{verb} hivemem workspace in {workspace.dir}")
    if created:
        stdout().print('Next: hivemem add "We chose PostgreSQL" --kind decision ; '
                       'hivemem search "database"')


# -- add ------------------------------------------------------------------------------------


@click.command()
@click.argument("text", callback=_text_arg)
@click.option("--tag", "tags", multiple=True, callback=_tags,
              help="A tag (repeatable); kept in metadata.")
@click.option("--kind", type=click.Choice(KINDS), default=None,
              help="What the text is: sets the marker (preference: custom:preference).")
@click.option("--session", default=None, callback=SESSION,
              help="Session id (default: the workspace's).")
@click.option("--role", type=click.Choice(["user", "assistant", "system", "tool"]),
              default="user", show_default=True)
@click.option("--agent", default=None, callback=id_param("agent", "--agent"),
              help="Agent id of the speaker.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@with_target
def add(
    target: Target, text: str, tags: tuple[str, ...], kind: str | None,
    session: str | None, role: str, agent: str | None, as_json: bool,
) -> None:
    """Remember TEXT as a turn of the session (embedded and reflected before exit)."""
    session_id = target.default_session(session)
    markers: list[str] = []
    if kind in BUILTIN_MARKERS:
        markers.append(kind)
    elif kind:
        markers.append(f"custom:{kind}")
    metadata: dict[str, Any] = {"source": "cli"}
    if tags:
        metadata["tags"] = list(dict.fromkeys(tags))
    if kind:
        metadata["kind"] = kind
    with opened(target) as client:
        turn = client.ingest(session_id, role, text, agent_id=agent, markers=markers or None,
                             metadata=metadata)
    result = {
        "session_id": session_id,
        "turn_id": turn.turn_id,
        "seq": turn.seq,
        "duplicate": turn.duplicate,
        "markers": list(turn.markers),
        "metadata": turn.metadata,
        "token_count": turn.token_count,
        **target.describe(),
    }
    if as_json:
        emit_json(result)
    else:
        stdout().print(f"remembered #{turn.seq} in session {session_id}"
                       + (escape(f" [{', '.join(turn.markers)}]") if turn.markers else ""))


# -- recent ---------------------------------------------------------------------------------


@click.command()
@click.option("--session", default=None, callback=SESSION,
              help="Session id (default: the workspace's).")
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
    """The newest turns of the session and its current facts."""
    session_id = target.default_session(session)
    shown = {FactStatus.ACTIVE, FactStatus.CONFLICTED}
    if include_inactive:
        shown.add(FactStatus.SUPERSEDED)
    if include_archived:
        shown.add(FactStatus.ARCHIVED)
    with opened(target) as client:
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
    table = Table(title=f"newest turns of {session_id}", expand=True)
    for column in ("seq", "when", "who", "markers", "tags", "content"):
        table.add_column(column, ratio=4 if column == "content" else None)
    for t in turns:
        tags = t.metadata.get("tags") or []
        table.add_row(str(t.seq), f"{t.timestamp:%Y-%m-%d %H:%M}", t.agent_id or t.role.value,
                      ", ".join(t.markers), Text(", ".join(map(str, tags))), Text(t.content))
    console.print(table if turns else f"no turns in session {session_id} yet")
    if facts:
        console.print(facts_table("facts (newest first)", facts))


# -- search / context -----------------------------------------------------------------------


def _recall(target: Target, session_id: str, query: str, budget: int | None,
            preset: str | None, limit: int | None, explain: bool) -> RecallView:
    with opened(target) as client:
        try:
            return recall_view(client, session_id, query, budget, preset=preset, limit=limit,
                               explain=explain)
        except ValidationError as exc:
            raise click.BadParameter(exc.message, param_hint=exc.field) from None


@click.command()
@click.argument("query", callback=_query_arg)
@click.option("--session", default=None, callback=SESSION,
              help="Session id (default: the workspace's).")
@click.option("--limit", type=click.IntRange(1, 1000), default=10, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@with_target
def search(target: Target, query: str, session: str | None, limit: int, as_json: bool) -> None:
    """The session's memories ranked for QUERY, with scores and why."""
    session_id = target.default_session(session)
    view = _recall(target, session_id, query, None, None, limit, explain=False)
    if as_json:
        emit_json({
            "session_id": session_id,
            "query": query,
            "results": [item_json(r, i) for r, i in enumerate(view.items, 1)],
        })
        return
    stdout().print(items_table(escape(f"{query}  ({len(view.items)} results)"), view.items))


@click.command()
@click.argument("query", callback=_query_arg)
@click.option("--budget", type=click.IntRange(min=1), default=None,
              help="Token budget (default from config).")
@click.option("--preset", type=click.Choice(PRESETS), default=None,
              help="Recall preset (default: balanced).")
@click.option("--session", default=None, callback=SESSION,
              help="Session id (default: the workspace's).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@with_target
def context(
    target: Target, query: str, budget: int | None, preset: str | None,
    session: str | None, as_json: bool,
) -> None:
    """The budgeted context recall would hand an agent for QUERY."""
    session_id = target.default_session(session)
    view = _recall(target, session_id, query, budget, preset, None, explain=True)
    if as_json:
        data = view.model_dump(mode="json")
        data["items"] = [item_json(r, i) for r, i in enumerate(view.items, 1)]
        data["included_count"] = len(view.items)
        data["excluded_count"] = len(view.excluded) if view.explained else None
        emit_json(data)
        return
    console = stdout()
    excluded = str(len(view.excluded)) if view.explained else "n/a"
    console.print(
        f"[bold]{view.used_tokens}/{view.token_budget} tokens[/] used, "
        f"{len(view.items)} included, {excluded} excluded"
        + (f", preset {view.preset}" if view.preset else "")
    )
    console.print(items_table(escape(query), view.items))
    if view.excluded:
        reasons = Counter(x.reason for x in view.excluded)
        console.print("excluded: " + ", ".join(f"{n} {r}" for r, n in reasons.most_common()))


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
@click.option("--session", default=None, callback=SESSION,
              help="Only this session (default: every session).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@with_target
def status(target: Target, session: str | None, as_json: bool) -> None:
    """Where memory lives, what it holds per session, and the pipeline's queues."""
    with opened(target) as client:
        sessions = [session] if session else client.admin.sessions()
        summaries = {s: session_summary(client, s) for s in sessions}
        pipeline = client.admin.pipeline_status()
        stages = [StageLag(stage=s.stage, stream=s.stream, lag=s.lag, pending=s.pending,
                           dead_letters=s.dead_letters).model_dump(mode="json")
                  for s in pipeline.stages if s.stage in STAGE_NAMES]
    reflect_jobs = pipeline.reflect_jobs["queued"]
    data = {**target.describe(), "sessions": summaries, "stages": stages,
            "reflect_queue": reflect_jobs, "pipeline": pipeline.model_dump(mode="json")}
    if as_json:
        emit_json(data)
        return
    console = stdout()
    where = target.workspace.root if target.workspace else target.store or data["redis_url"]
    console.print(f"[bold]{target.mode}[/] {where}"
                  + (f"  (store {target.store})" if target.store else "")
                  + (f"  through process {data['owner_pid']}, the folder's owner"
                     if data["owner_pid"] else ""))
    if not summaries:
        console.print('no sessions yet: hivemem add "..." to remember something')
    table = Table(title="sessions", expand=True)
    for column in ("session", "turns", "pending", "episodes", "open", "facts by status",
                   "facts by kind", "markers"):
        table.add_column(column)
    for sid, s in summaries.items():
        table.add_row(
            sid, str(s["turns"]), str(s["turns_pending"]), str(s["episodes"]),
            str(s["open_episode_turns"]),
            ", ".join(f"{k} {v}" for k, v in sorted(s["facts_by_status"].items())),
            ", ".join(f"{k} {v}" for k, v in sorted(s["facts_by_kind"].items())),
            ", ".join(f"{k} {v}" for k, v in sorted(s["markers"].items())),
        )
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
    print_workers(console, pipeline)


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
    workers.add_row("reflect", f"{pipeline.reflect_workers} rq worker(s)", "", "")
    console.print(workers)
    jobs = ", ".join(f"{k} {v}" for k, v in pipeline.reflect_jobs.items())
    dead = ", ".join(f"{s.stage} {s.dead_letters}" for s in pipeline.stages)
    console.print(f"reflect jobs: {jobs}\ndead letters: {dead} (hivemem dlq list)")


COMMANDS: tuple[click.Command, ...] = (init, add, recent, search, context, status)
