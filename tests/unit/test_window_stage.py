"""The window stage (`window_mode: refined`): the embed stage writes mean windows, and the
window stage, a second consumer group on the embedded stream, embeds them again from text
while the embed stage has nothing waiting; on a real redis-server with the real workers."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from hivemem import MemoryClient, Settings
from hivemem.pipeline.topology import Topology
from hivemem.providers.embedders import HashingEmbedder
from hivemem.runtime.runner import _window_beside_embed
from hivemem.runtime.wiring import Wiring
from hivemem.store.status import StageActivity, stage_backlog
from hivemem.store.vectors.server import ServerVectorStore
from hivemem.workers.window import QUIET_MS, WINDOW_CHUNK

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
TEXTS = ["which database for billing", "postgres, definitely", "agreed",
         "ship it friday", "and the cache?", "redis"]


def _setup(redis_server: Any, settings: Settings, mode: str = "refined", *,
           fresh: bool = True) -> tuple[MemoryClient, Wiring, HashingEmbedder, Any]:
    """A client and a wiring on the test server (emptied first unless `fresh` is off)."""
    base = redis_server.client()
    if fresh:
        base.flushall()
    settings = settings.model_copy(update={"embedding": settings.embedding.model_copy(
        update={"window_mode": mode})})
    emb = HashingEmbedder(256)
    vectors = ServerVectorStore(settings.qdrant, emb.dim, location=":memory:")
    client = MemoryClient(settings, redis_client=base, vector_store=vectors, embedder=emb)
    wiring = Wiring(settings, redis=base, vectors=vectors, embedder=emb)
    return client, wiring, emb, vectors


def _ingest(client: MemoryClient, session: str, texts: list[str], start: int = 0) -> None:
    for i, text in enumerate(texts, start):
        client.ingest(session, "user" if i % 2 == 0 else "assistant", text,
                      timestamp=T0 + timedelta(seconds=i))


def _windows(vectors: Any, session: str, n: int) -> dict[int, np.ndarray]:
    return {h.seq: h.window for h in vectors.turns_by_seq(session, list(range(1, n + 1)),
                                                             with_windows=True)}


def test_mean_windows_at_once_then_text_windows_from_the_window_stage(
    redis_server: Any, settings: Settings
) -> None:
    client, wiring, emb, vectors = _setup(redis_server, settings)
    _ingest(client, "s", TEXTS)
    wiring.embed_worker().run(burst=True)
    own = {h.seq: h.vector for h in vectors.turns_by_seq("s", list(range(1, 7)),
                                                         with_vectors=True)}
    mean = _windows(vectors, "s", 6)
    total = own[1] + own[2] + own[3]
    assert np.allclose(mean[3], total / np.linalg.norm(total), atol=1e-3)  # the mean first
    window = Topology(wiring.keys).window
    assert stage_backlog(wiring.redis, window) > 0
    report = wiring.window_worker().run(burst=True)
    assert report.handled >= 1 and report.dead_lettered == 0
    assert stage_backlog(wiring.redis, window) == 0
    refined = _windows(vectors, "s", 6)
    assert np.allclose(refined[1], own[1], atol=1e-3)  # nothing before it: its own vector
    expected = emb.embed_documents(["\n".join(TEXTS[max(0, i - 2):i + 1]) for i in range(1, 6)])
    for seq, row in zip(range(2, 7), expected, strict=True):
        assert np.allclose(refined[seq], row, atol=1e-3), seq
        assert not np.allclose(refined[seq], mean[seq], atol=1e-3), seq
    # The rest of the point is as the embed stage wrote it: dense vector, BM25, payload.
    again = vectors.turns_by_seq("s", list(range(1, 7)), with_vectors=True)
    assert all(np.allclose(h.vector, own[h.seq]) for h in again)
    assert [h.turn.content for h in sorted(again, key=lambda h: h.seq)] == TEXTS
    lexical = vectors.search_turns_lexical("s", wiring_lexical_query("postgres"), 3)
    assert lexical and lexical[0].seq == 2
    # The boundary stage reads the same entries through its own group, untouched.
    wiring.boundary_worker().run(burst=True)
    assert client.get_session_stats("s").turns_assigned == 6
    client.close()


def wiring_lexical_query(text: str) -> Any:
    from hivemem.providers.lexical import LexicalEncoder

    return LexicalEncoder().query(text)


def test_the_window_stage_waits_while_the_embed_stage_has_work(
    redis_server: Any, settings: Settings
) -> None:
    client, wiring, _emb, _vectors = _setup(redis_server, settings)
    _ingest(client, "s", TEXTS[:3])
    wiring.embed_worker().run(burst=True)
    _ingest(client, "s", TEXTS[3:], start=3)  # queued, not embedded: the embed stage is busy
    window = wiring.window_worker()
    window.streams.ensure_groups(list(window.kind.streams), window.kind.group)
    window._refresh()
    for _ in range(3):
        assert window.step() == 0  # not ready: reads nothing
    assert stage_backlog(wiring.redis, Topology(wiring.keys).window) > 0
    wiring.embed_worker().run(burst=True)
    handler: Any = window.kind.handle
    real_activity = handler.embed_activity
    # Nothing waiting, but a turn handed to it less than QUIET_MS ago: not yet.
    handler.embed_activity = lambda: StageActivity(backlog=0, idle_ms=QUIET_MS - 100)
    assert window.step() == 0
    handler.embed_activity = real_activity
    time.sleep(QUIET_MS / 1000 + 0.1)
    # A reflect job waiting (or running) goes first as well.
    queue = f"rq:queue:{settings.episodes.reflect_queue}"
    wiring.queue_redis.rpush(queue, "a-job-id")
    assert window.step() == 0
    wiring.queue_redis.delete(queue)
    assert window.step() > 0  # the embed stage and the reflect queue are idle now
    client.close()


def test_without_refined_windows_the_embed_worker_removes_the_window_group(
    redis_server: Any, settings: Settings
) -> None:
    """A group nobody reads would keep the embedded streams from trimming for ever."""
    client, wiring, _emb, _vectors = _setup(redis_server, settings)
    _ingest(client, "s", TEXTS[:2])
    wiring.embed_worker().run(burst=True)
    assert _window_beside_embed(wiring, "e1") is not None
    wiring.window_worker().run(burst=True)  # the group exists now
    stream = Topology(wiring.keys).window.stream_for(wiring.keys.partition("s"))
    assert "window" in {g["name"].decode() for g in wiring.redis.xinfo_groups(stream)}
    client.close()
    _client, mean_wiring, _e, _v = _setup(redis_server, settings, "mean", fresh=False)
    assert _window_beside_embed(mean_wiring, "e1") is None
    assert "window" not in {g["name"].decode() for g in mean_wiring.redis.xinfo_groups(stream)}
    _client.close()


@pytest.mark.parametrize("mode", ["mean", "text"])
def test_other_window_modes_run_no_window_stage(
    redis_server: Any, settings: Settings, mode: str
) -> None:
    client, wiring, _emb, _vectors = _setup(redis_server, settings, mode)
    assert not wiring.refines_windows
    client.close()


def test_a_long_entry_is_refined_in_chunks_with_a_look_at_the_embed_stage_between(
    redis_server: Any, settings: Settings
) -> None:
    client, wiring, _emb, vectors = _setup(redis_server, settings)
    n = 2 * WINDOW_CHUNK + 3
    _ingest(client, "s", [f"turn number {i} about topic {i % 4}" for i in range(n)])
    wiring.embed_worker().run(burst=True)
    worker = wiring.window_worker()
    handler: Any = worker.kind.handle  # the WindowHandler
    looks: list[int] = []
    calls: list[int] = []
    inner_ready = handler.ready
    embedder = handler.embedder
    real_embed = embedder.embed_documents

    def ready() -> bool:
        looks.append(len(calls))
        return inner_ready()

    def embed(texts: list[str]) -> Any:
        calls.append(len(texts))
        return real_embed(texts)

    handler.ready = ready  # what it asks between two model calls
    embedder.embed_documents = embed
    try:
        time.sleep(QUIET_MS / 1000 + 0.1)
        worker.run(burst=True)
    finally:
        del embedder.embed_documents
    assert sum(calls) == n - 1 and max(calls) <= WINDOW_CHUNK
    assert len(calls) >= 3
    # Between two model calls the embed stage was looked at again.
    assert all(k in looks for k in range(1, len(calls)))
    assert len(_windows(vectors, "s", n)) == n
    client.close()
