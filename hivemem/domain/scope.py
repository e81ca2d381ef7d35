"""Who may see a memory: a namespace (tenant or team), an agent and a visibility (pure).

Every turn, episode and fact carries ``namespace``, ``agent_id`` and ``visibility``:
``shared`` memories are seen by every agent of the namespace, ``private`` ones only by the
agent that wrote them. Nothing ever crosses namespaces. A `Scope` is who is asking; the
vector store turns it into a payload filter (`hivemem.store.vectors.base`), and Redis reads
filter with `Scope.allows`, so the rule lives in the store layer, not with callers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from hivemem.domain.ids import check_id
from hivemem.errors import ValidationError

Visibility = Literal["private", "shared"]
VISIBILITIES: tuple[str, ...] = ("private", "shared")
DEFAULT_NAMESPACE = "default"
SHARED: Visibility = "shared"
PRIVATE: Visibility = "private"


@dataclass(frozen=True, slots=True)
class Scope:
    """An agent asking for memories: its own plus the shared ones of its namespace.

    ``agent_id=None`` sees only shared memories. Records written before scopes existed
    carry no namespace or visibility: they count as ``default`` and ``shared``.
    """

    namespace: str = DEFAULT_NAMESPACE
    agent_id: str | None = None

    def allows(self, record: Mapping[str, Any]) -> bool:
        """Whether a stored record (payload, turn JSON, fact dump) is visible to this scope."""
        return self.admits(
            record.get("namespace"), record.get("visibility"), record.get("agent_id")
        )

    def admits(self, namespace: object, visibility: object, agent_id: object) -> bool:
        if (namespace or DEFAULT_NAMESPACE) != self.namespace:
            return False
        if (visibility or SHARED) == SHARED:
            return True
        return self.agent_id is not None and agent_id == self.agent_id


@dataclass(frozen=True, slots=True)
class OperatorScope:
    """The operator's view: every namespace and every agent. Only `Admin` holds it; the
    service never reads an absent scope as this one (there is no default)."""

    def __repr__(self) -> str:
        return "OperatorScope()"


OPERATOR = OperatorScope()
# Who asks the service: one agent of one namespace, or the operator.
Access = Scope | OperatorScope


def store_scope(access: Access) -> Scope | None:
    """The stores' filter for `access` (None: unfiltered, the operator's)."""
    return None if isinstance(access, OperatorScope) else access


def check_visibility(value: object) -> Visibility:
    if value == SHARED:
        return SHARED
    if value == PRIVATE:
        return PRIVATE
    raise ValidationError("visibility", f"must be 'private' or 'shared', got {value!r}")


def check_namespace(value: object) -> str:
    if value is None:
        return DEFAULT_NAMESPACE
    return check_id("namespace", value)


def scope_for(namespace: object = None, agent_id: object = None) -> Scope:
    """A validated scope (``ValidationError`` on a bad namespace or agent id)."""
    agent = None if agent_id is None else check_id("agent_id", agent_id)
    return Scope(check_namespace(namespace), agent)


@dataclass(frozen=True, slots=True)
class Owner:
    """Whose a derived memory (an episode, a fact) is."""

    visibility: Visibility
    agent_id: str | None


def owner_of(records: Iterable[Mapping[str, Any]]) -> Owner:
    """A memory derived from these records is private when any of them is, so it never
    shows a private turn to another agent: private to that agent when all the private ones
    are one agent's, else to nobody (``agent_id=None``: only the records stay visible)."""
    private_agents = {
        r.get("agent_id") for r in records if (r.get("visibility") or SHARED) == PRIVATE
    }
    if not private_agents:
        return Owner(SHARED, None)
    if len(private_agents) == 1:
        (agent,) = private_agents
        return Owner(PRIVATE, agent if isinstance(agent, str) else None)
    return Owner(PRIVATE, None)
