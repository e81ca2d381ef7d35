"""Forgetting (pure): what a forget asks for, what it removed, and how a fact that quoted
an erased turn is redacted.

A forget is a request (`ForgetRequest`: one session, some of its turns or facts, an
agent's data in a namespace, or a namespace) that the service writes down before it starts
and removes when done, so a crash mid-forget is finished by the next process that starts.
Its result is a `ForgetReceipt`: counts by kind of what each store held, never the content.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Collection, Iterable
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from hivemem.domain.fact import Fact

ForgetTarget = Literal["session", "turns", "facts", "agent", "namespace", "retention"]
REDACTED = "[forgotten]"
_WORD = re.compile(r"\w+", re.UNICODE)


def new_forget_id() -> str:
    return uuid.uuid4().hex


class ForgetRequest(BaseModel):
    """One forget, as it is written down before it starts (and read back to resume it).

    `target`: ``session`` (the session's data, or only `agent_id`'s turns in it when one
    is given), ``turns`` / ``facts`` (these ids of the session), ``agent`` (every session
    of `namespace` as `agent_id` wrote it), ``namespace`` (every session of it)."""

    model_config = ConfigDict(frozen=True)

    forget_id: str = Field(default_factory=new_forget_id)
    target: ForgetTarget
    session_id: str | None = None
    namespace: str | None = None
    agent_id: str | None = None
    turn_ids: tuple[str, ...] = ()
    fact_ids: tuple[str, ...] = ()
    before: datetime | None = None  # retention: what is older than this goes
    requested_by: str = "operator"  # who asked: "operator", "namespace:<ns>", "agent:<ns>/<id>"
    requested_at: datetime


class DiskErasure(BaseModel):
    """What was done so that the forgotten bytes leave the store's files."""

    model_config = ConfigDict(frozen=True)

    redis_aof_rewritten: bool = False  # the AOF rewritten after the deletes (BGREWRITEAOF)
    vectors_compacted: bool = False  # the engine's collections rebuilt without them
    # A Qdrant server vacuums deleted points itself (its optimizer): asked for, not awaited.
    vectors_vacuum: Literal["done", "server", "none"] = "none"
    completed_at: datetime | None = None  # when the last file no longer held them
    seconds: float = 0.0  # from the start of the forget to `completed_at`


class ForgetReceipt(BaseModel):
    """What a forget removed, from each store, by kind, and when."""

    model_config = ConfigDict(frozen=True)

    forget_id: str
    target: ForgetTarget
    session_ids: list[str] = Field(default_factory=list)
    # store -> kind -> how many: "redis" (keys, stream entries, window entries, traces,
    # audit events), "vectors" (turn points, fact points), "jobs" (rq jobs).
    removed: dict[str, dict[str, int]] = Field(default_factory=dict)
    redacted_facts: int = 0  # facts kept (other sources) with the erased words removed
    started_at: datetime
    finished_at: datetime
    disk: DiskErasure = Field(default_factory=DiskErasure)

    def total(self, store: str | None = None) -> int:
        stores = [store] if store is not None else list(self.removed)
        return sum(sum(self.removed.get(s, {}).values()) for s in stores)


def add_counts(into: dict[str, dict[str, int]], store: str, counts: dict[str, int]) -> None:
    """Add `counts` to `into[store]` (only the non-zero ones)."""
    for kind, n in counts.items():
        if n:
            bucket = into.setdefault(store, {})
            bucket[kind] = bucket.get(kind, 0) + n


def erased_words(erased: Iterable[str], kept: Iterable[str]) -> set[str]:
    """The words (casefolded) of the erased texts that none of the kept texts has: what a
    fact that quoted them must not say any more."""
    gone = {w.casefold() for text in erased for w in _WORD.findall(text)}
    stay = {w.casefold() for text in kept for w in _WORD.findall(text)}
    return gone - stay


def redact(text: str, words: set[str]) -> str:
    """`text` with every word of `words` replaced by `REDACTED` (runs of them by one)."""
    if not words or not text:
        return text
    out = _WORD.sub(lambda m: REDACTED if m.group(0).casefold() in words else m.group(0),
                    text)
    return re.sub(rf"(?:{re.escape(REDACTED)}\W*){{2,}}", REDACTED + " ", out).strip()


def quotes(text: str, words: set[str]) -> bool:
    """Whether `text` says any of `words`."""
    return any(w.casefold() in words for w in _WORD.findall(text or ""))


def linked(fact: Fact, dead: set[str]) -> bool:
    return bool({fact.supersedes, fact.superseded_by, *fact.conflicts_with} & dead)


def versions_of(facts: dict[str, Fact], start: list[str]) -> set[str]:
    """These facts and every version of them (the supersedes chain both ways)."""
    seen: set[str] = set()
    todo = list(start)
    while todo:
        fid = todo.pop()
        if fid in seen or fid not in facts:
            continue
        seen.add(fid)
        fact = facts[fid]
        todo += [f for f in (fact.supersedes, fact.superseded_by) if f]
    return seen


def redacted_fact(fact: Fact, gone: Collection[str], dead: set[str], words: set[str]) -> Fact:
    """The fact without the forgotten turns' ids, links to forgotten facts, or the words
    only forgotten text said."""
    def keep(ids: list[str]) -> list[str]:
        return [i for i in ids if i not in gone]

    return fact.model_copy(update={
        "content": redact(fact.content, words),
        "reason": None if fact.reason is None else redact(fact.reason, words),
        "source_turn_ids": keep(fact.source_turn_ids),
        "retracted_by": keep(fact.retracted_by),
        "considered_in": keep(fact.considered_in),
        "mentioned_in": keep(fact.mentioned_in),
        "considered_values": [redact(v, words) for v in fact.considered_values],
        "supersedes": None if fact.supersedes in dead else fact.supersedes,
        "superseded_by": None if fact.superseded_by in dead else fact.superseded_by,
        "conflicts_with": [c for c in fact.conflicts_with if c not in dead],
    })
