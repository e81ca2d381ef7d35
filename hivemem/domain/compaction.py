"""Compaction: keep a session's facts few, current and explainable (pure: no I/O).

`plan_compaction` turns a session's facts (with their stored vectors) into a plan: the facts
to write and a `CompactionDiff` that says, for every fact, what happens to it and why:

- **merged**: near-duplicates (same kind, cosine >= `merge_threshold`, or the same words) fold
  into the best-worded one (higher confidence, more provenance, newer), which keeps the union
  of their `source_turn_ids`; the duplicate is archived with `superseded_by` = the keeper.
  Facts that contradict each other (different names for one thing) never merge.
- **archived** (stale): while the session holds more than `stale_above` active facts, an
  unconfirmed fact in the `short_term` layer, older than `stale_after_days` on the session's
  own clock, whose value (confidence x use x recency) fell below `archive_below`.
- **archived** (cap): beyond `max_active_facts` visible facts, the lowest-valued active ones.
- **promoted** / **demoted**: the fact moves between layers (see `target_layer`).
- **kept**: everything else, with why it stays.

Conflicted facts are never merged or archived here: they stay visible until a newer statement
resolves them. Superseded and archived facts are history and are left as they are. Nothing is
deleted: every change is a status or layer change that the caller records as an audit event.

"Use" is a fact's support: how many turns stated it (its provenance), which grows every time
reflection merges a restatement into it. The session's clock is its newest activity, so a
session that sleeps for a month does not find its memory aged when it wakes up.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from hivemem.config import CompactionPolicy
from hivemem.domain.consolidation import contradicts, normalise
from hivemem.domain.fact import Fact, FactStatus

Layer = Literal["short_term", "working", "episodic", "semantic", "operational", "archived"]
# Ordered from the most transient to the most durable (archived is outside the order).
LAYERS: tuple[str, ...] = ("short_term", "working", "episodic", "semantic", "operational")
ARCHIVED_LAYER = "archived"
_RANK = {name: i for i, name in enumerate(LAYERS)}
_DAY_S = 86400.0
_BLOCK = 512  # rows per similarity block: 512 x 10k float32 = 20 MB


class DiffEntry(BaseModel):
    """One fact's fate in a compaction run."""

    model_config = ConfigDict(frozen=True)

    fact_id: str
    reason: str
    content: str = ""
    into: str | None = None  # merged: the fact that absorbed it
    similarity: float | None = None  # merged: cosine to the keeper
    merged_from: list[str] = Field(default_factory=list)  # kept: the duplicates it absorbed
    from_layer: str | None = None
    to_layer: str | None = None
    value: float | None = None


class CompactionDiff(BaseModel):
    """Everything one run changes (or, as a preview, would change), each with its reason."""

    model_config = ConfigDict(frozen=True)

    session_id: str
    # Both derive from the facts it was computed from: a preview and the run that applies it
    # carry the same ids when nothing changed in between.
    run_id: str
    fingerprint: str
    clock: datetime
    facts_seen: int
    active_before: int
    active_after: int
    policy: CompactionPolicy
    kept: list[DiffEntry] = Field(default_factory=list)
    merged: list[DiffEntry] = Field(default_factory=list)
    archived: list[DiffEntry] = Field(default_factory=list)
    promoted: list[DiffEntry] = Field(default_factory=list)
    demoted: list[DiffEntry] = Field(default_factory=list)

    @property
    def changes(self) -> int:
        return len(self.merged) + len(self.archived) + len(self.promoted) + len(self.demoted)

    def summary(self) -> dict[str, int]:
        return {"kept": len(self.kept), "merged": len(self.merged),
                "archived": len(self.archived), "promoted": len(self.promoted),
                "demoted": len(self.demoted)}


@dataclass
class CompactionPlan:
    diff: CompactionDiff
    writes: dict[str, Fact] = field(default_factory=dict)  # changed facts, new state


