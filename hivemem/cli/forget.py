"""`hivemem forget`: remove a session, or some of its turns and facts, for good (every copy,
then the store's files), and print the receipt (what each store held, by kind)."""

from __future__ import annotations

import click
from rich.table import Table

from hivemem.cli.fact_ids import resolve_fact_id
from hivemem.cli.output import emit_json, id_param, stdout
from hivemem.cli.target import Target, opened, with_target
from hivemem.domain.forget import ForgetReceipt


def _what(session: str, turns: tuple[str, ...], facts: tuple[str, ...]) -> str:
    if not turns and not facts:
        return f"session {session!r} (every turn, fact, episode and trace of it)"
    parts = [f"{len(turns)} turn(s)"] if turns else []
    parts += [f"{len(facts)} fact(s) and their versions"] if facts else []
    return f"{' and '.join(parts)} of session {session!r}"


def print_receipt(receipt: ForgetReceipt) -> None:
    table = Table(title=f"forgotten ({receipt.target}, {receipt.forget_id})", show_lines=False)
    table.add_column("store")
    table.add_column("kind")
    table.add_column("removed", justify="right")
    for store, counts in sorted(receipt.removed.items()):
        for kind, n in sorted(counts.items()):
            table.add_row(store, kind, str(n))
    if receipt.redacted_facts:
        table.add_row("vectors", "facts redacted", str(receipt.redacted_facts))
    console = stdout()
    console.print(table)
    disk = receipt.disk
    console.print(
        f"on disk: redis AOF {'rewritten' if disk.redis_aof_rewritten else 'not rewritten'},"
        f" vectors {disk.vectors_vacuum}"
        f"{'' if disk.completed_at is None else f' (done in {disk.seconds:.2f} s)'}")


@click.command()
@click.option("--session", "-s", "session", required=True, metavar="SESSION",
              callback=id_param("session", "--session"), help="The session to forget from.")
@click.option("--turn", "turns", multiple=True, metavar="ID",
              callback=id_param("turn_id", "--turn"), help="Forget this turn (repeatable).")
@click.option("--fact", "facts", multiple=True, metavar="ID",
              callback=id_param("fact_id", "--fact"),
              help="Forget this fact and its versions (repeatable).")
@click.option("--namespace", "-n", default=None, callback=id_param("namespace", "--namespace"),
              help="Act as this namespace's key would (default: every namespace, operator).")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--json", "as_json", is_flag=True, help="Print the receipt as JSON.")
@with_target
def forget(target: Target, session: str, turns: tuple[str, ...], facts: tuple[str, ...],
           namespace: str | None, yes: bool, as_json: bool) -> None:
    """Forget a session, or some of its turns and facts, for good: every copy (streams,
    dead letters, window, episodes, jobs, vectors, facts derived only from them, traces,
    audit reasons) and, within a bounded time, the bytes in the store's files."""
    if not yes:
        click.confirm(f"Forget {_what(session, turns, facts)}? This cannot be undone",
                      abort=True, err=True)
    with opened(target) as client:
        turn_ids = list(turns) or None
        fact_ids = [resolve_fact_id(client, f, "--fact") for f in facts] or None
        if namespace is None:
            receipt = client.admin.forget(session, turn_ids=turn_ids, fact_ids=fact_ids)
        else:
            receipt = client.scoped(namespace=namespace).forget(
                session, turn_ids=turn_ids, fact_ids=fact_ids)
    if as_json:
        emit_json(receipt.model_dump(mode="json"))
    else:
        print_receipt(receipt)


COMMANDS: tuple[click.Command, ...] = (forget,)
