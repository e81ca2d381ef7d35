"""A served embedded store for the browser tests: a real embedded folder (its own valkey
child, qdrant-edge, worker threads, the hashing embedder) behind the real app on a free
loopback port, with two namespaces and two agents.

team-a / session "launch": shared turns of alice and bob, one private turn of each, a
decision that is later changed (a version chain), closed episodes and their facts.
team-a / session "long-run": 130 turns of alice, more than one timeline page.
team-a / session "tidy-up": a reflected episode whose facts compaction would move between
layers (the browser applies its compaction).
team-a / session "ingest-errors": a shared turn of alice and a private one of bob, each also
dead-lettered by the embed stage (as a worker that gave up on them would leave them: the
turns are embedded already, so a replay writes them again, unchanged).
team-b / session "elsewhere": another namespace's memory that no team-a key may read.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from support.live_api import LiveServer

from hivemem import MemoryClient
from hivemem.api import create_app
from hivemem.config import Settings
from hivemem.domain.models import Turn
from hivemem.pipeline.messages import TurnEntry
from hivemem.providers.embedders import HashingEmbedder
from hivemem.store.stream_entries import StreamEntry
from hivemem.store.streams import StreamStore

DIM = 64
SESSION = "launch"
OTHER_SESSION = "elsewhere"
LONG_SESSION = "long-run"
LONG_TURNS = 130  # more than one timeline page (100 events)
COMPACT_SESSION = "tidy-up"
DEAD_SESSION = "ingest-errors"
DEAD_ERROR = "qdrant refused the point: payload too large (injected by the browser tests)"
ALICE_POISON = "alice: the embedder choked on this turn"
BOB_POISON = "bob-private-poison: my locker code is 4711"
ALICE_SECRET = "alice-private-note: my badge PIN is kept in the blue notebook"
BOB_SECRET = "bob-private-note: I prefer the night shift on Fridays"
TEAM_B_TEXT = "team-b only: the warehouse moves to Rotterdam in spring"


@dataclass
class Served:
    url: str
    client: MemoryClient
    namespace_key: str  # team-a, any agent
    alice_key: str      # team-a, acts as alice only
    bob_key: str        # team-a, acts as bob only
    team_b_key: str     # team-b


def _fill(client: MemoryClient) -> None:
    alice = client.scoped(namespace="team-a", agent_id="alice")
    bob = client.scoped(namespace="team-a", agent_id="bob")
    alice.ingest(SESSION, "user", "We decided to use Postgres 16 as the primary database",
                 markers=["decision"])
    alice.set_session_info(SESSION, title="Launch planning")
    bob.ingest(SESSION, "assistant", "Agreed: Postgres 16 it is, decision recorded")
    alice.ingest(SESSION, "user", ALICE_SECRET, visibility="private")
    bob.ingest(SESSION, "user", BOB_SECRET, visibility="private")
    alice.close_episode(SESSION)
    alice.wait_until_reflected(SESSION, 60)
    alice.ingest(SESSION, "user",
                 "Change of plan: we decided to use MySQL 8 as the primary database instead",
                 markers=["decision"])
    bob.ingest(SESSION, "assistant", "Agreed: MySQL 8 replaces Postgres, decision recorded")
    bob.ingest(SESSION, "user", "The launch goal is the first of March", markers=["goal"])
    alice.close_episode(SESSION)
    alice.wait_until_reflected(SESSION, 60)
    alice.wait_until_processed(SESSION, 60)
    alice.ingest_many([{"session_id": LONG_SESSION, "role": "user",
                        "content": f"progress note {i:03d}: step {i} of the migration"}
                       for i in range(LONG_TURNS)])
    alice.wait_until_processed(LONG_SESSION, 120)
    alice.wait_until_reflected(LONG_SESSION, 120)
    alice.ingest(COMPACT_SESSION, "user", "We decided to keep the deploy runbook in the wiki",
                 markers=["decision"])
    bob.ingest(COMPACT_SESSION, "assistant", "Agreed: the runbook lives in the wiki")
    bob.ingest(COMPACT_SESSION, "user", "The oncall goal is two people per week",
               markers=["goal"])
    alice.close_episode(COMPACT_SESSION)
    alice.wait_until_reflected(COMPACT_SESSION, 60)
    _dead_letters(client, [alice.ingest(DEAD_SESSION, "user", ALICE_POISON),
                           bob.ingest(DEAD_SESSION, "user", BOB_POISON,
                                      visibility="private")])
    other = client.scoped(namespace="team-b", agent_id="carol")
    other.ingest(OTHER_SESSION, "user", TEAM_B_TEXT)
    other.wait_until_processed(OTHER_SESSION, 60)


def _dead_letters(client: MemoryClient, turns: list[Turn]) -> None:
    """The turns' entries on the embed stage's dead-letter stream, as its worker leaves
    them after giving up (once the turns are processed: the worker must not race this)."""
    keys = client.keys
    client.scoped(namespace="team-a").wait_until_processed(DEAD_SESSION, 60)
    streams = StreamStore(client._redis, keys)  # noqa: SLF001 (the store's own Redis)
    for turn in turns:
        stream = keys.turns_stream(keys.partition(turn.session_id))
        entry = StreamEntry(entry_id=f"1-{turn.seq}", fields=TurnEntry(turn=turn).to_fields(),
                            stream=stream)
        streams.dead_letter(stream, "embed", entry, DEAD_ERROR, 5)


@contextmanager
def served_store(folder: Path) -> Iterator[Served]:
    settings = Settings.model_validate({"embedding": {"provider": "hashing", "dim": DIM}})
    client = MemoryClient.local(folder, settings, embedder=HashingEmbedder(DIM), workers=1)
    try:
        keys = client.admin.api_keys()
        namespace_key, _ = keys.create("team-a", "browser tests")
        alice_key, _ = keys.create("team-a", "browser tests", agent_id="alice")
        bob_key, _ = keys.create("team-a", "browser tests", agent_id="bob")
        team_b_key, _ = keys.create("team-b", "browser tests")
        _fill(client)
        with LiveServer(create_app(settings, client=client)) as server:
            yield Served(server.url, client, namespace_key, alice_key, bob_key, team_b_key)
    finally:
        client.close()
