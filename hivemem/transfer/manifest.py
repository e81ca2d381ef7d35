"""Pass 1 of an import: read the whole file and check it before anything is written.

Each record is checked as ingest would check it and against the caller's scope
(`hivemem.transfer.checks`); the structure (records inside their session, vectors of the
header's size, the end record's counts) here. What the writer needs is collected on the way:
each session's namespace, its fact and episode ids, its turns' seqs, from which the session's
counters are derived (`_FileSession.derived_state`).
"""

from __future__ import annotations

import base64
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hivemem.config import IngestSettings
from hivemem.domain.names import SessionName, session_name
from hivemem.domain.scope import DEFAULT_NAMESPACE
from hivemem.errors import ValidationError
from hivemem.transfer import files
from hivemem.transfer.checks import (
    ImportScope,
    Refusals,
    check_episode,
    check_event,
    check_fact,
    check_scope,
    check_state,
    check_turn,
    dead_count,
    namespace_of,
)
from hivemem.transfer.format import (
    AuditRecord,
    EndRecord,
    EpisodeRecord,
    FactRecord,
    Header,
    SessionRecord,
    TurnRecord,
    parse_header,
    parse_record,
)
from hivemem.transfer.stores import decode


@dataclass
class FileSession:
    session_id: str
    line: int
    namespace: str = DEFAULT_NAMESPACE
    dead: int = 0  # turns its dead-letter bitmap marks (a seq with no turn must be one)
    fact_ids: set[str] = field(default_factory=set)
    episodes: dict[str, int] = field(default_factory=dict)  # id -> index
    seqs: set[int] = field(default_factory=set)  # of its turns
    last_line: int = 0  # of its turn with the highest seq

    @property
    def last_seq(self) -> int:
        return max(self.seqs, default=0)

    def derived_state(self, state: dict[str, Any]) -> dict[str, Any]:
        """The state to write: the counters and flags derived from the records in the file,
        never taken from it (a claimed seq of 10**18 would make every loop over the
        session's seqs endless). Every imported turn is stored, so processed; a seq without
        a turn is a dead-lettered one."""
        last = self.last_seq
        gaps = [s for s in range(1, last + 1) if s not in self.seqs]
        reflected = min(int(state.get("reflected") or 0), len(self.episodes))
        boundary = dict(state.get("boundary") or {})
        for name, most in (("next_seq", last + 1), ("closed_count", len(self.episodes))):
            if name in boundary:
                boundary[name] = min(_as_int(boundary[name]), most)
        return {**state, "seq": last, "processed": _bitmap(self.seqs), "dead": _bitmap(gaps),
                "reflected": reflected, "boundary": boundary}


def _as_int(value: object) -> int:
    try:
        return max(0, int(str(value)))
    except ValueError:
        return 0


