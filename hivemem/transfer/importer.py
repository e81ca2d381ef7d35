"""Import: validate a whole export file first, then write it, streaming, in one of four modes.

- ``append``: everything is added. A session whose id is taken (or whose facts or episodes
  exist) is renamed ``<id>.2``, ``<id>.3``...; then its fact ids are remapped and every
  reference follows (superseded_by, supersedes, conflicts_with, audit events), and its episode
  ids are those of the new session.
- ``replace``: each session in the file becomes exactly the file's version: what the store had
  for it (turns, episodes, facts, audit log, state) is removed first.
- ``skip_existing``: records whose id the store has are left as they are; the rest is added.
- ``overwrite``: records in the file overwrite the store's records with the same id; the
  store's other records stay.

A session's Redis state (counters, the boundary stage's state) is written when the session is
new to the store (or replaced); its metadata also under ``overwrite``. Nothing is written until
the whole file has been read and found valid: an unknown format or version, a corrupt line, a
record outside its session, a vector of the wrong size or a truncated file (no end record,
or counts that do not match) is a `ValidationError` naming the line.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import structlog
from pydantic import BaseModel, ConfigDict

from hivemem.config import IngestSettings
from hivemem.domain.audit import AuditEvent
from hivemem.domain.episode import Episode, episode_id
from hivemem.domain.fact import Fact
from hivemem.domain.models import Turn
from hivemem.domain.names import SessionName, session_name, split_session_name
from hivemem.errors import ValidationError
from hivemem.providers.lexical import LexicalEncoder, SparseVector
from hivemem.store.vectors.base import FACTS, TURNS, Vector, session_where, turn_point_id
from hivemem.transfer import files
from hivemem.transfer.checks import (
    ImportScope,
    check_state,
    check_turn,
)
from hivemem.transfer.format import (
    AuditRecord,
    EndRecord,
    EpisodeRecord,
    FactRecord,
    SessionRecord,
    TurnRecord,
    parse_record,
)
from hivemem.transfer.manifest import FileSession, Manifest, validate_file
from hivemem.transfer.stores import Progress, Stores, decode

log = structlog.get_logger(__name__)

_BATCH = 512
_R = TypeVar("_R", Turn, Fact)  # a record the importer writes to the vector store
_REMAP = uuid.UUID("3f6d1f0a-9c1b-4d7e-8a51-6b2f0c9d4e17")


class ImportMode(StrEnum):
    APPEND = "append"
    REPLACE = "replace"
    SKIP_EXISTING = "skip_existing"
    OVERWRITE = "overwrite"


def check_mode(value: object) -> ImportMode:
    try:
        return ImportMode(str(value))
    except ValueError:
        raise ValidationError(
            "mode", f"unknown import mode {value!r}; one of {[m.value for m in ImportMode]}"
        ) from None


class ImportSummary(BaseModel):
    model_config = ConfigDict(frozen=True)

    path: str
    mode: str
    # id in the file -> id in the store (the operator's: internal names, `hivemem.domain.names`)
    sessions: dict[str, str]
    written: dict[str, int]
    skipped: dict[str, int]
    embedded: int  # records embedded again (the file had no vectors)


class _Remap:
    """Ids of one renamed session (append mode): old -> new, every reference included."""

    def __init__(self, old: FileSession, target: SessionName) -> None:
        self.session_id = split_session_name(target)[1]
        # New ids derive from the internal name: unique across namespaces.
        self.name = target
        self.facts = {f: uuid.uuid5(_REMAP, f"fact/{target}/{f}").hex for f in old.fact_ids}
        self.episodes = {e: episode_id(target, index) for e, index in old.episodes.items()}

    def fact_id(self, value: str | None) -> str | None:
        return None if value is None else self.facts.get(value, value)

    def turn(self, turn: Turn) -> Turn:
        return turn.model_copy(update={"session_id": self.session_id})

    def episode(self, episode: Episode) -> Episode:
        return episode.model_copy(update={
            "session_id": self.session_id, "episode_id": self.episodes[episode.episode_id]})

    def fact(self, fact: Fact) -> Fact:
        return fact.model_copy(update={
            "session_id": self.session_id, "fact_id": self.facts[fact.fact_id],
            "superseded_by": self.fact_id(fact.superseded_by),
            "supersedes": self.fact_id(fact.supersedes),
            "conflicts_with": [self.facts.get(f, f) for f in fact.conflicts_with],
            "episode_id": self.episodes.get(fact.episode_id or "", fact.episode_id),
        })

    def event(self, event: AuditEvent) -> AuditEvent:
        return event.model_copy(update={
            "session_id": self.session_id, "fact_id": self.facts.get(event.fact_id,
                                                                      event.fact_id),
            "related": [self.facts.get(r, r) for r in event.related],
            "event_id": uuid.uuid5(_REMAP, f"event/{self.name}/{event.event_id}").hex,
        })


class _Writer:
    """Pass 2: batches per record type, flushed at every session boundary and at the end."""

    def __init__(self, stores: Stores, mode: ImportMode, manifest: Manifest,
                 settings: IngestSettings) -> None:
        self.stores = stores
        self.settings = settings
        self.mode = mode
        self.manifest = manifest
        self.lexical = LexicalEncoder()
        self.written: Counter[str] = Counter()
        self.skipped: Counter[str] = Counter()
        self.embedded = 0
        # Each file session's internal name -> the internal name it is written under.
        self.names: dict[SessionName, SessionName] = {}
        self.remap: _Remap | None = None
        self.target = SessionName("")
        self.is_new = True
        self.turns: list[tuple[Turn, str | None]] = []
        self.facts: list[tuple[Fact, str | None]] = []
        self.episodes: list[Episode] = []
        self.events: list[AuditEvent] = []
        self.newest: list[Turn] = []
        self.known_events: set[str] = set()
        self.listed_episodes: set[str] = set()

    # -- planning (reads only) -------------------------------------------------------------

    def plan_names(self) -> dict[SessionName, SessionName]:
        """Where each of the file's sessions goes (append renames ids its namespace has
        taken; another namespace's sessions are other sessions, never looked at)."""
        names: dict[SessionName, SessionName] = {}

        def taken(name: SessionName) -> bool:
            # Asked per session (never the list of every tenant's sessions).
            return name in names.values() or self.stores.sessions.exists(name)

        for name, info in self.manifest.sessions.items():
            target = name
            if self.mode == ImportMode.APPEND and self._occupied(name, info, taken(name)):
                sid, n = info.session_id, 2
                while taken(candidate := session_name(info.namespace, f"{sid[:120]}.{n}")):
                    n += 1
                target = candidate
            names[name] = target
        return names

    def _occupied(self, name: SessionName, info: FileSession, listed: bool) -> bool:
        if listed or self.stores.vectors.count_turns(name):
            return True
        ids = sorted(info.fact_ids)
        for start in range(0, len(ids), _BATCH):
            if self.stores.vectors.retrieve(FACTS, ids[start:start + _BATCH]):
                return True
        return self.stores.sessions.episodes_exist(name, sorted(info.episodes))

    # -- writing ---------------------------------------------------------------------------

    def start_session(self, record: SessionRecord) -> None:
        self.flush()
        stores = self.stores
        name = session_name(check_state(record), record.session_id)  # validated in pass 1
        self.target = self.names[name]
        self.remap = (_Remap(self.manifest.sessions[name], self.target)
                      if self.target != name else None)
        existed = stores.sessions.exists(self.target)
        if self.mode == ImportMode.REPLACE and existed:
            stores.vectors.delete(TURNS, session_where(self.target))
            stores.vectors.delete(FACTS, session_where(self.target))
            stores.sessions.purge(self.target)
            existed = False
        self.is_new = not existed
        if self.is_new:
            stores.sessions.restore_state(
                self.target, self.manifest.sessions[name].derived_state(record.state))
        elif self.mode == ImportMode.OVERWRITE and record.state.get("info"):
            stores.sessions.write_info(self.target, record.state["info"])
        self.known_events = set() if self.is_new else stores.audit.event_ids(self.target)
        self.listed_episodes = (set() if self.is_new
                                else set(stores.sessions.episode_ids(self.target)))
        self.newest = []
        self.written["session"] += 1

    def add(self, record: Any) -> None:
        remap = self.remap
        if isinstance(record, TurnRecord):
            record = check_turn(record, self.settings)  # as validated: derived fields too
            turn = remap.turn(record.turn) if remap else record.turn
            self.turns.append((turn, record.vector))
        elif isinstance(record, EpisodeRecord):
            self.episodes.append(remap.episode(record.episode) if remap else record.episode)
        elif isinstance(record, FactRecord):
            self.facts.append((remap.fact(record.fact) if remap else record.fact,
                               record.vector))
        elif isinstance(record, AuditRecord):
            self.events.append(remap.event(record.event) if remap else record.event)
        if max(len(self.turns), len(self.facts), len(self.episodes),
               len(self.events)) >= _BATCH:
            self.flush()

    def flush(self) -> None:
        self._flush_turns()
        self._flush_episodes()
        self._flush_facts()
        self._flush_events()

    def finish(self) -> None:
        self.flush()
        if self.newest and self.target:
            self.stores.sessions.set_recent(self.target, self.newest,
                                            self.stores.recent_window)
            self.newest = []

    def _keep_existing(self) -> bool:
        return not self.is_new and self.mode == ImportMode.SKIP_EXISTING

    def _vectors(self, texts: list[str], encoded: list[str | None]) -> Vector:
        if all(e is not None for e in encoded):
            return np.stack([decode(e) for e in encoded if e is not None])
        embedder = self.stores.embedder
        assert embedder is not None  # checked before anything was written
        self.embedded += len(texts)
        return embedder.embed_documents(texts)

    def _unstored(
        self, kind: str, collection: str, batch: list[tuple[_R, str | None]],
        ident: Callable[[_R], str], point_id: Callable[[_R], str],
    ) -> list[tuple[_R, str | None]]:
        """With a mode that keeps what the store holds: the batch without the records it
        holds already (those count as skipped). Otherwise the batch as it is."""
        if not batch or not self._keep_existing():
            return batch
        have = {str(h.payload.get(f"{kind}_id"))
                for h in self.stores.vectors.retrieve(collection, [point_id(r) for r, _ in batch])}
        kept = [(r, v) for r, v in batch if ident(r) not in have]
        self.skipped[kind] += len(batch) - len(kept)
        return kept

    def _encoded(
        self, batch: list[tuple[_R, str | None]], text: Callable[[_R], str],
    ) -> tuple[list[_R], Vector, list[SparseVector]]:
        """The records, their dense vectors (the exported ones, else embedded) and their
        keyword vectors."""
        records = [r for r, _ in batch]
        texts = [text(r) for r in records]
        return records, self._vectors(texts, [v for _, v in batch]), self.lexical.documents(texts)

    def _flush_turns(self) -> None:
        batch, self.turns = self.turns, []
        target = self.target
        batch = self._unstored("turn", TURNS, batch, lambda t: t.turn_id,
                               lambda t: turn_point_id(target, t.turn_id))
        if not batch:
            return
        turns, dense, sparse = self._encoded(batch, lambda t: t.content)
        self.stores.vectors.upsert_turns(turns, dense, sparse)
        self.stores.sessions.add_turn_ids(self.target, turns)
        window = self.stores.recent_window
        self.newest = sorted([*self.newest, *turns], key=lambda t: t.seq)[-window:] if window \
            else []
        self.written["turn"] += len(turns)

    def _flush_facts(self) -> None:
        batch, self.facts = self.facts, []
        batch = self._unstored("fact", FACTS, batch, lambda f: f.fact_id, lambda f: f.fact_id)
        if not batch:
            return
        facts, dense, sparse = self._encoded(batch, lambda f: f.content)
        self.stores.vectors.upsert_facts(facts, dense, sparse)
        self.written["fact"] += len(facts)

    def _flush_episodes(self) -> None:
        if not self.episodes:
            return
        batch, self.episodes = self.episodes, []
        if self._keep_existing():
            kept = [e for e in batch if e.episode_id not in self.listed_episodes]
            self.skipped["episode"] += len(batch) - len(kept)
            batch = kept
        new = [e for e in batch if e.episode_id not in self.listed_episodes]
        overwritten = [e for e in batch if e.episode_id in self.listed_episodes]
        sessions = self.stores.sessions
        sessions.add_episodes(self.target, new)
        if overwritten:
            sessions.overwrite_episodes(overwritten)
        self.listed_episodes.update(e.episode_id for e in new)
        self.written["episode"] += len(batch)

    def _flush_events(self) -> None:
        if not self.events:
            return
        batch, self.events = self.events, []
        kept = [e for e in batch if e.event_id not in self.known_events]
        self.skipped["audit"] += len(batch) - len(kept)
        self.stores.audit.append(kept)
        self.known_events.update(e.event_id for e in kept)
        self.written["audit"] += len(kept)


