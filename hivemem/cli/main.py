"""The `hivemem` command line: the root group, and every command group added in one place.

Each module under `hivemem.cli` defines the commands of one group and imports nothing from
here; memory commands resolve where to run through `hivemem.cli.target` and take the session
as `hivemem.cli.session_args` says. One word per concept: `ingest` writes, `recall` reads;
the old names (`add`, `search`, `context`) are hidden aliases for one release.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click
from rich.text import Text

from hivemem import __version__
from hivemem.cli import (
    chat,
    demo,
    forget,
    lifecycle,
    memory,
    partitions,
    pipeline,
    service,
    workspace,
)
from hivemem.cli import eval as evaluation
from hivemem.cli import ui as explorer
from hivemem.cli.output import stderr
from hivemem.config import Settings
from hivemem.errors import HivememError, NotFound
from hivemem.logs import configure_logging


@click.group()
@click.version_option(__version__, "--version", "-V", prog_name="hivemem",
                      message="%(prog)s %(version)s")
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


COMMANDS: tuple[click.Command, ...] = (
    *memory.COMMANDS,       # ingest, recall
    *workspace.COMMANDS,    # init, recent, status
    *pipeline.COMMANDS,     # stats, facts, episodes, traces, close-episode, reflect,
                            # rebuild-state, dlq
    *lifecycle.COMMANDS,    # compact, audit, session, timeline, export, import, backup, restore
    *forget.COMMANDS,       # forget
    *service.COMMANDS,      # serve, mcp, apikey, worker
    *partitions.COMMANDS,   # repartition
    chat.chat,
    evaluation.eval_cmd,
    demo.demo,
    *explorer.COMMANDS,     # ui
    *memory.ALIASES,        # add, search, context (hidden, one release)
)
for _command in COMMANDS:
    cli.add_command(_command)


def main(argv: Sequence[str] | None = None) -> None:
    try:
        cli.main(args=list(argv) if argv is not None else None, standalone_mode=False)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except HivememError as exc:
        stderr().print(Text.assemble(("error: ", "red"), str(exc)))
        # An unknown session or fact is an error like any other (exit 1); other bad input
        # is a usage error (2).
        sys.exit(2 if isinstance(exc, ValueError) and not isinstance(exc, NotFound) else 1)
