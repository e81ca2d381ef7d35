"""Fact ids as the CLI prints them: the first 12 characters (`compact`, tables) stand for the
whole id, like a short git hash. A unique prefix resolves to its fact; an unknown or an
ambiguous one is `NotFound` saying which, before any command acts on it."""

from __future__ import annotations

import uuid

from hivemem.domain.ids import check_id
from hivemem.errors import NotFound
from hivemem.producer.client import MemoryClient

SHORT = 12  # how many characters of a fact id the tables print
MIN_PREFIX = 4


def short(fact_id: str) -> str:
    return fact_id[:SHORT]


def _is_full(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def resolve_fact_id(client: MemoryClient, given: str, field: str = "fact_id") -> str:
    """The full id of the fact `given` names (a full id, or a unique prefix of one)."""
    check_id(field, given)
    if _is_full(given) and client.admin.get_fact(given) is not None:
        return given
    if len(given) < MIN_PREFIX:
        raise NotFound(field, f"{given!r} is too short: give at least {MIN_PREFIX} characters"
                       " of the fact id")
    admin = client.admin
    matches: set[str] = set()
    for session_id in admin.sessions():
        for fact in admin.facts(session_id, include_history=True, include_inactive=True,
                                include_archived=True):
            if fact.fact_id.startswith(given):
                matches.add(fact.fact_id)
    if not matches:
        raise NotFound(field, f"no fact id starts with {given!r}")
    if len(matches) > 1:
        shown = ", ".join(short(m) for m in sorted(matches)[:5])
        raise NotFound(field, f"{given!r} is ambiguous: {len(matches)} facts start with it"
                       f" ({shown}); give more characters")
    return matches.pop()
