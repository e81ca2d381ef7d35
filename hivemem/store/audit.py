"""The audit log in Redis: one append-only stream per session, never trimmed.

Each entry carries its position in the session's log (`seq`, 1, 2, ...: assigned in the same
script that appends it, so it is gapless and ordered) and the event as JSON.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from typing import Any

from hivemem.domain.audit import AuditEvent
from hivemem.pipeline.messages import AuditEntry
from hivemem.pipeline.topology import Keys, SessionName, session_name
from hivemem.store.redis import Redis, as_text, is_cluster, queue_script, redis_errors
from hivemem.store.scripts import lua

_CHUNK = 500  # events per script call (all of a run's calls go in one MULTI)
_PAGE = 1000



def _event(fields: Any) -> AuditEvent | None:
    decoded = {as_text(k): as_text(v) for k, v in (fields or {}).items()}
    if AuditEntry.EVENT_FIELD not in decoded:
        return None
    return AuditEntry.from_fields(decoded).event


class AuditLog:
    def __init__(self, client: Redis, keys: Keys) -> None:
        self._r = client
        self.keys = keys
        self._append = client.register_script(lua("audit_append"))

    def append(self, events: Sequence[AuditEvent]) -> int:
        """Append atomically (one MULTI for the batch, whatever its size). Returns how many."""
        if not events:
            return 0
        by_session: dict[SessionName, list[str]] = {}
        for event in events:
            name = session_name(event.namespace, event.session_id)
            by_session.setdefault(name, []).append(AuditEntry.body(event))
        with redis_errors("append audit events"):
            # On a cluster a MULTI stays in one slot: one per session there.
            groups = ([by_session] if not is_cluster(self._r)
                      else [{sid: bodies} for sid, bodies in by_session.items()])
            for group in groups:
                pipe = self._r.pipeline(transaction=True)
                for name, bodies in group.items():
                    key = self.keys.session_audit(name)
                    for start in range(0, len(bodies), _CHUNK):
                        args = [AuditEntry.SEQ_FIELD, AuditEntry.EVENT_FIELD,
                                *bodies[start:start + _CHUNK]]
                        queue_script(pipe, self._append, [key], args)
                pipe.execute()
        return len(events)

    def count(self, name: SessionName) -> int:
        with redis_errors("count audit events"):
            return int(self._r.xlen(self.keys.session_audit(name)))

    def iter_events(self, name: SessionName) -> Iterator[AuditEvent]:
        """The session's events, oldest first, read page by page. An event appended twice (a
        retried job names its events the same) is read once, at its first position."""
        return self._paged(name, newest_first=False, page=_PAGE)

    def events(self, name: SessionName) -> list[AuditEvent]:
        return list(self.iter_events(name))

    def newest_first(self, name: SessionName, page: int = _PAGE) -> Iterator[AuditEvent]:
        """The session's events, newest first, read `page` at a time from the log's end
        (a timeline page reads only the newest few). An event appended twice is read once,
        at its last position."""
        return self._paged(name, newest_first=True, page=page)

    def _paged(self, name: SessionName, *, newest_first: bool, page: int) -> Iterator[AuditEvent]:
        key = self.keys.session_audit(name)
        bound = "+" if newest_first else "-"
        seen: set[str] = set()
        while True:
            with redis_errors("read audit events"):
                if newest_first:
                    rows = self._r.xrevrange(key, max=bound, min="-", count=page)
                else:
                    rows = self._r.xrange(key, min=bound, max="+", count=page)
            if not rows:
                return
            for _entry_id, fields in rows:
                event = _event(fields)
                if event is not None and event.event_id not in seen:
                    seen.add(event.event_id)
                    yield event
            if len(rows) < page:
                return
            bound = "(" + as_text(rows[-1][0])

    def visible_events(
        self, name: SessionName, fact_ids: Collection[str]
    ) -> Iterator[AuditEvent]:
        """The session's events about these facts only (the ones a scope may see), each
        naming no other fact than these (`visible`)."""
        for event in self.iter_events(name):
            shown = visible(event, fact_ids)
            if shown is not None:
                yield shown

    def for_fact(self, name: SessionName, fact_id: str) -> list[AuditEvent]:
        """Every event about one fact (it or another fact naming it: merged into, rivals)."""
        return [e for e in self.iter_events(name)
                if e.fact_id == fact_id or fact_id in e.related]

    def event_ids(self, name: SessionName) -> set[str]:
        return {e.event_id for e in self.iter_events(name)}


def visible(event: AuditEvent, fact_ids: Collection[str]) -> AuditEvent | None:
    """The event as a reader who may see only these facts sees it: None when it is about
    another fact; without the ids of facts it may not see, and without its reason when it
    named one."""
    if event.fact_id not in fact_ids:
        return None
    if all(r in fact_ids for r in event.related):
        return event
    # The reason was written about the change, hidden fact included (a private statement
    # superseding a shared fact): it goes with the hidden id.
    return event.model_copy(update={
        "related": [r for r in event.related if r in fact_ids], "reason": ""})
