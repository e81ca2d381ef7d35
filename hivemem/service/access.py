"""Who may act on a session: a scope acts on its namespace's sessions only; the operator on
every session there is. Either way an unknown session is `NotFound` (and another
namespace's session looks exactly like an unknown one)."""

from __future__ import annotations

from hivemem.domain.ids import check_id
from hivemem.domain.scope import Access, Scope
from hivemem.errors import NotFound
from hivemem.store.sessions import SessionStore
from hivemem.store.state import TurnLog


class SessionAccess:
    """Checks a session id against the asking scope before anything is read."""

    def __init__(self, state: TurnLog, sessions: SessionStore) -> None:
        self.state = state
        self.sessions = sessions

    def require(self, access: Access, session_id: str) -> str:
        """The session id, once it names a session `access` may act on (else `NotFound`,
        or `ValidationError` for a malformed id)."""
        check_id("session_id", session_id)
        if isinstance(access, Scope):
            self.state.check_scope(session_id, access.namespace, must_exist=True)
        elif not self.sessions.exists(session_id):
            raise NotFound("session_id", f"unknown session {session_id!r}")
        return session_id

    def check_namespace(self, access: Access, session_id: str) -> None:
        """For writes and reads of a session that may not exist yet: refused only when it
        is another namespace's."""
        if isinstance(access, Scope):
            self.state.check_scope(session_id, access.namespace)
