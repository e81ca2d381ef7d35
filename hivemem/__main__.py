"""`python -m hivemem ...` is the `hivemem` command."""

from hivemem.cli.main import main

main()
