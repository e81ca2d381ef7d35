"""The `hivemem` command: `hivemem.cli.main` builds it, one module per command group."""
