"""Commands defined outside `hivemem.cli.main`, added onto its group by `register`."""

from __future__ import annotations

import click


def register(group: click.Group) -> None:
    from hivemem.cli.chat import chat
    from hivemem.cli.eval import eval_cmd
    from hivemem.cli.workspace import COMMANDS

    for command in COMMANDS:
        group.add_command(command)
    group.add_command(chat)
    group.add_command(eval_cmd)
    from hivemem.cli.dlq import dlq_replay

    dlq_group = group.commands.get("dlq")
    if isinstance(dlq_group, click.Group):
        dlq_group.add_command(dlq_replay)
