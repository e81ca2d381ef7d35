"""Export files: plain JSON Lines, or gzip-compressed when the name ends in ``.gz``."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from hivemem.errors import ValidationError


def open_write(path: Path) -> IO[str]:
    """Write to a temporary sibling; `commit` renames it into place once complete."""
    tmp = path.with_name(path.name + ".part")
    if path.suffix == ".gz":
        return gzip.open(tmp, "wt", encoding="utf-8", newline="\n", compresslevel=5)
    return open(tmp, "w", encoding="utf-8", newline="\n")


def commit(path: Path) -> None:
    path.with_name(path.name + ".part").replace(path)


def abandon(path: Path) -> None:
    path.with_name(path.name + ".part").unlink(missing_ok=True)


def read_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number from 1, text without the newline); blank lines are skipped."""
    if not path.is_file():
        raise ValidationError("path", f"{path}: no such file")
    try:
        with _open_read(path) as fh:
            for number, line in enumerate(fh, 1):
                text = line.rstrip("\n")
                if text.strip():
                    yield number, text
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise ValidationError("path", f"{path}: cannot read ({exc})") from None


def _open_read(path: Path) -> IO[str]:
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")
