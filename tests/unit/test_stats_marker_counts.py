"""A scope's marker counts: the pipeline's counters when the session has no private turn
(nothing is hidden from the scope), counted over what the scope may read otherwise."""

from __future__ import annotations

from hivemem import MemoryClient, Settings
from hivemem.domain.names import session_name
from hivemem.providers.embedders import HashingEmbedder
from hivemem.store.state import TurnLog
from hivemem.store.streams import StreamStore
from hivemem.store.vectors.server import ServerVectorStore
from hivemem.testing import connect_fake, fake_server
from hivemem.workers.embed import EmbedHandler, embed_kind
from hivemem.workers.stream import StreamWorker

EMB = HashingEmbedder(64)


def test_marker_counts_read_the_counters_unless_a_turn_is_private() -> None:
    settings = Settings.model_validate({"embedding": {"provider": "hashing", "dim": EMB.dim},
                                        "worker": {"block_ms": 50}})
    redis = connect_fake(fake_server())
    vectors = ServerVectorStore(settings.qdrant, EMB.dim, location=":memory:")
    client = MemoryClient(settings, redis_client=redis, vector_store=vectors, embedder=EMB)
    keys = client.keys
    alice = client.scoped(namespace="a", agent_id="alice")
    reader = client.scoped(namespace="a")

    def embed() -> None:
        state = TurnLog(redis, keys, settings.ingest.recent_window)
        StreamWorker(embed_kind(EmbedHandler(EMB, vectors, state, StreamStore(redis, keys),
                                             keys)),
                     StreamStore(redis, keys), settings.worker).run(burst=True)

    try:
        for i in range(3):
            alice.ingest("s", "user", f"we decided item {i}", markers=["decision"])
        embed()
        # What the boundary stage would have counted (this world runs none): a number the
        # vector store cannot give, to see where the answer comes from.
        redis.hset(keys.boundary_state(session_name("a", "s")), mapping={"marker:decision": 30})
        assert reader.get_session_stats("s").markers == {"decision": 30}
        alice.ingest("s", "user", "my own decision", markers=["decision"],
                     visibility="private")
        embed()
        redis.hset(keys.boundary_state(session_name("a", "s")), mapping={"marker:decision": 4})
        # A private turn: each marker is counted over what the scope may read.
        assert reader.get_session_stats("s").markers == {"decision": 3}
        assert alice.get_session_stats("s").markers == {"decision": 4}
    finally:
        client.close()
