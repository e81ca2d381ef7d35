from hivemem.cli.main import main

__all__ = ["main"]
