"""`hivemem repartition N`: change a deployment's partition count (an operator command)."""

from __future__ import annotations

import dataclasses
import json

import click

from hivemem.cli.output import progress_bar
from hivemem.cli.target import Target, with_target
from hivemem.errors import HivememError
from hivemem.runtime.wiring import repartition_move
from hivemem.store.redis_connect import connect
from hivemem.store.repartition import written_count


@click.command()
@click.argument("partitions", type=click.IntRange(1, 4096))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@with_target
def repartition(target: Target, partitions: int, as_json: bool) -> None:
    """Move every session's keys to PARTITIONS partitions (workers stopped, pipeline drained).

    The count the data was written with is read from Redis. Safe to run again after a
    crash: it finishes the move. Afterwards start everything with
    HIVEMEM_REDIS__PARTITIONS=PARTITIONS."""
    if target.embedded:
        raise click.ClickException(
            "an embedded store keeps the partition count it was made with (its workers are "
            "threads of one process); repartition a deployment with --redis-url")
    settings = target.settings.redis
    try:
        client = connect(settings)
    except HivememError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        prefix = target.settings.redis.key_prefix
        old_count = written_count(client, prefix, settings.partitions)
        move = repartition_move(client, prefix, old_count, partitions,
                                ttl_ms=target.settings.worker.claim_idle_ms)
        with progress_bar(f"sessions {old_count} -> {partitions} partitions", None,
                          as_json) as advance:
            summary = move.run(advance)
    except HivememError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        client.close()
    if as_json:
        click.echo(json.dumps(dataclasses.asdict(summary)))
        return
    if summary.old == summary.new and not summary.resumed:
        click.echo(f"already {summary.new} partitions: nothing to move")
        return
    click.echo(f"{summary.sessions} session(s), {summary.keys_moved} key(s) moved from "
               f"{summary.old} to {summary.new} partitions"
               f"{' (resumed)' if summary.resumed else ''}; start the workers with "
               f"HIVEMEM_REDIS__PARTITIONS={summary.new}")


COMMANDS: tuple[click.Command, ...] = (repartition,)
