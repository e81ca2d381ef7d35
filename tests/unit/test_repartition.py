"""`hivemem repartition N` on a real redis-server: a drained pipeline written with 4
partitions moves to 7; every session reads back the same (turns, stats, episodes, facts,
recall), new turns continue each session's sequence and flow through the new partitions'
streams, and no key is left under an old partition's tag. Refused while workers run or
entries wait; a move interrupted half-way blocks every start until it is run again, and
the rerun finishes it."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from hivemem.cli.main import cli
from hivemem.config import Settings
from hivemem.errors import ConfigurationError
from hivemem.pipeline.topology import Keys, partition_tags
from hivemem.producer.client import MemoryClient
from hivemem.providers.embedders import HashingEmbedder
from hivemem.runtime.wiring import Wiring
from hivemem.store.repartition import Repartition, session_key_names
from hivemem.store.vectors.server import ServerVectorStore

DIM = 64
SESSIONS = [f"rp-s{i}" for i in range(10)]
# The same ids in a second namespace: the store holds both bare names (``default``'s) and
# qualified ones (``team-x/rp-s0``), in partitions of their own.
NAMESPACES = (None, "team-x")
TURNS = [
    "We decided to use PostgreSQL for the orders database.",
    "The API must never return more than 100 orders per page.",
    "Deploying to staging failed because the migration timed out.",
    "Let us switch the cache to Redis instead of memcached.",
    "I prefer short answers with code examples.",
    "The goal is to ship the billing service by Friday.",
]


@pytest.fixture
def server(redis_server: Any) -> Iterator[Any]:
    client = redis_server.client()
    client.flushall()
    yield redis_server
    client.flushall()


def _settings(url: str, partitions: int) -> Settings:
    return Settings.model_validate({
        "redis": {"url": url, "partitions": partitions},
        "embedding": {"provider": "hashing", "dim": DIM},
        "worker": {"block_ms": 20, "claim_idle_ms": 200, "claim_interval_s": 0.05},
        "episodes": {"max_turns": 3, "lease_ms": 100},
    })


def _drain(wiring: Wiring) -> None:
    """Every stage once, in order, in burst mode; then the workers' heartbeats lapse."""
    wiring.embed_worker().run(burst=True)
    wiring.boundary_worker().run(burst=True)
    wiring.dispatch_worker().run(burst=True)
    wiring.reflect_worker().work(burst=True)
    time.sleep(0.25)  # > claim_idle_ms: burst workers count as gone


def _write_sessions(client: MemoryClient) -> None:
    for ns in NAMESPACES:
        for sid in SESSIONS:
            for i, text in enumerate(TURNS):
                client.ingest(sid, "user" if i % 2 == 0 else "assistant",
                              f"{text} ({ns or 'default'})", turn_id=f"{sid}-t{i}",
                              namespace=ns)
            client.close_session(sid, namespace=ns)


def _check_written(before: dict[str, Any]) -> None:
    assert all(before[f"{ns}/{sid}"]["facts"] for ns in NAMESPACES for sid in SESSIONS)
    assert len(before["sessions"]) == 2 * len(SESSIONS)
    assert {f[3] for sid in SESSIONS for f in before[f"team-x/{sid}"]["facts"]} == {"team-x"}


def _snapshot(client: MemoryClient) -> dict[str, Any]:
    out: dict[str, Any] = {"sessions": sorted(client.admin.sessions())}
    for ns in NAMESPACES:
        # The namespace's own index (what its listing reads) moves too.
        out[f"listed {ns}"] = client.scoped(namespace=ns).sessions()
        for sid in SESSIONS:
            stats = client.get_session_stats(sid, namespace=ns)
            out[f"{ns}/{sid}"] = {
                "stats": (stats.turns_enqueued, stats.turns_processed, stats.turns_assigned,
                          stats.episodes),
                "episodes": [(e.index, e.turn_ids) for e in client.episodes(sid, namespace=ns)],
                "facts": sorted((f.fact_id, f.content, f.status, f.namespace)
                                for f in client.facts(sid, namespace=ns)),
                "recall": [(i.source_id, i.namespace) for i in client.recall(
                    sid, "which database", limit=5, namespace=ns)],
            }
    return out


