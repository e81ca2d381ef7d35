"""The producer SDK on fakeredis and on a real redis-server (same tests, two backends)."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime

import pytest
import redis

from hivemem import MemoryClient, Settings, ValidationError
from hivemem.config import RedisSettings
from hivemem.errors import NotFound, ProcessingTimeout, StoreUnavailable
from hivemem.store.redis import connect
from tests.support.streams import turn_entries, turns_len


@pytest.fixture
def client(redis_client: redis.Redis, settings: Settings) -> MemoryClient:
    return MemoryClient(settings, redis_client=redis_client)


def test_ingest_assigns_sequence_and_enqueues(
    client: MemoryClient, redis_client: redis.Redis
) -> None:
    ts = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    first = client.ingest("s1", "user", "hello", agent_id="a1", markers=["goal"],
                          metadata={"k": "v"}, timestamp=ts)
    second = client.ingest("s1", "assistant", "hi")
    other = client.ingest("s2", "user", "elsewhere")
    assert (first.seq, second.seq, other.seq) == (1, 2, 1)
    assert not first.duplicate
    entries = turn_entries(redis_client, client.keys)
    assert len(entries) == 3
    fields = {k.decode(): v.decode() for k, v in entries[0][1].items()}
    assert fields["seq"] == "1"
    payload = json.loads(fields["turn"])
    assert payload["content"] == "hello" and payload["agent_id"] == "a1"
    assert payload["markers"] == ["goal"] and payload["metadata"] == {"k": "v"}
    assert datetime.fromisoformat(payload["timestamp"]) == ts


def test_repeated_turn_id_is_a_noop(client: MemoryClient, redis_client: redis.Redis) -> None:
    a = client.ingest("s1", "user", "hello", turn_id="t-1")
    b = client.ingest("s1", "user", "hello again", turn_id="t-1")
    assert b.duplicate and b.seq == a.seq == 1
    assert turns_len(redis_client, client.keys) == 1
    assert client.get_session_stats("s1").turns_enqueued == 1
    # The same id in another session is another turn.
    assert not client.ingest("s2", "user", "hello", turn_id="t-1").duplicate


def test_bad_input_writes_nothing(client: MemoryClient, redis_client: redis.Redis) -> None:
    with pytest.raises(ValidationError) as info:
        client.ingest("s1", "user", "   ")
    assert info.value.field == "content"
    with pytest.raises(ValidationError):
        client.ingest("s1", "wizard", "hello")
    assert redis_client.dbsize() == 0


def test_ingest_many_validates_all_first(client: MemoryClient, redis_client: redis.Redis) -> None:
    good = {"session_id": "s1", "role": "user", "content": "ok"}
    bad = {"session_id": "s1", "role": "user", "content": ""}
    with pytest.raises(ValidationError) as info:
        client.ingest_many([good, good, bad])
    assert info.value.field == "turns[2].content"
    assert redis_client.dbsize() == 0
    with pytest.raises(ValidationError) as info:
        client.ingest_many([{"session_id": "s1", "role": "user"}])
    assert info.value.field == "turns[0].content"
    with pytest.raises(ValidationError) as info:
        client.ingest_many([{**good, "colour": "red"}])
    assert info.value.field == "turns[0]"


def test_ingest_many_pipelines_with_idempotency(client: MemoryClient) -> None:
    turns = client.ingest_many(
        [{"session_id": "s1", "role": "user", "content": f"t{i}", "turn_id": f"id{i % 5}"}
         for i in range(10)]
    )
    assert [t.seq for t in turns] == [1, 2, 3, 4, 5, 1, 2, 3, 4, 5]
    assert [t.duplicate for t in turns] == [False] * 5 + [True] * 5


def test_concurrent_producers_get_unique_gapless_seqs(
    client: MemoryClient, redis_client: redis.Redis, settings: Settings
) -> None:
    seqs: list[int] = []
    lock = threading.Lock()

    def produce(n: int) -> None:
        for i in range(50):
            t = client.ingest("shared", "user", f"agent {n} turn {i}", agent_id=f"a{n}")
            with lock:
                seqs.append(t.seq)

    threads = [threading.Thread(target=produce, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(seqs) == list(range(1, 201))
    # Stream order agrees with seq order for the session.
    stream_seqs = [int(f[b"seq"]) for _, f in turn_entries(redis_client, client.keys)]
    assert stream_seqs == sorted(stream_seqs)


def test_stats_and_wait_timeout(client: MemoryClient) -> None:
    client.ingest("s1", "user", "one", timestamp=datetime(2026, 1, 1, tzinfo=UTC))
    client.ingest("s1", "user", "two", timestamp=datetime(2026, 1, 2, tzinfo=UTC))
    stats = client.get_session_stats("s1")
    assert stats.turns_enqueued == 2 and stats.turns_processed == 0 and stats.turns_pending == 2
    assert stats.first_activity == datetime(2026, 1, 1, tzinfo=UTC)
    assert stats.last_activity == datetime(2026, 1, 2, tzinfo=UTC)
    with pytest.raises(ProcessingTimeout) as info:
        client.wait_until_processed("s1", timeout=0.05)
    assert info.value.target == 2
    # A session nobody wrote to is unknown, like everywhere else.
    with pytest.raises(NotFound):
        client.wait_until_processed("empty", timeout=0.01)


def test_recent_window_is_bounded(redis_client: redis.Redis, settings: Settings) -> None:
    ingest = settings.ingest.model_copy(update={"recent_window": 5})
    s = settings.model_copy(update={"ingest": ingest})
    client = MemoryClient(s, redis_client=redis_client)
    for i in range(12):
        client.ingest("s1", "user", f"turn {i}")
    recent = client._state.recent_turns("s1", 100)
    assert [t.seq for t in recent] == [12, 11, 10, 9, 8]
    assert recent[0].content == "turn 11"


def test_unreachable_redis_is_a_clear_error() -> None:
    with pytest.raises(StoreUnavailable) as info:
        connect(RedisSettings(url="redis://user:pw@127.0.0.1:1/0", connect_timeout=0.5))
    assert "redis" in str(info.value)
    assert "pw" not in str(info.value)


def test_unreachable_qdrant_is_a_clear_error() -> None:
    from hivemem.config import QdrantSettings
    from hivemem.store.vectors.server import ServerVectorStore

    with pytest.raises(StoreUnavailable) as info:
        # open_timeout_s: do not ride out the "outage" for the default 60 s.
        unreachable = QdrantSettings(url="http://127.0.0.1:1", timeout=1, open_timeout_s=0.3)
        ServerVectorStore(unreachable, 8)
    assert info.value.store == "qdrant"


def test_state_rebuilds_from_qdrant(redis_client: redis.Redis, settings: Settings) -> None:
    from hivemem.providers.embedders import HashingEmbedder
    from hivemem.store.rebuild import rebuild_state
    from hivemem.store.state import TurnLog
    from hivemem.store.streams import StreamStore
    from hivemem.store.vectors.server import ServerVectorStore
    from hivemem.workers.embed import EmbedHandler, embed_kind
    from hivemem.workers.stream import StreamWorker

    emb = HashingEmbedder(32)
    vectors = ServerVectorStore(settings.qdrant, emb.dim, location=":memory:")
    client = MemoryClient(settings, redis_client=redis_client, vector_store=vectors, embedder=emb)
    for i in range(15):
        client.ingest("s1", "user", f"turn {i}", turn_id=f"id{i}")
    client.ingest("s2", "user", "other")
    state = TurnLog(redis_client, client.keys, settings.ingest.recent_window)
    streams = StreamStore(redis_client, client.keys)
    StreamWorker(embed_kind(EmbedHandler(emb, vectors, state, streams, client.keys)),
                 StreamStore(redis_client, client.keys), settings.worker).run(burst=True)
    before = client._state.recent_turns("s1", 50)
    redis_client.flushall()  # Redis lost everything
    assert rebuild_state(state, vectors) == 2
    stats = client.get_session_stats("s1")
    assert stats.turns_enqueued == stats.turns_processed == 15
    assert client._state.recent_turns("s1", 50) == before
    assert client.ingest("s1", "user", "again", turn_id="id3").duplicate
    assert client.ingest("s1", "user", "next").seq == 16
    assert client.admin.sessions() == ["s1", "s2"]
    # Rebuilding over a live window (embedded mode reopening) keeps one entry per turn, even
    # when the stored version differs from the ingested one (detected markers).
    client.ingest("s1", "user", "Decision: we ship on Friday", turn_id="marked")
    StreamWorker(embed_kind(EmbedHandler(emb, vectors, state, streams, client.keys)),
                 StreamStore(redis_client, client.keys), settings.worker).run(burst=True)
    rebuild_state(state, vectors)
    seqs = [t.seq for t in client._state.recent_turns("s1", 50)]
    assert len(seqs) == len(set(seqs)) == 17
    marked = next(t for t in client._state.recent_turns("s1", 50) if t.turn_id == "marked")
    assert "decision" in marked.markers
