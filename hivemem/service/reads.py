"""Recall and the fact list: the read path (`hivemem.recall`) behind the scope checks.

The query model and the vector store open on the first read, so an ingest-only producer
never loads either."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from hivemem.domain import plain_change
from hivemem.domain.fact import Fact
from hivemem.domain.ids import check_id
from hivemem.domain.models import RecallResult
from hivemem.domain.recall.policy import RecallPolicy, resolve_policy
from hivemem.domain.scope import Access, Scope, store_scope
from hivemem.domain.turn import check_budget, check_query
from hivemem.domain.values import drop_cached
from hivemem.errors import ValidationError
from hivemem.recall.recaller import Recaller
from hivemem.service.access import SessionAccess, name_for
from hivemem.service.checks import check_related, lifecycle_statuses
from hivemem.service.parts import Parts
from hivemem.store.vectors.base import VectorStore


class Reads:
    """What a scope may read back: recall over sessions, the facts of a session."""

    def __init__(self, parts: Parts, access: SessionAccess) -> None:
        self.parts = parts
        self.access = access
        self._recaller: Recaller | None = None
        self._lock = threading.Lock()

    def recaller(self) -> Recaller:
        """The read path (built, with the query model and the vector store, on first use)."""
        with self._lock:
            if self._recaller is None:
                parts = self.parts
                embedder = parts.query_embedder
                self._recaller = Recaller(
                    parts.state, parts.episodes, parts.vectors, embedder,
                    reflection=parts.settings.reflection, slots=parts.slot_tables,
                    foreground=parts.foreground,
                )
            return self._recaller

    def drop_caches(self) -> None:
        """Forget what the read path keeps between recalls (known facts, current-state
        views, the texts of recent unreflected turns, speakers): after a forget, nothing
        of what it removed stays in this process. The next recall builds them again."""
        with self._lock:
            # A recall under way finishes on the old one (its helper thread ends with it);
            # the next is built afresh on the same stores.
            self._recaller = None
            self.parts.slot_tables.drop_cache()
            drop_cached()
            plain_change.drop_cached()

    @property
    def opened(self) -> bool:
        """Whether the read side (vector store, query model) was opened."""
        return self._recaller is not None

    def vectors(self) -> VectorStore:
        """The vector store recall reads (opened with the query model on first use)."""
        return self.recaller().vectors

    def recall(
        self, scope: Scope, session_id: str, query: str, token_budget: int | None = None, *,
        preset: str | RecallPolicy | None = None, limit: int | None = None,
        include_history: bool = False, include_archived: bool = False,
        explain: bool = False, related_sessions: Sequence[str] = (),
    ) -> RecallResult:
        """The context that matters for `query` (see `MemoryClient.recall`), as `scope`
        sees it. The session and every related one must be the scope's namespace's (else
        `NotFound`)."""
        check_id("session_id", session_id)
        check_query(query)
        settings = self.parts.settings.recall
        policy = resolve_policy(preset, settings.default_preset)
        budget = check_budget(token_budget, policy.token_budget or settings.default_token_budget)
        if policy.reserve_tokens >= budget:
            raise ValidationError(
                "token_budget", f"must exceed the policy's reserve_tokens ({policy.reserve_tokens})"
            )
        bad_limit = isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0
        if limit is not None and bad_limit:
            raise ValidationError("limit", "must be a positive integer")
        related = check_related(related_sessions)
        # The whole call is foreground, its access checks too: in the embedded mode a check's
        # Redis reply is otherwise waited for behind the pipeline's threads at the default
        # switch interval (5 ms), not the recall's (`hivemem.recall.foreground`).
        with self.parts.foreground.serving():
            return self._recall(scope, session_id, query, budget, policy, limit=limit,
                                include_history=include_history,
                                include_archived=include_archived, explain=explain,
                                related=related)

    def _recall(
        self, scope: Scope, session_id: str, query: str, budget: int, policy: RecallPolicy,
        *, limit: int | None, include_history: bool, include_archived: bool, explain: bool,
        related: Sequence[str],
    ) -> RecallResult:
        # A scope's own session alone: its check rides in the recall's first Redis read
        # (`check_owner`), beside the query's embedding, not in a round trip before it.
        check_owner = not related
        for sid in (session_id, *related):
            if check_owner:
                name_for(scope, sid)  # (a malformed id is refused before anything is read)
            else:
                self.access.require(scope, sid)
        updates: dict[str, Any] = {}
        if limit is not None:
            updates["limit"] = limit
        if include_history:
            updates["include_history"] = True
        if include_archived:  # archived facts (compacted or retracted), ranked as history
            updates["include_archived"] = True
        if updates:
            policy = policy.model_copy(update=updates)
        return self.recaller().recall(
            session_id, query, budget, policy,
            related_sessions=related, explain=bool(explain), access=scope,
            check_owner=check_owner,
        )

    def facts(
        self, access: Access, session_id: str, *, include_history: bool = False,
        include_inactive: bool = False, include_archived: bool = False,
    ) -> list[Fact]:
        """The session's facts `access` may see, oldest first: current ones (active,
        conflicted), plus superseded (`include_inactive`) and archived (`include_archived`)
        ones; `include_history`: every version and status."""
        name = self.access.require(access, session_id)
        statuses = None if include_history else lifecycle_statuses(
            include_inactive=include_inactive, include_archived=include_archived)
        return self.vectors().list_facts(name, statuses, store_scope(access))

    def close(self) -> None:
        if self._recaller is not None:
            self._recaller.close()
