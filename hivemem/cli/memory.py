"""The two memory commands: `hivemem ingest TEXT` (write) and `hivemem recall QUERY` (read).

Both take the session as every command does (``--session/-s``, see
`hivemem.cli.session_args`) and run on the target `hivemem.cli.target` resolves. Their old
spellings stay one release as hidden aliases (`add`; `search`, `context`: see `ALIASES`), and
so does the old positional form (``ingest SESSION ROLE TEXT``, ``recall SESSION QUERY``).
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from hivemem.cli.output import (
    cells,
    checked,
    emit_json,
    id_param,
    item_json,
    items_table,
    plain,
    stdout,
)
from hivemem.cli.recall_view import RecallView, recall_view
from hivemem.cli.session_args import deprecated, session_option
from hivemem.cli.target import Target, opened, with_target
from hivemem.domain.ids import check_id
from hivemem.domain.models import BUILTIN_MARKERS
from hivemem.domain.recall.policy import PRESETS
from hivemem.domain.scope import DEFAULT_NAMESPACE
from hivemem.domain.turn import check_content, check_query

KINDS = ("decision", "constraint", "failure", "goal", "preference")
ROLES = ("user", "assistant", "system", "tool")
STDIN = "-"


def _tags(_ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]
          ) -> tuple[str, ...]:
    for tag in value:
        if not tag.strip():
            raise click.BadParameter("must not be empty", param_hint="--tag")
    return value


def _text(target: Target, given: str) -> str:
    """TEXT, or standard input for ``-``; checked before any store is opened (exit 2)."""
    text = sys.stdin.read().rstrip("\n") if given == STDIN else given
    limit = target.settings.ingest.max_content_bytes
    return str(checked("TEXT", lambda v: check_content(v, limit), text))


def _markers(kind: str | None, given: Sequence[str]) -> list[str]:
    markers = list(given)
    if kind in BUILTIN_MARKERS:
        markers.append(kind)
    elif kind:
        markers.append(f"custom:{kind}")
    return list(dict.fromkeys(markers))


# -- ingest ---------------------------------------------------------------------------------


@click.command()
@click.argument("args", nargs=-1, metavar="TEXT")
@session_option()
@click.option("--role", type=click.Choice(ROLES), default=None,
              help="Who speaks  [default: user]")
@click.option("--agent", default=None, callback=id_param("agent", "--agent"),
              help="Agent id of the speaker.")
@click.option("--kind", type=click.Choice(KINDS), default=None,
              help="What the text is: sets the marker (preference: custom:preference).")
@click.option("--tag", "tags", multiple=True, callback=_tags,
              help="A tag (repeatable); kept in metadata.")
@click.option("--marker", "markers", multiple=True,
              help="A marker (repeatable): decision, constraint, failure, goal or custom:NAME.")
@click.option("--namespace", default=None, help="The session's namespace (default: default).")
@click.option("--private", is_flag=True, help="Visible to --agent only (default: shared).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@with_target
def ingest(
    target: Target, args: tuple[str, ...], session: str | None, role: str | None,
    agent: str | None, kind: str | None, tags: tuple[str, ...], markers: tuple[str, ...],
    namespace: str | None, private: bool, as_json: bool,
) -> None:
    """Ingest TEXT as a turn of the session (`-`: read it from standard input).

    In embedded mode the turn is embedded and reflected before the command exits."""
    if len(args) == 3:  # the old form: SESSION ROLE TEXT
        if session is not None or role is not None:
            raise click.UsageError("give the session and role once, as --session and --role")
        deprecated("hivemem ingest SESSION ROLE TEXT",
                   "hivemem ingest TEXT --session SESSION --role ROLE")
        session = str(checked("SESSION", lambda v: check_id("session", v), args[0]))
        role = args[1]
        given = args[2]
    elif len(args) == 1:
        given = args[0]
    else:
        raise click.UsageError("give the TEXT to ingest as one argument (quote it), or - to"
                               " read it from standard input")
    text = _text(target, given)
    session_id = target.default_session(session)
    metadata: dict[str, Any] = {"source": "cli"}
    if tags:
        metadata["tags"] = list(dict.fromkeys(tags))
    if kind:
        metadata["kind"] = kind
    with opened(target) as client:
        turn = client.ingest(session_id, role or "user", text, agent_id=agent,
                             markers=_markers(kind, markers) or None, metadata=metadata,
                             namespace=namespace,
                             visibility="private" if private else "shared")
    if as_json:
        emit_json({
            "session_id": session_id,
            "turn_id": turn.turn_id,
            "seq": turn.seq,
            "duplicate": turn.duplicate,
            "markers": list(turn.markers),
            "metadata": turn.metadata,
            "token_count": turn.token_count,
            **target.describe(),
        })
        return
    line = f"ingested #{turn.seq} into session {session_id}"
    if turn.duplicate:
        line += " (a duplicate turn id: nothing new written)"
    if turn.markers:
        line += f" [{', '.join(turn.markers)}]"
    stdout().print(plain(line))


# -- recall ---------------------------------------------------------------------------------


@click.command()
@click.argument("args", nargs=-1, metavar="QUERY")
@session_option()
@click.option("--budget", type=click.IntRange(min=1), default=None,
              help="Token budget (default from config).")
@click.option("--preset", type=click.Choice(sorted(PRESETS)), default=None,
              help="Recall policy (default: balanced).")
@click.option("--limit", type=click.IntRange(1, 1000), default=None,
              help="At most this many items.")
@click.option("--explain", is_flag=True, help="Also list what was left out, and why.")
@click.option("--related", "related", multiple=True, metavar="SESSION",
              callback=id_param("session", "--related"),
              help="Also search this session (repeatable).")
@click.option("--namespace", default=None, help="The session's namespace (default: default).")
@click.option("--agent", default=None, callback=id_param("agent", "--agent"),
              help="Recall as this agent (adds its private memories).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@with_target
def recall(
    target: Target, args: tuple[str, ...], session: str | None, budget: int | None,
    preset: str | None, limit: int | None, explain: bool, related: tuple[str, ...],
    namespace: str | None, agent: str | None, as_json: bool,
) -> None:
    """The budgeted context recall hands an agent for QUERY: each item with its score and
    why (its source: a turn's seq, or a fact's id for `hivemem audit`)."""
    if len(args) == 2:  # the old form: SESSION QUERY
        if session is not None:
            raise click.UsageError("give the session once, as --session")
        deprecated("hivemem recall SESSION QUERY", "hivemem recall QUERY --session SESSION")
        session = str(checked("SESSION", lambda v: check_id("session", v), args[0]))
        args = args[1:]
    if len(args) != 1:
        raise click.UsageError("give the QUERY as one argument (quote it)")
    query = str(checked("QUERY", check_query, args[0]))
    session_id = target.default_session(session)
    with opened(target, read_only=True) as client:
        # The scoped handle answers an unknown session with NotFound, as HTTP and MCP do.
        handle = client.scoped(namespace=namespace or DEFAULT_NAMESPACE, agent_id=agent)
        view = recall_view(handle, session_id, query, budget, preset=preset, limit=limit,
                           explain=True, related_sessions=related)
    if as_json:
        data = view.model_dump(mode="json")
        data["items"] = [item_json(r, i) for r, i in enumerate(view.items, 1)]
        data["included_count"] = len(view.items)
        data["excluded_count"] = len(view.excluded)
        emit_json(data)
        return
    _print_recall(view, explain)


def _print_recall(view: RecallView, explain: bool) -> None:
    console = stdout()
    line = Text()
    line.append(f"{view.used_tokens}/{view.token_budget} tokens", style="bold")
    line.append(f" used, {len(view.items)} included, {len(view.excluded)} excluded"
                + (f", preset {view.preset}" if view.preset else ""))
    console.print(line)
    console.print(items_table(view.query, view.items))
    if not view.excluded:
        return
    if explain:
        table = Table(title=f"left out ({len(view.excluded)})", expand=True)
        for column in ("reason", "score", "detail", "content"):
            table.add_column(column, ratio=1 if column == "content" else None)
        for x in view.excluded:
            score = "" if x.score is None else f"{x.score:.3f}"
            table.add_row(*cells(x.reason, score, x.detail, (x.content or "")[:120]))
        console.print(table)
    else:
        reasons = Counter(x.reason for x in view.excluded)
        console.print(plain("left out: " + ", ".join(
            f"{n} {r}" for r, n in reasons.most_common()) + " (--explain lists them)"))


def alias(command: click.Command, name: str) -> click.Command:
    """`command` under its old name: hidden from the help, with a note on stderr."""
    return click.Command(
        name, callback=command.callback, params=command.params, help=command.help,
        hidden=True, deprecated=f"Use `hivemem {command.name}`; `{name}` goes away in the"
        " next release",
    )


COMMANDS: tuple[click.Command, ...] = (ingest, recall)
ALIASES: tuple[click.Command, ...] = (
    alias(ingest, "add"), alias(recall, "search"), alias(recall, "context"),
)
