"""A forget's mark: a worker that read some of a session's entries before a forget of the
session began, and hands them to its stage only once the forget is over (killed and
reclaimed, or just slow on a loaded machine: the forget's settle waits for it only so
long), writes nothing of them back: no boundary buffer, state or slot table, no embedded
entry, no processed bit, no Qdrant point. Turns ingested after the forget (the session
used again) go through as usual.

Each test runs the real stage handler in a `StreamWorker` whose decode (called right after
the read) runs the whole forget first: the worker holds entries read before it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
import redis

from hivemem.config import Settings
from hivemem.domain.episode import BoundaryPolicy
from hivemem.producer.client import MemoryClient
from hivemem.providers.embedders import HashingEmbedder
from hivemem.store.currency import FORGOTTEN, SlotTableStore
from hivemem.store.episodes import EpisodeStore
from hivemem.store.state import TurnLog
from hivemem.store.streams import StreamEntry, StreamStore
from hivemem.store.vectors.server import ServerVectorStore
from hivemem.workers.boundary import BoundaryHandler, boundary_kind
from hivemem.workers.currency import CurrencyKeeper
from hivemem.workers.embed import EmbedHandler, embed_kind
from hivemem.workers.stream import StreamWorker, WorkerKind
from tests.support.forget_data import (
    POISON,
    PoisonEmbedder,
    new_secret,
    payloads_with,
    redis_keys_with,
)

M = TypeVar("M")
TURNS = 12


@dataclasses.dataclass
class Rig:
    client: MemoryClient
    redis: redis.Redis
    vectors: ServerVectorStore
    embed: WorkerKind[Any]
    boundary: WorkerKind[Any]
    slots: SlotTableStore
    settings: Settings

    def run(self, kind: WorkerKind[Any], consumer: str = "w", **worker: Any) -> None:
        StreamWorker(kind, StreamStore(self.redis, self.client.keys),
                     self.settings.worker.model_copy(update=worker),
                     consumer=consumer).run(burst=True)


@pytest.fixture
def rig(redis_client: redis.Redis, settings: Settings, embedder: HashingEmbedder
        ) -> Iterator[Rig]:
    settings = settings.model_validate({
        **settings.model_dump(mode="json"),
        # The settle gives up on the worker that holds the entries at once: what it does
        # afterwards is what is tested (the timing a loaded machine gives).
        "lifecycle": {"forget_settle_s": 0.0, "forget_settle_timeout_s": 0.2,
                      "forget_rewrite_aof": False}})
    vectors = ServerVectorStore(settings.qdrant, embedder.dim, location=":memory:")
    client = MemoryClient(settings, redis_client=redis_client, vector_store=vectors,
                          embedder=embedder)
    keys = client.keys
    embed = embed_kind(EmbedHandler(
        embedder, vectors, TurnLog(redis_client, keys, settings.ingest.recent_window),
        StreamStore(redis_client, keys), keys))
    slots = SlotTableStore(redis_client, keys)
    boundary = boundary_kind(BoundaryHandler(
        EpisodeStore(redis_client, keys, 60_000),
        BoundaryPolicy(max_turns=4, max_gap_seconds=float("inf"), topic_shift_threshold=-2.0),
        CurrencyKeeper(slots, settings.reflection)))
    yield Rig(client, redis_client, vectors, embed, boundary, slots, settings)
    client.close()
    vectors.close()


def _forgetting_first(kind: WorkerKind[M], forget: Callable[[], None]) -> WorkerKind[M]:
    """`kind`, whose first decode (right after its first read) runs `forget` whole."""
    done: list[bool] = []

    def decode(entry: StreamEntry) -> M:
        if not done:
            done.append(True)
            forget()
        return kind.decode(entry)

    return dataclasses.replace(kind, decode=decode)


def _ingest(client: MemoryClient, session: str, text: str, prefix: str,
            turns: range = range(TURNS)) -> None:
    client.ingest_many([{"session_id": session, "role": "user", "turn_id": f"{prefix}{i}",
                         "content": f"We decided step {i} uses {text}"}
                        for i in turns])


def _forget(rig: Rig, session: str) -> Callable[[], None]:
    def forget() -> None:
        rig.client.admin.forget(session)
    return forget


def _assert_gone(rig: Rig, secret: str) -> None:
    assert not redis_keys_with(rig.redis, secret)
    assert not payloads_with(rig.vectors, secret)
    assert "hot" not in rig.client.admin.sessions()


def _assert_used_again(rig: Rig) -> None:
    """The session, used again after the forget, goes through both stages as usual."""
    _ingest(rig.client, "hot", "the new plan", "n")
    rig.run(rig.embed)
    rig.run(rig.boundary)
    stats = rig.client.get_session_stats("hot")
    assert stats.turns_processed == TURNS
    assert len(rig.vectors.get_turns("hot", [f"n{i}" for i in range(TURNS)])) == TURNS
    assert not rig.redis.exists(rig.client.keys.boundary_buffer("hot"))


def test_a_boundary_worker_holding_entries_read_before_the_forget_writes_none_back(
        rig: Rig) -> None:
    secret = new_secret()
    half = TURNS // 2
    _ingest(rig.client, "hot", secret, "h", range(half))
    _ingest(rig.client, "calm", "the calm plan", "c")
    rig.run(rig.embed)
    rig.run(rig.boundary)
    # The rest is embedded; the worker that reads it hands it over after the forget: the
    # session's pointer is gone then, so these turns (not its first) would wait in its
    # buffer, holding the forgotten text, for a predecessor that never comes.
    _ingest(rig.client, "hot", secret, "h", range(half, TURNS))
    rig.run(rig.embed)
    rig.run(_forgetting_first(rig.boundary, _forget(rig, "hot")), consumer="slow")
    _assert_gone(rig, secret)
    assert not rig.redis.exists(rig.client.keys.boundary_buffer("hot"))
    assert not rig.redis.exists(rig.client.keys.boundary_state("hot"))
    assert rig.client.get_session_stats("calm").turns_processed == TURNS  # the bystander
    _assert_used_again(rig)


def test_an_embed_worker_holding_turns_read_before_the_forget_writes_none_back(
        rig: Rig) -> None:
    secret = new_secret()
    _ingest(rig.client, "hot", secret, "h")
    _ingest(rig.client, "calm", "the calm plan", "c")
    rig.run(_forgetting_first(rig.embed, _forget(rig, "hot")), consumer="slow")
    rig.run(rig.boundary)
    _assert_gone(rig, secret)
    assert not rig.redis.exists(rig.client.keys.session_processed("hot"))
    assert rig.client.get_session_stats("calm").turns_processed == TURNS
    _assert_used_again(rig)


def test_an_embed_worker_whose_points_land_after_the_forget_takes_them_back(
        rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """The forget begins after the worker looked for a mark and before it writes its
    points: the publish (which checks the mark in its script) refuses the turns, and the
    worker deletes the points it has just written."""
    secret = new_secret()
    _ingest(rig.client, "hot", secret, "h")
    upsert = rig.vectors.upsert_turns

    def forget_then_upsert(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(rig.vectors, "upsert_turns", upsert)
        rig.client.admin.forget("hot")
        return upsert(*args, **kwargs)

    monkeypatch.setattr(rig.vectors, "upsert_turns", forget_then_upsert)
    rig.run(rig.embed, consumer="slow")
    rig.run(rig.boundary)
    _assert_gone(rig, secret)
    assert not rig.redis.exists(rig.client.keys.session_processed("hot"))
    _assert_used_again(rig)


def test_turns_ingested_after_the_forget_began_are_processed(rig: Rig) -> None:
    """A batch holding turns from before the mark and after it: only the older go."""
    secret = new_secret()
    _ingest(rig.client, "hot", secret, "h")

    def forget_then_ingest() -> None:
        rig.client.admin.forget("hot")
        _ingest(rig.client, "hot", "the new plan", "n")

    rig.run(_forgetting_first(rig.embed, forget_then_ingest), consumer="slow")
    rig.run(rig.boundary)
    assert not redis_keys_with(rig.redis, secret)
    assert not payloads_with(rig.vectors, secret)
    assert rig.client.get_session_stats("hot").turns_processed == TURNS
    assert len(rig.vectors.get_turns("hot", [f"n{i}" for i in range(TURNS)])) == TURNS


def test_a_turn_failing_after_its_session_was_forgotten_leaves_no_dead_letter(
        rig: Rig) -> None:
    """A dead letter keeps the entry and its error (which may quote it), and the embed
    stage publishes a skip for it: none of them for a turn forgotten while held."""
    secret = new_secret()
    rig.client.ingest("hot", "user", f"{POISON} payload {secret}", turn_id="p1")
    keys = rig.client.keys
    poisoned = embed_kind(EmbedHandler(
        PoisonEmbedder(rig.vectors.dim), rig.vectors,
        TurnLog(rig.redis, keys, rig.settings.ingest.recent_window),
        StreamStore(rig.redis, keys), keys))
    rig.run(_forgetting_first(poisoned, _forget(rig, "hot")), consumer="slow",
            max_deliveries=1)
    _assert_gone(rig, secret)
    assert not rig.redis.exists(keys.session_dead("hot"))
    assert rig.redis.xlen(keys.embedded_stream(keys.partition("hot"))) == 0
    _assert_used_again(rig)


def test_a_slot_table_write_from_a_run_read_before_the_forget_writes_nothing(
        rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """The currency keeper writes after the forget is over and the session, used again,
    has as many turns as the run it read: the session's counter alone would let it write
    the forgotten statements back; the forget mark, moved since the run was read, does not."""
    secret = new_secret()
    _ingest(rig.client, "hot", secret, "h")
    rig.run(rig.embed)
    write = rig.slots.write
    replies: list[int] = []

    def forget_then_write(*args: Any, **kwargs: Any) -> int:
        monkeypatch.setattr(rig.slots, "write", write)
        rig.client.admin.forget("hot")
        _ingest(rig.client, "hot", "the new plan", "n")
        replies.append(write(*args, **kwargs))
        return replies[-1]

    monkeypatch.setattr(rig.slots, "write", forget_then_write)
    rig.run(rig.boundary, consumer="slow")
    assert replies == [FORGOTTEN]
    assert not redis_keys_with(rig.redis, secret)
    rig.run(rig.embed)
    rig.run(rig.boundary)
    assert rig.client.get_session_stats("hot").turns_processed == TURNS
    assert not payloads_with(rig.vectors, secret)
