"""`hivemem demo`: the scripted multi-agent conversation end to end on the embedded default.

Its target is its own folder (`--path`, or a temporary one), never the workspace: the demo
must not write a made-up project into a user's memory.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import click

import hivemem.cli.demo_script as script
from hivemem.cli.output import history_table, items_table, stderr, stdout
from hivemem.cli.target import Target
from hivemem.config import Settings
from hivemem.logs import configure_logging


@click.command()
@click.option("--path", type=click.Path(file_okay=False), default=None,
              help="Keep the demo's memory in this folder (default: a temporary one).")
@click.option("--budget", default=160, show_default=True, help="Token budget per question.")
@click.pass_context
def demo(ctx: click.Context, path: str | None, budget: int) -> None:
    """Run an end-to-end scenario on the embedded default and print what recall returns."""
    settings: Settings = ctx.obj["settings"]
    if ctx.obj.get("log_level") is None:
        # The demo's output is its tables: pipeline events only with --log-level.
        configure_logging("warning", settings.log_json)
    folder = Path(path) if path else Path(tempfile.mkdtemp(prefix="hivemem-demo-"))
    console, out = stderr(), stdout()
    target = Target(mode="local", settings=settings, store=folder)
    with console.status("Loading the embedding model and opening the embedded store..."):
        started = time.perf_counter()
        client = target.open()
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
        out.print(history_table(client.facts(session, include_history=True)))
        out.print()
        for question in script.QUESTIONS:
            items = client.recall(session, question, token_budget=budget)
            used = sum(i.token_count for i in items)
            out.print(items_table(f"{question}  [{used}/{budget} tokens]", items, speakers=True))
            out.print()
    finally:
        client.close()
