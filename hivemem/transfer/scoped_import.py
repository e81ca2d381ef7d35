"""Import for one namespace (a namespace's API key, `POST /v1/import`): only ``append``, and
only a file whose every session, turn, episode and fact is that namespace's.

``append`` writes only new things (a session id, fact id or episode that is taken anywhere
is renamed, `hivemem.transfer.importer`), so such a file adds to its namespace and can touch
nothing of another one. The other modes act on records that already exist, which may be
another namespace's: they stay operator commands (`hivemem import`, `Admin.import_file`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hivemem.domain.scope import DEFAULT_NAMESPACE
from hivemem.errors import ValidationError
from hivemem.transfer import files
from hivemem.transfer.format import (
    EpisodeRecord,
    FactRecord,
    SessionRecord,
    TurnRecord,
    parse_header,
    parse_record,
)

SCOPED_MODES = ("append",)


def check_mode(mode: object) -> str:
    if mode not in SCOPED_MODES:
        raise ValidationError("mode", "a namespace may only append (replace, skip_existing"
                                      " and overwrite are operator commands: hivemem import)")
    return "append"


def _namespace_of(record: Any) -> str | None:
    if isinstance(record, SessionRecord):
        return str(record.state.get("namespace") or DEFAULT_NAMESPACE)
    if isinstance(record, TurnRecord):
        return record.turn.namespace
    if isinstance(record, FactRecord):
        return record.fact.namespace
    if isinstance(record, EpisodeRecord):
        return record.episode.namespace
    return None  # audit events and the end record belong to their session


def check_file_namespace(path: Path, namespace: str) -> None:
    """`ValidationError` naming the first line whose record is another namespace's (or that
    does not parse: the importer validates the rest)."""
    lines = files.read_lines(path)
    first = next(lines, None)
    if first is None:
        raise ValidationError("line 1", "the file is empty: not a hivemem export")
    parse_header(first[1])
    for number, text in lines:
        owner = _namespace_of(parse_record(number, text))
        if owner is not None and owner != namespace:
            raise ValidationError(f"line {number}", f"a record of namespace {owner!r}: this"
                                  f" key may import only into {namespace!r}")
