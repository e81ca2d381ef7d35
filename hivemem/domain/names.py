"""A session's internal name: the one place its namespace and id are joined.

The same session id in two namespaces is two sessions. Everything that addresses a session
in the pipeline (its Redis keys, its partition, its vector points' ids, the entries that
carry no turn) uses its internal name: ``default``'s sessions keep their bare id (``s1``), so
what was written before namespaces keeps its keys; another namespace's session is
``<namespace>/<session id>``. ``/`` occurs in neither part (`hivemem.domain.ids`), so a name
is unambiguous and never equals a bare id.
"""

from __future__ import annotations

from typing import NewType

from hivemem.domain.ids import check_id
from hivemem.domain.scope import DEFAULT_NAMESPACE

# A session's internal name (`Keys.session_name`): what its keys, partition and point ids are
# derived from. A type of its own so that no caller can build a key from a bare session id.
SessionName = NewType("SessionName", str)
NAME_SEPARATOR = "/"


def session_name(namespace: str, session_id: str) -> SessionName:
    """The internal name of `namespace`'s session `session_id` (see the module doc)."""
    if namespace == DEFAULT_NAMESPACE:
        return SessionName(session_id)
    return SessionName(f"{namespace}{NAME_SEPARATOR}{session_id}")


def split_session_name(name: str) -> tuple[str, str]:
    """(namespace, session id) of an internal name: `session_name`'s inverse."""
    namespace, sep, session_id = name.partition(NAME_SEPARATOR)
    if not sep:
        return DEFAULT_NAMESPACE, name
    return namespace, session_id


def check_session_name(field: str, value: object) -> SessionName:
    """An internal name as the operator gives one (``<namespace>/<id>``, or a bare id:
    ``default``'s), each part checked as an id (`ValidationError` naming `field`)."""
    if not isinstance(value, str):
        check_id(field, value)  # raises: not a string
        raise AssertionError  # unreachable
    namespace, sep, session_id = value.partition(NAME_SEPARATOR)
    if not sep:
        return session_name(DEFAULT_NAMESPACE, check_id(field, value))
    return session_name(check_id(field, namespace), check_id(field, session_id))
