"""Sessions as things: their metadata, which other sessions are about the same things, and a
session-scoped context (the session's header plus recall over it and its related sessions)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from hivemem.domain.episode import Episode
from hivemem.domain.models import RecallResult
from hivemem.pipeline.vectors import decode_vector

Vector = npt.NDArray[np.float32]
# Weights of the two signals of relatedness (they sum to 1).
CENTROID_WEIGHT = 0.7
SUBJECT_WEIGHT = 0.3


class SessionInfo(BaseModel):
    model_config = ConfigDict(frozen=True)

    session_id: str
    title: str | None = None
    agent_id: str | None = None
    created_at: datetime | None = None
    last_active: datetime | None = None
    turns: int = 0
    episodes: int = 0
    facts_active: int = 0

    def header(self) -> str:
        parts = [f"Session {self.session_id}"]
        if self.title:
            parts.append(f'"{self.title}"')
        if self.agent_id:
            parts.append(f"agent {self.agent_id}")
        if self.created_at:
            parts.append(f"since {self.created_at:%Y-%m-%d %H:%M}")
        if self.last_active:
            parts.append(f"last active {self.last_active:%Y-%m-%d %H:%M}")
        return ", ".join(parts)


class RelatedSession(BaseModel):
    model_config = ConfigDict(frozen=True)

    session_id: str
    score: float
    similarity: float  # cosine between the sessions' centroids
    shared_subjects: list[str] = Field(default_factory=list)


class SessionContext(BaseModel):
    """A session-scoped context: who and what the session is, plus what recall found."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    info: SessionInfo
    related: list[RelatedSession]
    result: RecallResult

    def render(self) -> str:
        lines = [self.info.header()]
        if self.related:
            lines.append("Related sessions: " + ", ".join(r.session_id for r in self.related))
        body = self.result.render()
        return "\n".join(lines + ([body] if body else []))


def parse_time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def centroid(vectors: Iterable[Vector]) -> Vector | None:
    """The unit mean direction of a session's vectors (episode centroids or turns)."""
    rows = [np.asarray(v, dtype=np.float32) for v in vectors]
    if not rows:
        return None
    total = np.sum(np.stack(rows), axis=0)
    norm = float(np.linalg.norm(total))
    return None if norm == 0 else (total / norm).astype(np.float32)


def episode_centroid(episodes: Sequence[Episode]) -> Vector | None:
    return centroid(decode_vector(e.centroid) for e in episodes if e.centroid)


def rank_related(
    session_id: str,
    centroids: dict[str, Vector | None],
    subjects: dict[str, set[str]],
    *,
    limit: int,
    min_score: float = 0.0,
) -> list[RelatedSession]:
    """Other sessions by 0.7 x centroid cosine + 0.3 x Jaccard of fact subjects."""
    own = centroids.get(session_id)
    own_subjects = subjects.get(session_id, set())
    out: list[RelatedSession] = []
    for other, vector in centroids.items():
        if other == session_id:
            continue
        sim = float(own @ vector) if own is not None and vector is not None else 0.0
        theirs = subjects.get(other, set())
        shared = own_subjects & theirs
        union = own_subjects | theirs
        jaccard = len(shared) / len(union) if union else 0.0
        score = CENTROID_WEIGHT * max(sim, 0.0) + SUBJECT_WEIGHT * jaccard
        if score > min_score:
            out.append(RelatedSession(session_id=other, score=round(score, 4),
                                      similarity=round(sim, 4),
                                      shared_subjects=sorted(shared)))
    out.sort(key=lambda r: (-r.score, r.session_id))
    return out[:limit]
