"""The `hivemem` command line."""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from hivemem.config import Settings
from hivemem.domain.fact import Fact
from hivemem.domain.models import ContextItem
from hivemem.domain.recall.policy import PRESETS
from hivemem.errors import HivememError
from hivemem.logs import configure_logging
from hivemem.producer.client import MemoryClient

console = Console(stderr=True)
# Piped output gets a wide table instead of rich's 80-column default.
out = Console(width=None if sys.stdout.isatty() else 160)


def _settings(ctx: click.Context) -> Settings:
    settings: Settings = ctx.obj["settings"]
    return settings


def _client(ctx: click.Context) -> MemoryClient:
    local: str | None = ctx.obj.get("local")
    settings = _settings(ctx)
    if local:
        return MemoryClient.local(local, settings)
    return MemoryClient(settings)


@click.group()
@click.option(
    "--local",
    type=click.Path(file_okay=False),
    default=None,
    help="Use the embedded mode on this folder instead of Redis/Qdrant servers.",
)
@click.option("--log-level", default=None, help="debug, info, warning or error.")
@click.pass_context
def cli(ctx: click.Context, local: str | None, log_level: str | None) -> None:
    """hivemem: shared, distributed memory for AI agents."""
    try:
        settings = Settings()
    except Exception as exc:
        raise click.ClickException(f"bad configuration: {exc}") from None
    level = log_level or settings.log_level
    configure_logging(level, settings.log_json)
    ctx.obj = {"settings": settings, "local": local, "log_level": log_level}


def _items_table(title: str, items: Sequence[ContextItem]) -> Table:
    table = Table(title=title, show_lines=False, expand=True)
    table.add_column("#", justify="right", width=3)
    table.add_column("score", justify="right", width=6)
    table.add_column("why", width=26)
    table.add_column("who", width=10)
    table.add_column("seq", justify="right", width=4)
    table.add_column("content", ratio=1)
    for rank, item in enumerate(items, 1):
        who = item.agent_id or item.role or ""
        table.add_row(
            str(rank),
            f"{item.score:.3f}",
            ", ".join(item.components.reasons()),
            str(who),
            str(item.seq) if item.seq else item.source_type,
            item.content,
        )
    return table


@cli.command()
@click.option("--path", type=click.Path(file_okay=False), default=None,
              help="Keep the demo's memory in this folder (default: a temporary one).")
@click.option("--budget", default=160, show_default=True, help="Token budget per question.")
@click.pass_context
def demo(ctx: click.Context, path: str | None, budget: int) -> None:
    """Run an end-to-end scenario on the embedded default and print what recall returns."""
    from hivemem.cli import demo as script

    settings = _settings(ctx)
    if ctx.obj.get("log_level") is None:
        # The demo's output is its tables: pipeline events only with --log-level.
        configure_logging("warning", settings.log_json)
    folder = Path(path) if path else Path(tempfile.mkdtemp(prefix="hivemem-demo-"))
    with console.status("Loading the embedding model and opening the embedded store..."):
        started = time.perf_counter()
        client = MemoryClient.local(folder, settings)
    opened_s = time.perf_counter() - started
    console.print(f"[dim]embedded store at {folder} (opened in {opened_s:.1f}s)")
    try:
        session = script.SESSION
        with console.status("Ingesting the multi-agent conversation...") as status:
            for i, (agent, role, content, markers) in enumerate(script.SCRIPT):
                client.ingest(
                    session, role, content, agent_id=agent, markers=markers,
                    timestamp=script.timestamp(i), turn_id=f"demo-{i}",
                )
                status.update(f"Ingesting turns: {i + 1}/{len(script.SCRIPT)}")
            client.close_session(session)
            status.update("Waiting for the embed and boundary workers...")
            stats = client.wait_until_processed(session, timeout=120, stage="boundary")
            status.update(f"Reflecting {stats.episodes} episodes into facts...")
            client.wait_until_reflected(session, timeout=120)
        console.print(
            f"[green]{stats.turns_processed} turns embedded[/] across"
            f" {len({a for a, *_ in script.SCRIPT})} speakers, {stats.episodes} episodes,"
            f" markers {stats.markers}; asking {len(script.QUESTIONS)}"
            f" questions with a {budget}-token budget each.\n"
        )
        out.print(_facts_table(client.facts(session, include_history=True)))
        out.print()
        for question in script.QUESTIONS:
            items = client.recall(session, question, token_budget=budget)
            used = sum(i.token_count for i in items)
            out.print(_items_table(f"{question}  [{used}/{budget} tokens]", items))
            out.print()
    finally:
        client.close()


