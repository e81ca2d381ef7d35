"""`hivemem demo`: the scripted multi-agent conversation end to end on the embedded default.

Its target is its own folder (`--path`, or a temporary one removed at the end unless
`--keep`), never the workspace: the demo must not write a made-up project into a user's
memory. It does use the workspace's embedding settings (model, cache folder, offline), as
every other command does: `hivemem.cli.target.local_settings`.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import click

import hivemem.cli.demo_script as script
from hivemem.cli.output import history_table, items_table, stderr, stdout
from hivemem.cli.target import Target, local_settings
from hivemem.config import Settings
from hivemem.errors import HivememError
from hivemem.logs import configure_logging


@click.command()
@click.option("--path", type=click.Path(file_okay=False), default=None,
              help="Keep the demo's memory in this folder (default: a temporary one).")
@click.option("--keep", is_flag=True, help="Keep the temporary folder (its path is printed).")
@click.option("--budget", default=160, show_default=True, help="Token budget per question.")
@click.pass_context
def demo(ctx: click.Context, path: str | None, keep: bool, budget: int) -> None:
    """Run an end-to-end scenario on the embedded default and print what recall returns."""
    settings: Settings = local_settings(ctx.obj["settings"])
    if ctx.obj.get("log_level") is None:
        # The demo's output is its tables: pipeline events only with --log-level.
        configure_logging("warning", settings.log_json)
    folder = Path(path) if path else Path(tempfile.mkdtemp(prefix="hivemem-demo-"))
    try:
        _run(settings, folder, budget)
    finally:
        if path is None and not keep:
            shutil.rmtree(folder, ignore_errors=True)
        else:
            # Plain text, one line: a terminal-width wrap would split the path.
            click.echo(f"the demo's memory stays in {folder} (hivemem --local {folder}"
                       " status)", err=True)


def _run(settings: Settings, folder: Path, budget: int) -> None:
    console, out = stderr(), stdout()
    target = Target(mode="local", settings=settings, store=folder)
    with console.status("Loading the embedding model and opening the embedded store..."):
        started = time.perf_counter()
        try:
            client = target.open()
        except HivememError as exc:
            raise click.ClickException(str(exc)) from None
    opened_s = time.perf_counter() - started
    click.echo(f"embedded store at {folder} (opened in {opened_s:.1f}s)", err=True)
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
        out.print(history_table(client.facts(session, include_history=True)))
        out.print()
        for question in script.QUESTIONS:
            items = client.recall(session, question, token_budget=budget)
            used = sum(i.token_count for i in items)
            out.print(items_table(f"{question}  [{used}/{budget} tokens]", items,
                                  speakers=True))
            out.print()
    finally:
        client.close()
