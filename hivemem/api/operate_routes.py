"""Operating a namespace over HTTP: a session's compaction (preview, then apply exactly what
was previewed), and the pipeline's dead letters (list, replay).

Both act beyond one agent's view, so they are scoped by the key, never by a request field:

- **Compaction** plans over every fact of the session, whichever agent stated it, so only a
  namespace key previews or applies it (an agent key: 403). The session must be the key's
  namespace's (else 404, like a missing one).
- **Dead letters** are one list per stage for the whole deployment. A key sees only the
  letters of its namespace's sessions: a namespace key all of them, an agent key only those
  whose every turn it may read (shared turns and its own private ones; a letter that also
  holds another agent's private turn is left out whole, since its error may quote it). A
  letter that no longer decodes names no session: it is left to `hivemem dlq` (the
  operator's CLI). Replaying is for a namespace key, and only of its namespace's letters.
"""

from collections.abc import Awaitable, Callable, Collection
from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field

from hivemem.api.routes import ERRORS, SessionId
from hivemem.domain.compaction import CompactionDiff
from hivemem.domain.models import DeadLetter, Turn
from hivemem.domain.names import session_name
from hivemem.domain.scope import Scope
from hivemem.errors import MalformedEntry, NotFound, NotPermitted, ValidationError
from hivemem.pipeline.messages import (
    EmbeddedTurn,
    EpisodeControl,
    TurnEntry,
    decode_embedded,
    embedded_items,
)
from hivemem.producer.admin import Admin
from hivemem.producer.scoped import ScopedMemory
from hivemem.store.apikeys import ApiKeyInfo

Stage = Literal["embed", "boundary"]
ENTRY_ID = r"^[0-9]{1,20}-[0-9]{1,20}$"  # a Redis stream entry id
EntryId = Annotated[str, Field(pattern=ENTRY_ID, max_length=41)]
# How many letters of a stage are read to find the key's: the dead-letter streams hold the
# whole deployment's, and a healthy one holds few.
SCAN_LETTERS = 10_000
MAX_REPLAY = 1000


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CompactIn(_Body):
    expect: str = Field(pattern=r"^[0-9a-f]{64}$", description=(
        "the preview's `fingerprint`: refused (422) if the session's facts changed since"))


class LetterTurn(BaseModel):
    turn_id: str
    seq: int
    agent_id: str | None
    role: str
    visibility: str
    content: str


class DeadLetterOut(BaseModel):
    """A stage entry its worker gave up on, with why."""

    stage: Stage
    entry_id: str = Field(description="the entry's id on its stream: what replay takes")
    stream: str
    kind: Literal["turn", "turns", "control", "skip"]
    session_id: str
    seqs: list[int]
    turns: list[LetterTurn] = Field(default_factory=list)
    action: str | None = Field(default=None, description="a control's: close_episode, ...")
    error: str
    deliveries: int
    failed_at: datetime


class DeadLettersOut(BaseModel):
    letters: list[DeadLetterOut]


class ReplayIn(_Body):
    stage: Stage = "embed"
    entry_ids: list[EntryId] | None = Field(
        default=None, max_length=MAX_REPLAY,
        description="the letters to replay (their `entry_id`); none: all of the namespace's")


class ReplayOut(BaseModel):
    stage: Stage
    replayed: list[str] = Field(description="the entry ids put back on their stream")


Items = list[tuple[int, Turn | None]]


def _items(letter: DeadLetter, stage: Stage) -> tuple[str, str, Items, str | None]:
    """(kind, session id, each item's (seq, turn or None), a control's action) of the
    letter's entry; `MalformedEntry` when it no longer decodes."""
    if stage == "embed":
        turn = TurnEntry.from_fields(letter.fields).turn
        return "turn", turn.session_id, [(turn.seq, turn)], None
    entry = decode_embedded(letter.fields)
    items: Items = [(item.turn.seq, item.turn) if isinstance(item, EmbeddedTurn)
                    else (item.seq, None) for item in embedded_items(entry)]
    session_id = entry.turn.session_id if isinstance(entry, EmbeddedTurn) else entry.session_id
    action = entry.action if isinstance(entry, EpisodeControl) else None
    return entry.kind, session_id, items, action


