"""`python -m hivemem ...` is the `hivemem` command."""

from hivemem.cli import main

main()