def fingerprint(facts: Sequence[Fact]) -> str:
    """What a plan depends on: every fact's id, status, layer, confidence and support."""
    digest = hashlib.sha256()
    for f in sorted(facts, key=lambda f: f.fact_id):
        digest.update(
            f"{f.fact_id}|{f.status.value}|{f.layer}|{f.confidence:.6f}|"
            f"{len(f.source_turn_ids)}|{f.valid_from.isoformat()}\n".encode()
        )
    return digest.hexdigest()


def support(fact: Fact) -> int:
    return max(1, len(set(fact.source_turn_ids)))


def age_days(fact: Fact, clock: datetime) -> float:
    return max(0.0, (clock - fact.valid_from).total_seconds() / _DAY_S)


def value_of(fact: Fact, clock: datetime, policy: CompactionPolicy) -> float:
    """Confidence x use x recency: what keeping the fact is worth."""
    recency = 0.5 ** (age_days(fact, clock) / policy.half_life_days)
    return float(fact.confidence * (1.0 + math.log(support(fact))) * recency)


def target_layer(fact: Fact, clock: datetime, policy: CompactionPolicy) -> str:
    """Operational state first, then what happened, then durable knowledge; the rest is
    working memory while new and short-term once it ages unconfirmed."""
    if fact.kind in policy.operational_kinds:
        return "operational"
    if fact.kind in policy.episodic_kinds:
        return "episodic"
    if support(fact) >= policy.durable_support or fact.confidence >= policy.durable_confidence:
        return "semantic"
    if age_days(fact, clock) <= policy.working_days:
        return "working"
    return "short_term"


def _why_layer(fact: Fact, layer: str) -> str:
    if layer == "operational":
        return f"operational state ({fact.kind.value})"
    if layer == "episodic":
        return f"something that happened ({fact.kind.value})"
    if layer == "semantic":
        return f"durable: stated {support(fact)}x, confidence {fact.confidence:.2f}"
    if layer == "working":
        return "new and unconfirmed: working memory"
    return "unconfirmed and aging: short-term"


def _owner(fact: Fact) -> tuple[str, str | None]:
    """Who may see the fact (`hivemem.domain.scope`): a private fact folded into a shared one would
    lend it its provenance, a shared one folded into a private one would vanish for others."""
    return (fact.visibility, fact.agent_id if fact.visibility == "private" else None)


def _quality(fact: Fact) -> tuple[float, int, float, str]:
    """Best wording first: confidence, provenance, newest."""
    return (-fact.confidence, -support(fact), -fact.valid_from.timestamp(), fact.fact_id)


def _unit_matrix(vectors: npt.NDArray[np.float32] | None, n: int) -> npt.NDArray[np.float32]:
    if vectors is None or len(vectors) != n or n == 0:
        return np.zeros((n, 1), dtype=np.float32)
    matrix = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    unit: npt.NDArray[np.float32] = (matrix / norms).astype(np.float32)
    return unit


def _neighbours(
    matrix: npt.NDArray[np.float32], threshold: float, groups: Sequence[Sequence[int]]
) -> list[dict[int, float]]:
    """For each row, the other rows of its group at cosine >= threshold. Blockwise (bounded
    memory) and over the upper triangle only: each pair is computed once."""
    out: list[dict[int, float]] = [{} for _ in range(len(matrix))]
    for group in groups:
        index = np.asarray(group, dtype=np.int64)
        sub = matrix[index]
        for start in range(0, len(index), _BLOCK):
            block = sub[start:start + _BLOCK] @ sub[start:].T
            rows, cols = np.nonzero(block >= threshold)
            for r, c in zip(rows.tolist(), cols.tolist(), strict=True):
                if c > r:
                    i, j = int(index[start + r]), int(index[start + c])
                    out[i][j] = out[j][i] = float(block[r, c])
    return out