def _facts_table(facts: Sequence[Fact]) -> Table:
    table = Table(title="Facts reflected from the episodes (with history)", expand=True)
    for column in ("status", "kind", "subject", "valid", "content"):
        table.add_column(column, ratio=4 if column == "content" else None)
    for fact in sorted(facts, key=lambda f: (f.subject, f.valid_from)):
        until = fact.valid_to.strftime("%H:%M") if fact.valid_to else "now"
        style = "dim strike" if fact.status.value == "superseded" else ""
        table.add_row(fact.status.value, fact.kind.value, fact.subject,
                      f"{fact.valid_from:%H:%M}-{until}", fact.content, style=style)
    return table


@cli.command()
@click.argument("session_id")
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
@click.pass_context
def recall(
    ctx: click.Context, session_id: str, query: str, budget: int | None, limit: int | None,
    preset: str | None, explain: bool, related: tuple[str, ...], namespace: str | None,
    agent: str | None, as_json: bool,
) -> None:
    """Print the recalled context for QUERY in SESSION_ID."""
    with _client(ctx) as client:
        result = client.recall(session_id, query, token_budget=budget, limit=limit,
                               preset=preset, explain=explain, related_sessions=related,
                               agent_id=agent, namespace=namespace)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
        return
    out.print(_items_table(
        f"{query}  ({result.preset}: {result.used_tokens}/{result.token_budget} tokens)",
        result,
    ))
    if explain and result.excluded:
        table = Table(title=f"left out ({len(result.excluded)})", expand=True)
        for column in ("reason", "score", "detail", "content"):
            table.add_column(column, ratio=1 if column == "content" else None)
        for x in result.excluded:
            table.add_row(x.reason, f"{x.score:.3f}", x.detail, x.content[:120])
        out.print(table)


@cli.command()
@click.argument("session_id")
@click.argument("role")
@click.argument("content")
@click.option("--agent", default=None)
@click.option("--marker", "markers", multiple=True)
@click.option("--namespace", default=None, help="The session's namespace (default: default).")
@click.option("--private", is_flag=True, help="Visible to --agent only (default: shared).")
@click.pass_context
def ingest(
    ctx: click.Context, session_id: str, role: str, content: str, agent: str | None,
    markers: tuple[str, ...], namespace: str | None, private: bool,
) -> None:
    """Enqueue one turn."""
    with _client(ctx) as client:
        turn = client.ingest(session_id, role, content, agent_id=agent, markers=markers or None,
                             namespace=namespace, visibility="private" if private else "shared")
    click.echo(json.dumps({"turn_id": turn.turn_id, "seq": turn.seq, "duplicate": turn.duplicate}))


@cli.command()
@click.argument("session_id")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def stats(ctx: click.Context, session_id: str, as_json: bool) -> None:
    """Show a session's progress through the pipeline."""
    with _client(ctx) as client:
        result = client.get_session_stats(session_id)
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
        table.add_row(key, str(value))
    out.print(table)
    backlog = Table(title="pipeline (all sessions)")
    for column in ("stage", "stream", "lag", "pending", "dead_letters"):
        backlog.add_column(column)
    for stage in stages:
        backlog.add_row(*(str(stage[c]) for c in ("stage", "stream", "lag", "pending",
                                                   "dead_letters")))
    out.print(backlog)


@cli.command("close-episode")
@click.argument("session_id")
@click.option("--session-end", is_flag=True, help="The session is over (close_session).")
@click.pass_context
def close_episode_cmd(ctx: click.Context, session_id: str, session_end: bool) -> None:
    """Close SESSION_ID's open episode after the turns ingested so far."""
    with _client(ctx) as client:
        seq = client.close_session(session_id) if session_end else client.close_episode(session_id)
    click.echo(json.dumps({"session_id": session_id, "seq": seq}))


@cli.command("rebuild-state")
@click.option("--session", "session_id", default=None, help="Only this session.")
@click.pass_context
def rebuild_state_cmd(ctx: click.Context, session_id: str | None) -> None:
    """Rebuild Redis session state from Qdrant (after a Redis loss)."""
    from hivemem.runtime.wiring import Wiring
    from hivemem.store.rebuild import rebuild_state

    with Wiring(_settings(ctx)) as wiring, console.status("Scrolling Qdrant..."):
        count = rebuild_state(wiring.state, wiring.vectors, session_id)
    click.echo(f"rebuilt {count} session(s)")


