"""Who may act on a session: a scope acts on its namespace's sessions only; the operator on
every session there is. Either way an unknown session is `NotFound`.

A scope names a session by its id, which means that id in the scope's namespace (the same
id in another namespace is another session, and nothing about it is observable here); the
operator names any session by its internal name (``<namespace>/<id>``, or the bare id of a
``default`` session: `hivemem.domain.names`). Both become the session's `SessionName`, what
every store addresses it by.
"""

from __future__ import annotations

from hivemem.domain.ids import check_id
from hivemem.domain.names import SessionName, check_session_name, session_name
from hivemem.domain.scope import Access, Scope
from hivemem.errors import NotFound
from hivemem.store.sessions import SessionStore
from hivemem.store.state import TurnLog


def name_for(access: Access, session_id: str) -> SessionName:
    """The internal name of the session `access` calls `session_id` (`ValidationError` for
    a malformed id or, from the operator, a malformed name)."""
    if isinstance(access, Scope):
        return session_name(access.namespace, check_id("session_id", session_id))
    return check_session_name("session_id", session_id)


class SessionAccess:
    """Checks a session id against the asking scope before anything is read."""

    def __init__(self, state: TurnLog, sessions: SessionStore) -> None:
        self.state = state
        self.sessions = sessions

    def require(self, access: Access, session_id: str) -> SessionName:
        """The session's internal name, once `session_id` names a session `access` may act
        on (else `NotFound`, or `ValidationError` for a malformed id)."""
        name = name_for(access, session_id)
        if isinstance(access, Scope):
            self.state.check_scope(name, access.namespace, must_exist=True)
        elif not self.sessions.exists(name):
            raise NotFound("session_id", f"unknown session {session_id!r}")
        return name

    def name(self, access: Access, session_id: str) -> SessionName:
        """For writes and reads of a session that may not exist yet: its internal name.
        Never refused for what another namespace holds (its sessions are other sessions)."""
        return name_for(access, session_id)