def _bitmap(seqs: Iterable[int]) -> str:
    """Base64 of a Redis bitmap with bit `seq` set for each seq (SETBIT's bit order)."""
    seqs = list(seqs)
    if not seqs:
        return ""
    bits = bytearray(max(seqs) // 8 + 1)
    for seq in seqs:
        bits[seq >> 3] |= 0x80 >> (seq & 7)
    return base64.b64encode(bytes(bits)).decode("ascii")


@dataclass
class Manifest:
    header: Header
    sessions: dict[SessionName, FileSession]  # by internal name (`hivemem.domain.names`)
    counts: dict[str, int]
    records: int
    without_vectors: int  # turn and fact records that must be embedded again


class _Reader:
    """One pass over the records after the header."""

    def __init__(self, header: Header, settings: IngestSettings, scope: ImportScope) -> None:
        self.header = header
        self.settings = settings
        self.scope = scope
        self.sessions: dict[SessionName, FileSession] = {}
        self.current: FileSession | None = None
        self.counts: Counter[str] = Counter()
        self.refused = Refusals()
        self.end: EndRecord | None = None
        self.records = 1
        self.without_vectors = 0

    def read(self, number: int, text: str) -> None:
        self.records += 1
        if self.end is not None:
            raise ValidationError(f"line {number}", "a record after the end record")
        try:
            record = parse_record(number, text)
        except ValidationError as exc:
            self.refused.add(number, "record", exc)
            return
        if isinstance(record, EndRecord):
            self.end = record
            return
        self.counts[record.type] += 1
        if isinstance(record, SessionRecord):
            self._session(number, record)
            return
        current = self.current
        if current is None:
            raise ValidationError(f"line {number}", f"a {record.type} record before any session")
        owner = _session_of(record)
        if owner != current.session_id:
            raise ValidationError(f"line {number}", f"a {record.type} record of session"
                                  f" {owner!r} inside session {current.session_id!r}")
        try:
            _check(record, current, self.settings, self.scope)
        except ValidationError as exc:
            self.refused.add(number, record.type, exc)
            return
        vector = getattr(record, "vector", None)
        if vector is not None:
            _check_vector(number, vector, self.header)
        elif isinstance(record, TurnRecord | FactRecord):
            self.without_vectors += 1
        if isinstance(record, TurnRecord):
            if record.turn.seq > current.last_seq:
                current.last_line = number
            current.seqs.add(record.turn.seq)
        elif isinstance(record, FactRecord):
            current.fact_ids.add(record.fact.fact_id)
        elif isinstance(record, EpisodeRecord):
            current.episodes[record.episode.episode_id] = record.episode.index

    def _session(self, number: int, record: SessionRecord) -> None:
        current = FileSession(record.session_id, number)
        try:
            current.namespace = check_state(record)
            current.dead = dead_count(record.state)
            check_scope(record, current.namespace, self.scope)
        except ValidationError as exc:
            self.refused.add(number, "session", exc)
        # Keyed by (namespace, id): the same id in two namespaces is two sessions.
        name = session_name(current.namespace, record.session_id)
        if name in self.sessions:
            raise ValidationError(f"line {number}", f"session {record.session_id!r} appears"
                                                    " twice")
        self.current = self.sessions[name] = current

    def finish(self, path: Path) -> None:
        for info in self.sessions.values():
            most = len(info.seqs) + info.dead
            if info.last_seq > most:
                self.refused.add(info.last_line, "turn", ValidationError("seq", (
                    f"session {info.session_id!r} has a turn with seq {info.last_seq}, but"
                    f" only {len(info.seqs)} turns and {info.dead} dead-lettered ones: every"
                    " seq up to the last must be one of them")))
        self.refused.raise_any()
        if self.end is None:
            raise ValidationError("path", f"{path} is truncated: no end record")
        for kind, expected in self.end.counts.items():
            got = self.counts.get(kind, 0)
            if got != expected:
                raise ValidationError("path", f"{path} is truncated or corrupt: {got} {kind}"
                                      f" records, the end record says {expected}")
        if [i.session_id for i in self.sessions.values()] != list(self.header.sessions):
            raise ValidationError("line 1", "the header's sessions do not match the file's")


def validate_file(
    path: Path, dim: int | None = None, *, settings: IngestSettings | None = None,
    scope: ImportScope | None = None,
) -> Manifest:
    """Read every line and check every record as ingest would (`hivemem.transfer.checks`)
    and against `scope` (default: the operator's, any namespace). Structural problems raise
    at once; refused records are collected and the file refused with all of them
    (`ImportRefused`). `dim`: the store's vector size."""
    lines = files.read_lines(path)
    first = next(lines, None)
    if first is None:
        raise ValidationError("line 1", f"{path} is empty: not a hivemem export")
    header = parse_header(first[1])
    if header.vectors and dim is not None and header.dim != dim:
        raise ValidationError("line 1", f"the file's vectors have {header.dim} dimensions,"
                                        f" this store's {dim}")
    reader = _Reader(header, settings or IngestSettings(), scope or ImportScope())
    for number, text in lines:
        reader.read(number, text)
    reader.finish(path)
    return Manifest(header, reader.sessions, dict(reader.counts), reader.records,
                    reader.without_vectors)


def _check(record: Any, session: FileSession, settings: IngestSettings,
           scope: ImportScope) -> None:
    """One record of `session`: ingest's checks, its namespace, the caller's scope."""
    if isinstance(record, TurnRecord):
        record = check_turn(record, settings)
        if record.turn.seq in session.seqs:
            raise ValidationError("seq", f"seq {record.turn.seq} appears twice in session"
                                         f" {session.session_id!r}")
    elif isinstance(record, FactRecord):
        check_fact(record, settings)
    elif isinstance(record, EpisodeRecord):
        check_episode(record)
    elif isinstance(record, AuditRecord):
        check_event(record)
    if not isinstance(record, AuditRecord):
        namespace = namespace_of(record)
        if namespace != session.namespace:
            raise ValidationError("namespace", f"a record of namespace {namespace!r} in a"
                                  f" session of namespace {session.namespace!r}")
    check_scope(record, session.namespace, scope)


def _session_of(record: Any) -> str:
    if isinstance(record, TurnRecord):
        return record.turn.session_id
    if isinstance(record, EpisodeRecord):
        return record.episode.session_id
    if isinstance(record, FactRecord):
        return record.fact.session_id
    assert isinstance(record, AuditRecord)
    return record.event.session_id


def _check_vector(number: int, text: str, header: Header) -> None:
    if not header.vectors:
        raise ValidationError(f"line {number}", "a vector in a file whose header says none")
    try:
        vector = decode(text)
    except ValueError:
        raise ValidationError(f"line {number}", "vector is not valid base64") from None
    if len(vector) != header.dim:
        raise ValidationError(f"line {number}",
                              f"vector has {len(vector)} dimensions, the header {header.dim}")