@cli.command()
@click.argument("session_id")
@click.option("--history", is_flag=True, help="Every version, with its validity.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def facts(ctx: click.Context, session_id: str, history: bool, as_json: bool) -> None:
    """The facts reflected for SESSION_ID."""
    with _client(ctx) as client:
        found = client.facts(session_id, include_history=history)
    if as_json:
        click.echo(json.dumps([f.model_dump(mode="json") for f in found], indent=2))
    else:
        out.print(_facts_table(found))


@cli.command()
@click.argument("session_id")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def episodes(ctx: click.Context, session_id: str, as_json: bool) -> None:
    """The closed episodes of SESSION_ID."""
    with _client(ctx) as client:
        found = client.episodes(session_id)
    rows = [e.model_dump(mode="json", exclude={"centroid"}) for e in found]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    table = Table(title=f"episodes of {session_id}")
    for column in ("index", "seqs", "turns", "reason", "markers", "agents"):
        table.add_column(column)
    for e in found:
        table.add_row(str(e.index), f"{e.seq_start}-{e.seq_end}", str(e.turn_count),
                      e.close_reason, ", ".join(e.markers), ", ".join(e.agent_ids))
    out.print(table)


@cli.command()
@click.option("--replay", "session_id", required=True,
              help="Reflect this session's episodes again (after failures).")
@click.option("--episode", "episode_id", default=None, help="Only this episode.")
@click.pass_context
def reflect(ctx: click.Context, session_id: str, episode_id: str | None) -> None:
    """Enqueue reflection jobs again; a reflect worker runs them."""
    with _client(ctx) as client:
        jobs = client.replay_reflection(session_id, episode_id)
    click.echo(json.dumps({"session_id": session_id, "jobs": jobs}))


@cli.command()
@click.option("--session", "session_id", default=None)
@click.option("--count", default=10, show_default=True)
@click.pass_context
def traces(ctx: click.Context, session_id: str | None, count: int) -> None:
    """The newest reflection traces (secrets redacted), as JSON lines."""
    with _client(ctx) as client:
        for trace in client.traces(count, session_id):
            click.echo(json.dumps(trace, default=str))


@cli.group()
def dlq() -> None:
    """Dead-lettered entries."""


@dlq.command("list")
@click.option("--count", default=20, show_default=True)
@click.pass_context
def dlq_list(ctx: click.Context, count: int) -> None:
    with _client(ctx) as client:
        letters = client.dead_letters(count)
    for letter in letters:
        click.echo(json.dumps(letter.model_dump(mode="json")))
    if not letters:
        console.print("no dead letters")


@cli.command()
@click.argument("kind", type=click.Choice(["embed", "boundary", "reflect"]))
@click.option("--burst", is_flag=True, help="Exit once there is nothing left to do.")
@click.option("--name", default=None, help="Consumer name (default: host-pid-random).")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None,
              help="Serve Prometheus metrics on this port.")
@click.pass_context
def worker(
    ctx: click.Context, kind: str, burst: bool, name: str | None, metrics_port: int | None
) -> None:
    """Run a pipeline worker (scale by starting more of them)."""
    from hivemem.runtime.runner import run_worker

    if ctx.obj.get("local"):
        raise click.UsageError(
            "workers run against Redis + Qdrant servers; embedded mode runs its own threads"
        )
    report = run_worker(kind, _settings(ctx), burst=burst, name=name, metrics_port=metrics_port)
    console.print(
        f"handled={report.handled} dead_lettered={report.dead_lettered}"
        f" reclaimed={report.reclaimed}"
    )


from hivemem.cli.extras import register as _register_extras  # noqa: E402

_register_extras(cli)  # workspace commands, chat, eval
from hivemem.cli.lifecycle import register as _register_lifecycle  # noqa: E402

_register_lifecycle(cli)  # compact, audit, session, timeline, export/import/backup/restore
from hivemem.cli.service import register as _register_service  # noqa: E402

_register_service(cli)  # serve, mcp, apikey


def main(argv: Sequence[str] | None = None) -> None:
    try:
        cli.main(args=list(argv) if argv is not None else None, standalone_mode=False)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except HivememError as exc:
        console.print(f"[red]error:[/] {exc}")
        sys.exit(2)
