"""Export: stream sessions out as the versioned JSON Lines format (`hivemem.transfer.format`).

Reads page by page (turns by seq ranges, facts' vectors in chunks, audit events by pages), so
memory stays bounded by the largest session's fact list, not by the store. With a `Scope`,
every read is narrowed in the stores: only the namespace's sessions, and in them only what
that agent may see (a tenant's export never carries another agent's private memories).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from hivemem.domain.fact import Fact
from hivemem.domain.ids import check_id
from hivemem.domain.models import Turn
from hivemem.domain.names import (
    SessionName,
    check_session_name,
    session_name,
    split_session_name,
)
from hivemem.domain.scope import Scope
from hivemem.errors import NotFound
from hivemem.store.vectors.base import (
    FACTS,
    TURNS,
    Vector,
    Where,
    scoped,
    session_where,
    turn_from_payload,
)
from hivemem.transfer import files
from hivemem.transfer.format import (
    AuditRecord,
    EndRecord,
    EpisodeRecord,
    FactRecord,
    Header,
    SessionRecord,
    TurnRecord,
    dump,
)
from hivemem.transfer.stores import Progress, Stores, encode

_CHUNK = 512


class ExportSummary(BaseModel):
    model_config = ConfigDict(frozen=True)

    path: str
    sessions: list[str]
    counts: dict[str, int]
    vectors: bool
    bytes: int


def _turns(stores: Stores, name: SessionName, last_seq: int, scope: Scope | None
           ) -> Iterator[tuple[Turn, Vector | None]]:
    """The session's stored turns in seq order, a seq range at a time."""
    vectors = stores.vectors
    if last_seq <= 0:
        where: Where = {**session_where(name), **scoped(scope)}
        hits = sorted(vectors.scroll(TURNS, where, with_vectors=True),
                      key=lambda h: int(h.payload["seq"]))
        for hit in hits:
            yield turn_from_payload(hit.payload), hit.vector
        return
    # Bounded by the turns there are, never by the counter alone: it stops once every
    # stored turn is written, and jumps over a run of seqs without turns (dead letters,
    # episode controls) in a few counts instead of walking it.
    base: Where = {**session_where(name), **scoped(scope)}
    left = vectors.count(TURNS, base)
    start = 1
    while left > 0 and start <= last_seq:
        seqs = list(range(start, min(last_seq, start + _CHUNK - 1) + 1))
        found_turns = vectors.turns_by_seq(name, seqs, scope)
        for found in sorted(found_turns, key=lambda h: h.turn.seq):
            yield found.turn, found.vector
        left -= len(found_turns)
        start = seqs[-1] + 1
        if not found_turns:
            nearest = vectors.nearest_seq(name, start, last_seq, scope)
            start = last_seq + 1 if nearest is None else nearest


def _facts(facts: list[Fact], stores: Stores, with_vectors: bool
           ) -> Iterator[tuple[Fact, Vector | None]]:
    for start in range(0, len(facts), _CHUNK):
        chunk = facts[start:start + _CHUNK]
        found: dict[str, Vector | None] = {}
        if with_vectors:
            found = {h.fact.fact_id: h.vector
                     for h in stores.vectors.get_facts([f.fact_id for f in chunk])}
        for fact in chunk:
            yield fact, found.get(fact.fact_id)


def export_records(
    stores: Stores, session_ids: Sequence[str], *, vectors: bool = False,
    scope: Scope | None = None,
) -> Iterator[BaseModel]:
    """Header, then each session's records, then the end record (`scope`: what it may see).
    `session_ids`: with a scope, ids in its namespace; without, internal names
    (`hivemem.domain.names`). A session record carries the session's id and, in its state,
    its namespace."""
    # The records' ids (a session's namespace is in its state).
    yield Header(sessions=[split_session_name(_name(scope, g))[1] for g in session_ids],
                 vectors=vectors,
                 dim=stores.vectors.dim if vectors else None)
    counts: Counter[str] = Counter()
    for given in session_ids:
        name = _name(scope, given)
        state = stores.sessions.dump_state(name)
        if scope is not None:  # marker counts cover every agent's turns (a custom name tells)
            state["boundary"] = {k: v for k, v in state["boundary"].items()
                                 if not k.startswith("marker:")}
        yield SessionRecord(session_id=split_session_name(name)[1], state=state)
        counts["session"] += 1
        for turn, vector in _turns(stores, name, int(state["seq"]), scope):
            yield TurnRecord(turn=turn, vector=encode(vector) if vectors and vector is not None
                             else None)
            counts["turn"] += 1
        for episode in stores.episodes.episodes(name, scope=scope):
            yield EpisodeRecord(episode=episode)
            counts["episode"] += 1
        facts = stores.vectors.list_facts(name, None, scope)  # every status, by creation
        for fact, vector in _facts(facts, stores, vectors):
            yield FactRecord(fact=fact, vector=encode(vector) if vector is not None else None)
            counts["fact"] += 1
        events = (stores.audit.iter_events(name) if scope is None else
                  stores.audit.visible_events(name, {f.fact_id for f in facts}))
        for event in events:
            yield AuditRecord(event=event)
            counts["audit"] += 1
    yield EndRecord(counts={k: counts[k] for k in ("session", "turn", "episode", "fact",
                                                   "audit")})


def count_records(stores: Stores, names: Sequence[SessionName]) -> int:
    """About how many records an export of these sessions holds (for a progress bar)."""
    total = 2
    for name in names:
        total += 1 + stores.vectors.count_turns(name) + len(stores.sessions.episode_ids(name))
        total += stores.vectors.count(FACTS, session_where(name)) + stores.audit.count(name)
    return total


def _name(scope: Scope | None, given: str) -> SessionName:
    """The internal name of a session an export names: an id in the scope's namespace, or
    (no scope: the operator's) an internal name."""
    if scope is not None:
        return session_name(scope.namespace, given)
    return check_session_name("session_ids", given)


def export_to(
    stores: Stores, path: Path, session_ids: Sequence[str] | None = None, *,
    vectors: bool = False, progress: Progress | None = None, scope: Scope | None = None,
) -> ExportSummary:
    """Write the export to `path` (gzip when it ends in .gz). The file appears complete or
    not at all: it is written beside it and renamed into place at the end. With `scope`,
    only its namespace's sessions (another one's is refused like a missing one)."""
    known = stores.sessions.session_ids(None if scope is None else scope.namespace)
    if session_ids is None:
        session_ids = known
    else:
        for sid in session_ids:
            if scope is None:
                _name(scope, sid)
            else:
                check_id("session_ids", sid)
            if sid not in known:
                raise NotFound("session_ids", f"unknown session {sid!r}")
        session_ids = list(dict.fromkeys(session_ids))
    counts: dict[str, int] = {}
    fh = files.open_write(path)
    try:
        with fh:
            for record in export_records(stores, session_ids, vectors=vectors, scope=scope):
                fh.write(dump(record))
                fh.write("\n")
                if isinstance(record, EndRecord):
                    counts = dict(record.counts)
                if progress is not None:
                    progress(1)
        files.commit(path)
    except BaseException:
        files.abandon(path)
        raise
    return ExportSummary(path=str(path), sessions=list(session_ids), counts=counts,
                         vectors=vectors, bytes=path.stat().st_size)