def letter_view(letter: DeadLetter, stage: Stage, sessions: Collection[str],
                key: ApiKeyInfo) -> DeadLetterOut | None:
    """The letter as `key` may see it, or None (another namespace's, a turn the key may not
    read, or no longer decodable)."""
    try:
        kind, session_id, items, action = _items(letter, stage)
    except MalformedEntry:
        return None
    turns = [t for _, t in items if t is not None]
    if session_id not in sessions:
        return None
    scope = Scope(key.namespace, key.agent_id)
    for t in turns:
        if t.session_id != session_id or t.namespace != key.namespace:
            return None
        if key.agent_id is not None and not scope.admits(t.namespace, t.visibility,
                                                          t.agent_id):
            return None
    return DeadLetterOut(
        stage=stage, entry_id=letter.entry_id, stream=letter.stream,
        kind=kind,  # type: ignore[arg-type]  # the entry kinds are these four
        session_id=session_id, seqs=[seq for seq, _ in items],
        turns=[LetterTurn(turn_id=t.turn_id, seq=t.seq, agent_id=t.agent_id,
                          role=t.role.value, visibility=t.visibility, content=t.content)
               for t in turns],
        action=action, error=letter.error, deliveries=letter.deliveries,
        failed_at=letter.failed_at)


def _namespace_key(key: ApiKeyInfo, what: str) -> None:
    if key.agent_id is not None:
        raise NotPermitted("agent_id", f"{what} is for a namespace key: this key acts as agent"
                                       f" {key.agent_id!r} only")


def build_operate_router(
    tenant_of: Callable[[ApiKeyInfo], ScopedMemory],
    authenticate: Callable[..., Awaitable[ApiKeyInfo]],
    admin: Admin,
) -> APIRouter:
    """`admin` does the work once the key's scope is checked here (compaction and dead
    letters have no per-agent handle)."""

    Key = Annotated[ApiKeyInfo, Depends(authenticate)]  # noqa: N806 (a type alias)
    router = APIRouter(prefix="/v1", responses=ERRORS, tags=["operate"])

    def own_session(key: ApiKeyInfo, session_id: str, what: str) -> None:
        _namespace_key(key, what)
        tenant_of(key).session_info(session_id)  # NotFound unless the namespace's

    @router.get("/sessions/{session_id}/compaction", response_model=CompactionDiff,
                summary="What compaction would do to the session's facts now (a namespace"
                        " key; changes nothing)")
    def preview_compaction(session_id: SessionId, key: Key) -> CompactionDiff:
        own_session(key, session_id, "compaction")
        return admin.preview_compaction(session_name(key.namespace, session_id))

    @router.post("/sessions/{session_id}/compact", response_model=CompactionDiff,
                 summary="Compact the session's facts: exactly the preview named by `expect`")
    def compact(session_id: SessionId, body: CompactIn, key: Key) -> CompactionDiff:
        own_session(key, session_id, "compaction")
        return admin.compact(session_name(key.namespace, session_id), expect=body.expect)

    def letters(key: ApiKeyInfo, stage: Stage) -> tuple[list[DeadLetterOut], set[str]]:
        """The stage's letters `key` may see, and the entry ids of the others."""
        sessions = set(tenant_of(key).sessions())
        mine: list[DeadLetterOut] = []
        others: set[str] = set()
        for letter in admin.dead_letters(SCAN_LETTERS, stage=stage):
            view = letter_view(letter, stage, sessions, key)
            if view is None:
                others.add(letter.entry_id)
            else:
                mine.append(view)
        return mine, others

    @router.get("/dead-letters", response_model=DeadLettersOut,
                summary="The stage's dead letters of the key's namespace, oldest first")
    def dead_letters(key: Key, stage: Stage = "embed",
                     count: Annotated[int, Query(ge=1, le=1000)] = 100) -> DeadLettersOut:
        return DeadLettersOut(letters=letters(key, stage)[0][:count])

    @router.post("/dead-letters/replay", response_model=ReplayOut,
                 summary="Put the namespace's dead letters (all, or these) back on their"
                         " stream (a namespace key)")
    def replay(body: ReplayIn, key: Key) -> ReplayOut:
        _namespace_key(key, "replaying dead letters")
        found, others = letters(key, body.stage)
        mine = [letter.entry_id for letter in found]
        wanted = mine if body.entry_ids is None else list(dict.fromkeys(body.entry_ids))
        known = set(mine)
        unknown = [e for e in wanted if e not in known]
        if unknown:
            raise NotFound("entry_ids", f"no {body.stage} dead letter {unknown[0]!r} in this"
                                        " namespace")
        # Replay goes by entry id, and two partitions' streams can give the same id: a
        # letter of another namespace with it would go back on its stream too.
        shared = [e for e in wanted if e in others]
        if shared:
            raise ValidationError("entry_ids", f"{shared[0]!r} is also the id of a letter"
                                  " this key may not see (another partition's stream):"
                                  " replay it with `hivemem dlq replay`")
        if not wanted:
            return ReplayOut(stage=body.stage, replayed=[])
        done = admin.replay_dead_letters(wanted, stage=body.stage, count=SCAN_LETTERS)
        return ReplayOut(stage=body.stage, replayed=done)

    return router