def _records(path: Path) -> Iterator[tuple[int, Any]]:
    lines = files.read_lines(path)
    next(lines, None)  # the header, validated already
    for number, text in lines:
        yield number, parse_record(number, text)


def import_from(
    stores: Stores, path: Path, mode: ImportMode | str = ImportMode.APPEND, *,
    progress: Progress | None = None, scope: ImportScope | None = None,
) -> ImportSummary:
    """Validate `path` completely (every record as ingest would, and against `scope`), then
    write it (see the module docstring for the modes)."""
    mode = check_mode(mode)
    settings = stores.ingest
    manifest = validate_file(path, stores.vectors.dim, settings=settings, scope=scope)
    if manifest.without_vectors and stores.embedder is None:
        raise ValidationError("path", f"{manifest.without_vectors} records have no vector and"
                                      " no embedder is configured to embed their text")
    writer = _Writer(stores, mode, manifest, settings)
    writer.names = writer.plan_names()
    for _number, record in _records(path):
        if isinstance(record, SessionRecord):
            writer.finish()
            writer.start_session(record)
        elif not isinstance(record, EndRecord):
            writer.add(record)
        if progress is not None:
            progress(1)
    writer.finish()
    log.info("import.done", path=str(path), mode=mode.value, sessions=len(writer.names),
             written=dict(writer.written), skipped=dict(writer.skipped))
    # A namespace's key names its sessions by their ids; the operator by internal names.
    shown = ({split_session_name(a)[1]: split_session_name(b)[1]
              for a, b in writer.names.items()}
             if scope is not None and scope.namespace is not None
             else {str(a): str(b) for a, b in writer.names.items()})
    return ImportSummary(
        path=str(path), mode=mode.value, sessions=shown, written=dict(writer.written),
        skipped=dict(writer.skipped), embedded=writer.embedded,
    )