class _Planner:
    """One run's working state: the facts as they will be, and the diff so far."""

    def __init__(self, facts: Sequence[Fact], clock: datetime, policy: CompactionPolicy) -> None:
        self.facts = facts
        self.clock = clock
        self.policy = policy
        self.state: dict[str, Fact] = {f.fact_id: f for f in facts}
        self.visible = [i for i, f in enumerate(facts)
                        if f.status in (FactStatus.ACTIVE, FactStatus.CONFLICTED)]
        self.writes: dict[str, Fact] = {}
        self.merged: list[DiffEntry] = []
        self.archived: list[DiffEntry] = []
        self.absorbed: dict[str, list[str]] = {}
        self.gone: set[str] = set()

    def write(self, fact: Fact) -> Fact:
        self.writes[fact.fact_id] = self.state[fact.fact_id] = fact
        return fact

    def archive(self, fact: Fact, reason: str, **extra: object) -> None:
        self.write(fact.model_copy(update={
            "status": FactStatus.ARCHIVED, "valid_to": self.clock, "reason": reason,
            "layer": ARCHIVED_LAYER, **extra}))
        self.gone.add(fact.fact_id)

    def survivors(self) -> list[Fact]:
        return [self.state[self.facts[i].fact_id] for i in self.visible
                if self.facts[i].fact_id not in self.gone]

    def merge(self, vectors: npt.NDArray[np.float32] | None) -> None:
        """Near-duplicates fold into the best-worded fact of their group (greedy, by quality:
        each fact absorbs the unassigned ones near it, closest first)."""
        facts = self.facts
        active = [i for i in self.visible if facts[i].status == FactStatus.ACTIVE]
        matrix = _unit_matrix(None if vectors is None else vectors[active], len(active))
        by_kind: dict[str, list[int]] = {}
        for local, i in enumerate(active):
            by_kind.setdefault(facts[i].kind.value, []).append(local)
        near = (_neighbours(matrix, self.policy.merge_threshold, list(by_kind.values()))
                if len(active) > 1 else [{} for _ in active])
        by_text: dict[tuple[str, str], list[int]] = {}
        for local, i in enumerate(active):
            key = (facts[i].kind.value, normalise(facts[i].content))
            by_text.setdefault(key, []).append(local)
        for group in by_text.values():
            for a in group:
                near[a].update({b: 1.0 for b in group if b != a})
        assigned: set[int] = set()
        for local in sorted(range(len(active)), key=lambda x: _quality(facts[active[x]])):
            if local in assigned:
                continue
            assigned.add(local)
            keeper = self.state[facts[active[local]].fact_id]
            for other, sim in sorted(near[local].items(), key=lambda kv: (-kv[1], kv[0])):
                dup = facts[active[other]]
                if (other in assigned or dup.kind != keeper.kind
                        or contradicts(dup.content, keeper.content)
                        or _owner(dup) != _owner(keeper)):  # scopes never merge
                    continue
                assigned.add(other)
                keeper = self._absorb(keeper, dup, sim)

    def _absorb(self, keeper: Fact, dup: Fact, sim: float) -> Fact:
        self.archive(dup, f"merged into {keeper.fact_id}", superseded_by=keeper.fact_id)
        keeper = self.write(keeper.model_copy(update={
            "source_turn_ids": sorted(set(keeper.source_turn_ids) | set(dup.source_turn_ids)),
            "confidence": max(keeper.confidence, dup.confidence)}))
        self.absorbed.setdefault(keeper.fact_id, []).append(dup.fact_id)
        self.merged.append(DiffEntry(
            fact_id=dup.fact_id, content=dup.content[:160], into=keeper.fact_id,
            similarity=round(sim, 4), from_layer=dup.layer, to_layer=ARCHIVED_LAYER,
            reason=(f"near-duplicate of {keeper.fact_id} (cosine {sim:.2f}); the keeper has"
                    " the better wording (confidence, provenance, newer)")))
        return keeper

    def archive_stale(self) -> None:
        """Unconfirmed short-term facts past `stale_after_days` whose value fell too low."""
        policy, clock = self.policy, self.clock
        survivors = self.survivors()
        if len(survivors) <= policy.stale_above:
            return
        for fact in survivors:
            if fact.status != FactStatus.ACTIVE or fact.fact_id in self.absorbed:
                continue
            age = age_days(fact, clock)
            value = value_of(fact, clock, policy)
            if (target_layer(fact, clock, policy) == "short_term"
                    and age > policy.stale_after_days and value < policy.archive_below):
                self.archived.append(DiffEntry(
                    fact_id=fact.fact_id, content=fact.content[:160],
                    reason=(f"stale: unconfirmed for {age:.0f} days (after"
                            f" {policy.stale_after_days:g}), value {value:.2f} <"
                            f" {policy.archive_below:g}"),
                    from_layer=fact.layer, to_layer=ARCHIVED_LAYER, value=round(value, 4)))
                self.archive(fact, f"stale: unconfirmed for {age:.0f} days")

    def cap(self) -> None:
        """Beyond `max_active_facts`, the lowest-valued active facts are archived."""
        policy, clock = self.policy, self.clock
        survivors = self.survivors()
        excess = len(survivors) - policy.max_active_facts
        if excess <= 0:
            return
        candidates = sorted(
            (f for f in survivors if f.status == FactStatus.ACTIVE),
            key=lambda f: (value_of(f, clock, policy), f.valid_from.timestamp(), f.fact_id),
        )
        for fact in candidates[:excess]:
            value = value_of(fact, clock, policy)
            self.archived.append(DiffEntry(
                fact_id=fact.fact_id, content=fact.content[:160],
                reason=(f"over max_active_facts ({policy.max_active_facts}): value"
                        f" {value:.2f} (confidence {fact.confidence:.2f}, stated"
                        f" {support(fact)}x) is among the lowest"),
                from_layer=fact.layer, to_layer=ARCHIVED_LAYER, value=round(value, 4)))
            self.archive(fact, f"over max_active_facts ({policy.max_active_facts})")

    def layers(self) -> tuple[list[DiffEntry], list[DiffEntry], list[DiffEntry]]:
        """(kept, promoted, demoted): each survivor's layer, and why it stays."""
        kept: list[DiffEntry] = []
        promoted: list[DiffEntry] = []
        demoted: list[DiffEntry] = []
        for fact in self.survivors():
            layer = (target_layer(fact, self.clock, self.policy) if self.policy.assign_layers
                     else fact.layer)
            why = _why_layer(fact, layer)
            if fact.status == FactStatus.CONFLICTED:
                why = "conflicted: stays visible until resolved; " + why
            if layer != fact.layer:
                self.write(fact.model_copy(update={"layer": layer}))
                up = _RANK.get(layer, 0) > _RANK.get(fact.layer, -1)
                (promoted if up else demoted).append(DiffEntry(
                    fact_id=fact.fact_id, reason=why, content=fact.content[:160],
                    from_layer=fact.layer, to_layer=layer))
            absorbed = self.absorbed.get(fact.fact_id, [])
            kept.append(DiffEntry(
                fact_id=fact.fact_id, content=fact.content[:160], to_layer=layer,
                merged_from=absorbed,
                reason=why + (f"; absorbed {len(absorbed)} duplicate(s)" if absorbed else "")))
        return kept, promoted, demoted


def plan_compaction(
    facts: Sequence[Fact],
    vectors: npt.NDArray[np.float32] | None,
    *,
    session_id: str,
    clock: datetime,
    policy: CompactionPolicy | None = None,
) -> CompactionPlan:
    """The plan for one session. `vectors[i]` is the stored dense vector of `facts[i]`."""
    policy = policy or CompactionPolicy()
    planner = _Planner(facts, clock, policy)
    if policy.merge:
        planner.merge(vectors)
    if policy.archive_stale:
        planner.archive_stale()
    planner.cap()
    kept, promoted, demoted = planner.layers()
    printed = fingerprint(facts)
    run_id = hashlib.sha256(
        f"{printed}|{policy.model_dump_json()}|{clock.isoformat()}".encode()
    ).hexdigest()[:16]
    diff = CompactionDiff(
        session_id=session_id, run_id=run_id, fingerprint=printed, clock=clock,
        facts_seen=len(facts), active_before=len(planner.visible),
        active_after=len(kept), policy=policy, kept=kept, merged=planner.merged,
        archived=planner.archived, promoted=promoted, demoted=demoted,
    )
    return CompactionPlan(diff=diff, writes=planner.writes)
