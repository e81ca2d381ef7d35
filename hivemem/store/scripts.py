"""The store's Lua scripts, kept as files in `hivemem/store/lua/` (package data).

Each file opens with a comment block saying what the script does, its KEYS, ARGV and reply;
the loader drops that block, so the server gets the code only (what it hashes for EVALSHA,
and what an EVAL sends on every call). A script made of several files (a shared function
first, then the script that calls it) is assembled in the order given. Each file is read
once per process.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files


@cache
def lua(*names: str) -> str:
    """The script made of these files (names without ``.lua``), in this order."""
    return "".join(_code(name) for name in names)


@cache
def _code(name: str) -> str:
    text = (files("hivemem.store") / "lua" / f"{name}.lua").read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    start = 0
    while start < len(lines) and lines[start].startswith("--"):
        start += 1
    return "".join(lines[start:])
