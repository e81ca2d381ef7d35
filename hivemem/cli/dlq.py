"""`hivemem dlq replay`: put dead letters back on their stream once the cause is fixed."""

from __future__ import annotations

import json

import click


@click.command("replay")
@click.argument("entry_ids", nargs=-1)
@click.option("--stage", type=click.Choice(["embed", "boundary"]), default="embed",
              show_default=True, help="Whose dead letters.")
@click.option("--count", default=1000, show_default=True, help="At most this many.")
@click.pass_context
def dlq_replay(ctx: click.Context, entry_ids: tuple[str, ...], stage: str, count: int) -> None:
    """Re-enqueue dead letters (all, or only these original entry ids)."""
    from hivemem.cli.main import _client

    with _client(ctx) as client:
        replayed = client.replay_dead_letters(
            list(entry_ids) if entry_ids else None, stage=stage, count=count
        )
    click.echo(json.dumps({"stage": stage, "replayed": replayed}))
