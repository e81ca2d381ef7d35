"""What every command group prints with: the consoles, JSON output, argument checks, tables.

User text (turn and fact content, subjects, reasons, titles, queries, session ids) is
printed verbatim: every table cell goes through `cells` and every title with user text in it
through `plain`, so ``a[i] = b[i] * 2`` keeps its brackets and a stored ``[/]`` is text, not
a markup tag that would crash the command. The consoles never turn ``:x:`` into an emoji.
Fact ids are printed in their short form (`hivemem.cli.fact_ids`), which every command that
takes a fact id accepts.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from hivemem.cli.fact_ids import short
from hivemem.domain.fact import Fact, FactStatus
from hivemem.domain.ids import check_id
from hivemem.domain.models import ContextItem
from hivemem.domain.names import check_session_name
from hivemem.errors import ValidationError


def stdout() -> Console:
    # Piped output gets a wide table instead of rich's 80-column default. No emoji codes:
    # a session id or a query may well contain ":x:".
    return Console(width=None if sys.stdout.isatty() else 160, highlight=False, emoji=False)


def stderr() -> Console:
    return Console(stderr=True, highlight=False, emoji=False)


def plain(text: object) -> Text:
    """`text` as it is: for titles and lines that hold user text (never markup)."""
    return Text(str(text))


class Advance(Protocol):
    """Done just now, and the total when it became known (None: unchanged)."""

    def __call__(self, n: int, total: int | None = None, /) -> None: ...


def _ignore(n: int, total: int | None = None, /) -> None:
    pass


@contextmanager
def progress_bar(label: str, total: int | None, quiet: bool) -> Iterator[Advance]:
    """A rich progress bar on stderr (none when `quiet`, e.g. with --json); yields
    ``advance(n, total=None)``, which may also set a total learnt on the way."""
    if quiet:
        yield _ignore
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=stderr(), transient=True) as bar:
        task = bar.add_task(label, total=total)

        def advance(n: int, new_total: int | None = None, /) -> None:
            bar.update(task, advance=n, total=new_total)  # None leaves the total as it is

        yield advance


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, default=str))


def checked(field: str, check: Callable[[Any], Any], value: Any) -> Any:
    """Run a validator on a CLI argument; a failure is a usage error (exit 2)."""
    try:
        return check(value)
    except ValidationError as exc:
        raise click.BadParameter(exc.message, param_hint=field) from None


def id_param(kind: str, hint: str, *, names: bool = False,
             ) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """A click callback checking an id argument (or each of several) as `check_id(kind)`;
    `names`: a session's internal name is accepted too (``team-a/s1``: what the operator's
    listings print, `check_session_name`).

    Callbacks run while click parses, so bad input exits with 2 before the target is
    resolved or any store opened."""
    check = ((lambda v: str(check_session_name(kind, v))) if names
             else (lambda v: check_id(kind, v)))

    def callback(_ctx: click.Context, _param: click.Parameter, value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, tuple):
            return tuple(checked(hint, check, v) for v in value)
        return checked(hint, check, value)

    return callback


def cells(*values: object) -> list[Text]:
    """Table cells that print as they are (`Text`, never parsed as markup)."""
    return [v if isinstance(v, Text) else Text("" if v is None else str(v)) for v in values]


def _source(item: ContextItem) -> str:
    """Where an item comes from: a turn's seq, a fact's short id (what `audit` takes)."""
    if item.source_type == "fact" and item.source_id:
        return f"fact {short(item.source_id)}"
    return item.source_type + (f" #{item.seq}" if item.seq else "")


def items_table(title: str | Text, items: Sequence[ContextItem], *,
                speakers: bool = False) -> Table:
    """A recalled context: rank, score and why, then where each item comes from (`hivemem
    recall`, chat: a turn's seq, a fact's id) or, with `speakers`, who said it (the demo).
    A `str` title is user text, printed as it is."""
    table = Table(title=plain(title) if isinstance(title, str) else title, expand=True)
    table.add_column("#", justify="right", width=3)
    table.add_column("score", justify="right", width=6)
    table.add_column("why", width=26 if speakers else 28)
    if speakers:
        table.add_column("who", width=10)
        table.add_column("seq", justify="right", width=4)
    else:
        table.add_column("source", width=17)
        table.add_column("tokens", justify="right", width=6)
    table.add_column("content", ratio=1)
    for rank, item in enumerate(items, 1):
        if speakers:
            where = str(item.agent_id or item.role or "")
            size = str(item.seq) if item.seq else item.source_type
        else:
            where = _source(item)
            size = str(item.token_count)
        table.add_row(*cells(rank, f"{item.score:.3f}", ", ".join(item.components.reasons()),
                             where, size, item.content))
    return table


def item_json(rank: int, item: ContextItem) -> dict[str, Any]:
    data: dict[str, Any] = item.model_dump(mode="json")
    return {"rank": rank, "reasons": item.components.reasons(), **data}


def facts_table(title: str, facts: Sequence[Fact]) -> Table:
    """Facts with their short ids (`hivemem audit ID`); `title` is printed as it is."""
    table = Table(title=plain(title), expand=True)
    for column in ("id", "status", "kind", "subject", "since", "content"):
        table.add_column(column, ratio=4 if column == "content" else None,
                         no_wrap=column == "id")
    for fact in facts:
        style = "dim" if fact.status is not FactStatus.ACTIVE else ""
        table.add_row(*cells(short(fact.fact_id), fact.status.value, fact.kind.value,
                             fact.subject,
                             f"{fact.valid_from:%Y-%m-%d %H:%M}", fact.content), style=style)
    return table


def history_table(facts: Sequence[Fact]) -> Table:
    """Every version of the facts, by subject, with its validity (`hivemem facts`, the demo)."""
    table = Table(title="Facts reflected from the episodes (with history)", expand=True)
    for column in ("id", "status", "kind", "subject", "valid", "content"):
        table.add_column(column, ratio=4 if column == "content" else None,
                         no_wrap=column == "id")
    for fact in sorted(facts, key=lambda f: (f.subject, f.valid_from)):
        until = fact.valid_to.strftime("%H:%M") if fact.valid_to else "now"
        style = "dim strike" if fact.status is FactStatus.SUPERSEDED else ""
        table.add_row(*cells(short(fact.fact_id), fact.status.value, fact.kind.value,
                             fact.subject, f"{fact.valid_from:%H:%M}-{until}", fact.content),
                      style=style)
    return table
