"""A session's timeline as one agent of one namespace may see it.

`MemoryClient.build_timeline` (turns, episode closes, fact changes) knows no scopes; this
keeps only the events whose turn, episode or fact the caller's scope admits.
"""

from collections.abc import Sequence

from hivemem.domain.scope import Scope
from hivemem.domain.timeline import TimelineEvent
from hivemem.producer.client import MemoryClient


def scoped_timeline(
    client: MemoryClient, session_id: str, access: Scope, *,
    kinds: Sequence[str] | None = None, limit: int | None = None,
) -> list[TimelineEvent]:
    client.check_session(session_id, access.namespace)
    events = client.build_timeline([session_id], kinds=kinds)
    wanted = {e.kind for e in events}
    visible: set[tuple[str, str]] = set()
    if "turn" in wanted:
        visible |= {("turn", t.turn_id) for t in client.vector_store().iter_turns(session_id)
                    if access.admits(t.namespace, t.visibility, t.agent_id)}
    if "episode" in wanted:
        visible |= {("episode", e.episode_id) for e in client.episodes(session_id)
                    if access.admits(e.namespace, e.visibility, e.agent_id)}
    if "fact" in wanted:
        facts = client.facts(session_id, include_history=True, agent_id=access.agent_id,
                             namespace=access.namespace)
        visible |= {("fact", f.fact_id) for f in facts}
    kept = [e for e in events if (e.kind, e.ref_id) in visible]
    return kept[-limit:] if limit else kept