def _old_tag_keys(conn: redis.Redis, old: Keys, new: Keys) -> list[str]:
    kept = {new.tag(q) for q in range(new.partitions)}
    left = []
    for p in range(old.partitions):
        tag = old.tag(p)
        if tag in kept:
            continue
        left += [k.decode() for k in conn.scan_iter(match=f"{tag}:*")]
    return left


def _cli(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_every_session_key_method_is_found() -> None:
    keys = Keys("hm", 4)
    names = {f("s")[len(keys.session_root("s")) + 1:] for f in session_key_names(keys)}
    # The episode strings and the session set are moved by their own rules.
    assert {"ids", "win", "done", "dead", "meta", "info", "audit", "ep:state",
            "ep:buf", "ep:lease", "episodes", "reflect:lock", "reflected"} <= names


def test_repartition_moves_every_session_and_the_pipeline_goes_on(server: Any) -> None:
    assert partition_tags(4)[1] != partition_tags(7)[1]
    vectors = ServerVectorStore(_settings(server.url, 4).qdrant, DIM, location=":memory:")
    embedder = HashingEmbedder(DIM)
    conn = server.client()
    try:
        before_settings = _settings(server.url, 4)
        # Connected by URL (not handed a client), as a deployment is: the count is recorded.
        with Wiring(before_settings, vectors=vectors, embedder=embedder) as w4:
            client = MemoryClient(before_settings, vector_store=vectors, embedder=embedder)
            _write_sessions(client)
            _drain(w4)
            _check_written(_snapshot(client))

            # Refused while a worker is registered (a heartbeat within claim_idle_ms).
            conn.zadd(w4.keys.stage_members("embed"), {"embed-x": int(time.time() * 1000)})
            refused = _cli("repartition", "7", "--redis-url", server.url)
            assert refused.exit_code == 1 and "worker(s) are running" in refused.output
            conn.delete(w4.keys.stage_members("embed"))
            # Refused while a turn waits in a stream.
            client.ingest(SESSIONS[0], "user", "one more turn", turn_id="late-1")
            refused = _cli("repartition", "7", "--redis-url", server.url)
            assert refused.exit_code == 1 and "drain the pipeline" in refused.output
            _drain(w4)
            before = _snapshot(client)

        moved = _cli("repartition", "7", "--redis-url", server.url, "--json")
        assert moved.exit_code == 0, moved.output
        summary = json.loads(moved.output)
        assert (summary["old"], summary["new"], summary["sessions"]) == (
            4, 7, 2 * len(SESSIONS))
        assert summary["keys_moved"] > 0 and not summary["resumed"]
        old, new = Keys("hm", 4), Keys("hm", 7)
        assert _old_tag_keys(conn, old, new) == []
        # The old count no longer starts; the new one does and reads the same memory.
        with pytest.raises(ConfigurationError, match="written with 7 partitions"):
            MemoryClient(before_settings, vector_store=vectors,
                         embedder=embedder).get_session_stats(SESSIONS[0])
        after_settings = _settings(server.url, 7)
        with Wiring(after_settings, vectors=vectors, embedder=embedder) as w7:
            client = MemoryClient(after_settings, vector_store=vectors, embedder=embedder)
            assert _snapshot(client) == before
            # The sessions go on: seq continues, a repeated turn id is still a duplicate,
            # and the new turns flow through the new partitions' streams.
            sid = SESSIONS[3]
            assert client.ingest(sid, "user", TURNS[0], turn_id=f"{sid}-t0").duplicate
            turn = client.ingest(sid, "user", "Actually we switched the orders database to "
                                 "MySQL.", turn_id=f"{sid}-t-new")
            assert turn.seq == len(TURNS) + 2  # seq len + 1 went to the session's close
            client.close_session(sid)
            _drain(w7)
            stats = client.get_session_stats(sid)
            assert stats.turns_processed == stats.turns_enqueued == len(TURNS) + 1
            assert any("MySQL" in f.content for f in client.facts(sid))
            # The same id in team-x is untouched by default's new turn.
            assert client.get_session_stats(sid, namespace="team-x").turns_enqueued == len(
                TURNS)
        again = _cli("repartition", "7", "--redis-url", server.url)
        assert again.exit_code == 0 and "nothing to move" in again.output
    finally:
        conn.close()
        vectors.close()


def test_an_interrupted_move_blocks_starts_until_it_is_run_again(server: Any) -> None:
    settings = _settings(server.url, 4)
    vectors = ServerVectorStore(settings.qdrant, DIM, location=":memory:")
    embedder = HashingEmbedder(DIM)
    conn = server.client()
    try:
        with Wiring(settings, vectors=vectors, embedder=embedder) as w4:
            client = MemoryClient(settings, vector_store=vectors, embedder=embedder)
            for sid in SESSIONS:
                for i, text in enumerate(TURNS[:4]):
                    client.ingest(sid, "user", text, turn_id=f"{sid}-t{i}")
            _drain(w4)
            before = {sid: client.get_session_stats(sid).turns_processed for sid in SESSIONS}
        old, new = Keys("hm", 4), Keys("hm", 7)

        class Crash(Exception):
            pass

        class CrashingMove(Repartition):
            moves = 0

            def _move(self, source: str, target: str) -> bool:
                moved = super()._move(source, target)
                self.moves += moved
                if self.moves == 25:  # mid-way through some session's keys
                    raise Crash
                return moved

        with pytest.raises(Crash):
            CrashingMove(conn, old, new, ttl_ms=200).run()
        for count in (4, 7):
            with pytest.raises(ConfigurationError, match="repartition is under way"):
                MemoryClient(_settings(server.url, count), vector_store=vectors,
                             embedder=embedder).get_session_stats(SESSIONS[0])
        wrong = _cli("repartition", "9", "--redis-url", server.url)
        assert wrong.exit_code == 1 and "from 4 to 7 is under way" in wrong.output
        rerun = _cli("repartition", "7", "--redis-url", server.url, "--json")
        assert rerun.exit_code == 0, rerun.output
        assert json.loads(rerun.output)["resumed"] is True
        assert _old_tag_keys(conn, old, new) == []
        client = MemoryClient(_settings(server.url, 7), vector_store=vectors,
                              embedder=embedder)
        assert {sid: client.get_session_stats(sid).turns_processed
                for sid in SESSIONS} == before
    finally:
        conn.close()
        vectors.close()


def test_embedded_stores_are_not_repartitioned(tmp_path: Any) -> None:
    result = CliRunner().invoke(cli, ["--local", str(tmp_path / "m"), "repartition", "8"])
    assert result.exit_code == 1 and "embedded store keeps" in result.output


def test_a_session_in_the_boundary_sweeps_index_moves_with_it(server: Any) -> None:
    conn = server.client()
    old, new = Keys("hm", 4), Keys("hm", 7)
    sid = next(s for s in SESSIONS if old.tag(old.partition(s)) != new.tag(new.partition(s)))
    conn.sadd(old.session_set(sid), sid)
    conn.hset(old.boundary_buffer(sid), "3", "{}")  # waits for seq 1 and 2
    conn.zadd(old.boundary_waiting(old.partition(sid)), {sid: 5})
    Repartition(conn, old, new).run()
    assert conn.zscore(new.boundary_waiting(new.partition(sid)), sid) == 5
    assert conn.hlen(new.boundary_buffer(sid)) == 1
    assert _old_tag_keys(conn, old, new) == []
    conn.close()
