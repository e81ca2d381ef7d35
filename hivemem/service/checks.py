"""Argument checks the service's operations share (pure: a bad value is a
`ValidationError` naming the field, before anything is read or written)."""

from __future__ import annotations

from collections.abc import Sequence

from hivemem.domain.fact import VISIBLE, FactStatus
from hivemem.domain.ids import check_id
from hivemem.domain.timeline import KINDS
from hivemem.errors import ValidationError

TITLE_MAX = 200


def check_title(title: object) -> str:
    if not isinstance(title, str) or not title.strip() or len(title) > TITLE_MAX:
        raise ValidationError("title", f"must be 1-{TITLE_MAX} characters")
    return title.strip()


def check_related(related_sessions: Sequence[str]) -> list[str]:
    """Recall's `related_sessions`: a list of ids (a lone string is refused rather than read
    as its characters)."""
    if isinstance(related_sessions, str):
        raise ValidationError("related_sessions", "must be a list of session ids")
    return [check_id("related_sessions", other) for other in related_sessions]


def check_kinds(kinds: Sequence[str] | None) -> list[str]:
    chosen = list(kinds or KINDS)
    for kind in chosen:
        if kind not in KINDS:
            raise ValidationError("kinds", f"unknown kind {kind!r}; one of {list(KINDS)}")
    return chosen


def check_limit(limit: object, field: str = "limit") -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
        raise ValidationError(field, "must be a positive integer")
    return limit


def check_session_ids(session_ids: Sequence[str] | str) -> list[str]:
    """One or more session ids (a lone string is one id)."""
    ids = [session_ids] if isinstance(session_ids, str) else list(session_ids)
    if not ids:
        raise ValidationError("session_ids", "name at least one session")
    return [check_id("session_id", sid) for sid in ids]


def lifecycle_statuses(*, include_inactive: bool = False,
                       include_archived: bool = False) -> list[str]:
    """Fact statuses to list: current ones (active, conflicted), plus what was asked for."""
    statuses = [s.value for s in VISIBLE]
    if include_inactive:
        statuses.append(FactStatus.SUPERSEDED.value)
    if include_archived:
        statuses.append(FactStatus.ARCHIVED.value)
    return statuses
