"""How every command takes the session: ``--session/-s SESSION`` (default: the workspace's
default session, else ``default``); a command over several sessions takes ``--session``
repeated. An unknown session is `NotFound` (exit 1) for every command that reads one.

Until the next release a command still accepts the session as it used to, as a positional
argument (``hivemem facts s1``), with a note on stderr; it is left out of the help.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from hivemem.cli.output import id_param
from hivemem.errors import NotFound
from hivemem.producer.client import MemoryClient

F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_HELP = "Session id (default: the workspace's default session, else `default`)."


class HiddenArgument(click.Argument):
    """A positional argument kept out of the usage line (an old spelling still accepted)."""

    def get_usage_pieces(self, ctx: click.Context) -> list[str]:
        return []


def session_option(help: str = DEFAULT_HELP) -> Callable[[F], F]:
    """``--session/-s SESSION``, checked while click parses (exit 2 before any store opens)."""
    return click.option("--session", "-s", "session", default=None, metavar="SESSION",
                        callback=id_param("session", "--session", names=True), help=help)


def sessions_option(help: str) -> Callable[[F], F]:
    """``--session/-s SESSION``, repeatable."""
    return click.option("--session", "-s", "sessions", multiple=True, metavar="SESSION",
                        callback=id_param("session", "--session", names=True), help=help)


def legacy_sessions(nargs: int = 1) -> Callable[[F], F]:
    """The old positional session argument(s), hidden; see `pick_session`."""
    return click.argument("legacy", nargs=nargs, required=False, cls=HiddenArgument,
                          callback=id_param("session", "SESSION"))


def deprecated(old: str, new: str) -> None:
    click.echo(f"note: `{old}` is deprecated and goes away in the next release; use `{new}`",
               err=True)


def pick_session(command: str, legacy: str | None, option: str | None) -> str | None:
    """The session given the new way, or the old positional way (with a note)."""
    if legacy is None:
        return option
    if option is not None:
        raise click.UsageError(f"give the session once, as --session (not also as {legacy!r})")
    deprecated(f"hivemem {command} SESSION", f"hivemem {command} --session SESSION")
    return legacy


def pick_sessions(command: str, legacy: Sequence[str], option: Sequence[str]) -> list[str]:
    """`pick_session` for a command over several sessions."""
    if legacy and option:
        raise click.UsageError("give the sessions as --session only")
    if legacy:
        deprecated(f"hivemem {command} SESSION...", f"hivemem {command} --session SESSION ...")
    return list(dict.fromkeys([*legacy, *option]))


def require_session(client: MemoryClient, *session_ids: str) -> None:
    """`NotFound` for a session this store has never seen (what HTTP, MCP and the SDK
    answer), rather than an empty table."""
    known = set(client.admin.sessions())
    for session_id in session_ids:
        if session_id not in known:
            raise NotFound("session_id", f"no session {session_id!r} (`hivemem status` lists"
                           " the sessions)")
