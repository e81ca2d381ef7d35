"""The Qdrant server store against a networked Qdrant (the REST stand-in over loopback HTTP):
timeouts, bootstrap races, retries, consistency settings, and 4xx vs outage."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pydantic
import pytest
import redis
import structlog.testing

from hivemem import MemoryClient
from hivemem.config import QdrantSettings, Settings
from hivemem.domain.fact import Fact
from hivemem.domain.scope import Scope
from hivemem.errors import StoreRejected, StoreUnavailable
from hivemem.pipeline.topology import Topology
from hivemem.providers.embedders import HashingEmbedder
from hivemem.store.state import TurnLog
from hivemem.store.streams import StreamStore
from hivemem.store.vectors import server as server_module
from hivemem.store.vectors.base import INTEGER_FIELDS, KEYWORD_FIELDS, TURNS, Point
from hivemem.store.vectors.server import ServerVectorStore
from hivemem.workers.embed import EmbedHandler, embed_kind
from hivemem.workers.stream import StreamWorker
from tests.support.qdrant_standin import Fault, QdrantStandin

DIM = 16
PID = "00000000-0000-0000-0000-0000000000{:02d}"


@pytest.fixture(scope="module")
def shared_standin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QdrantStandin]:
    """One stand-in with hivemem's collections, made once: making (or loading) them costs
    seconds of qdrant-edge work, so tests that are not about bootstrap share it."""
    with QdrantStandin(tmp_path_factory.mktemp("standin")) as standin:
        ServerVectorStore(_settings(standin.url), DIM).close()
        yield standin


@pytest.fixture
def qdrant(shared_standin: QdrantStandin) -> QdrantStandin:
    """The shared stand-in, emptied: no points, no faults, no requests seen."""
    engine = shared_standin.engine
    for name in list(engine.list()["collections"]):
        if not name["name"].startswith("hivemem_"):
            engine.delete(name["name"])
    for name in ("hivemem_turns", "hivemem_facts"):
        engine.delete_points(name, {"filter": {}})
    shared_standin.faults.clear()
    with shared_standin._seen_lock:
        shared_standin.seen.clear()
    return shared_standin


@pytest.fixture
def fresh_qdrant(tmp_path: Path) -> Iterator[QdrantStandin]:
    """An empty stand-in: for the tests of creating the collections."""
    with QdrantStandin(tmp_path / "fresh") as standin:
        yield standin


def _settings(url: str, **overrides: Any) -> QdrantSettings:
    fast = {"timeout": 5.0, "backoff_initial_s": 0.01, "backoff_max_s": 0.05,
            "open_timeout_s": 5.0}
    return QdrantSettings(url=url, **{**fast, **overrides})


def _point(n: int, payload: dict[str, Any] | None = None) -> Point:
    vector = np.random.default_rng(n).random(DIM).astype(np.float32)
    return Point(PID.format(n), vector, {"session_id": "s", "seq": n, **(payload or {})})


def _http(method: str, url: str, body: Any = None) -> tuple[int, dict[str, Any]]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


# -- the stand-in answers as Qdrant documents ---------------------------------------------


def test_standin_speaks_qdrants_status_codes_and_envelope(qdrant: QdrantStandin) -> None:
    body = {"vectors": {"dense": {"size": 4, "distance": "Cosine"}}}
    status, created = _http("PUT", f"{qdrant.url}/collections/c", body)
    assert status == 200 and created["result"] is True and created["status"] == "ok"
    assert isinstance(created["time"], float)
    status, again = _http("PUT", f"{qdrant.url}/collections/c", body)
    assert status == 409
    assert again["status"]["error"] == "Wrong input: Collection `c` already exists!"
    status, missing = _http("GET", f"{qdrant.url}/collections/nope")
    assert status == 404 and "doesn't exist" in missing["status"]["error"]
    status, wrong = _http("PUT", f"{qdrant.url}/collections/c/points",
                          {"points": [{"id": 1, "vector": {"dense": [1.0, 2.0]}}]})
    assert status == 400
    assert wrong["status"]["error"] == ("Wrong input: Vector dimension error: expected dim: 4,"
                                        " got 2")
    status, info = _http("GET", f"{qdrant.url}/")
    assert status == 200 and info["version"]


def test_standin_keeps_points_across_a_restart(tmp_path: Path) -> None:
    body = {"vectors": {"dense": {"size": 2, "distance": "Dot"}}}
    points = {"points": [{"id": 1, "vector": {"dense": [1.0, 0.0]}, "payload": {"a": 1}},
                         {"id": 2, "vector": {"dense": [0.0, 1.0]}}]}
    with QdrantStandin(tmp_path / "q") as first:
        _http("PUT", f"{first.url}/collections/c", body)
        assert _http("PUT", f"{first.url}/collections/c/points?wait=true", points)[0] == 200
    with QdrantStandin(tmp_path / "q") as second:
        status, counted = _http("POST", f"{second.url}/collections/c/points/count", {})
        assert (status, counted["result"]) == (200, {"count": 2})
        status, got = _http("POST", f"{second.url}/collections/c/points",
                            {"ids": [1], "with_payload": True})
        assert got["result"][0]["payload"] == {"a": 1}


# -- timeouts and bootstrap ---------------------------------------------------------------


def test_half_second_timeout_is_half_a_second_not_zero(qdrant: QdrantStandin) -> None:
    store = ServerVectorStore(_settings(qdrant.url, timeout=0.5), DIM)
    store.upsert(TURNS, [_point(1)])
    assert store.count(TURNS, None) == 1
    # ...and not a whole second either: a 0.8 s stall is past it.
    qdrant.faults.add(Fault("POST", r"/points/count$", status=200, delay_s=0.8, count=1))
    with pytest.raises(StoreUnavailable, match="count"):
        ServerVectorStore(_settings(qdrant.url, timeout=0.5, read_retries=0), DIM).count(
            TURNS, None)
    store.close()


def test_409_on_create_means_another_worker_won_the_race(qdrant: QdrantStandin) -> None:
    # The collections exist (another worker made them); the check said "missing" (it was, a
    # moment ago): the create then meets a 409.
    qdrant.faults.add(Fault("GET", r"/exists$", status=200, result={"exists": False},
                            count=2))
    store = ServerVectorStore(_settings(qdrant.url), DIM)
    assert [s.status for s in qdrant.requests(r"^/collections/hivemem_\w+$")
            if s.method == "PUT"][-2:] == [409, 409]
    store.upsert(TURNS, [_point(1)])
    store.close()


def test_workers_opening_together_all_succeed_with_every_index(fresh_qdrant: QdrantStandin) -> None:
    opened: list[ServerVectorStore] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(6)

    def open_one() -> None:
        barrier.wait()
        try:
            opened.append(ServerVectorStore(_settings(fresh_qdrant.url), DIM))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(opened) == 6
    schema = fresh_qdrant.engine.info("hivemem_turns")["payload_schema"]
    assert {f: schema[f]["data_type"] for f in INTEGER_FIELDS} == {"seq": "integer"}
    assert set(KEYWORD_FIELDS) <= set(schema)
    for store in opened:
        store.close()


def test_opening_waits_for_a_server_that_is_not_answering_yet(qdrant: QdrantStandin) -> None:
    qdrant.faults.add(Fault("*", r"^/collections", status=0, count=2))  # connection dropped
    qdrant.faults.add(Fault("*", r"^/collections", status=503, count=2))
    store = ServerVectorStore(_settings(qdrant.url), DIM)
    assert [s.status for s in qdrant.requests()][:4] == [0, 0, 503, 503]
    store.upsert(TURNS, [_point(1)])
    store.close()


def test_opening_gives_up_after_open_timeout(qdrant: QdrantStandin) -> None:
    qdrant.faults.add(Fault("*", r"^/collections", status=503, count=10_000))
    with pytest.raises(StoreUnavailable, match="503"):
        ServerVectorStore(_settings(qdrant.url, open_timeout_s=0.2), DIM)


def test_an_existing_collection_gets_the_indexes_it_lacks(fresh_qdrant: QdrantStandin) -> None:
    body = {"vectors": {"dense": {"size": DIM, "distance": "Cosine"}},
            "sparse_vectors": {"lexical": {"modifier": "idf"}}}
    for name in ("hivemem_turns", "hivemem_facts"):
        assert _http("PUT", f"{fresh_qdrant.url}/collections/{name}", body)[0] == 200
    _http("PUT", f"{fresh_qdrant.url}/collections/hivemem_turns/index",
          {"field_name": "session_id", "field_schema": "keyword"})
    ServerVectorStore(_settings(fresh_qdrant.url), DIM).close()
    schema = fresh_qdrant.engine.info("hivemem_turns")["payload_schema"]
    assert schema["seq"]["data_type"] == "integer"
    assert {schema[f]["data_type"] for f in KEYWORD_FIELDS} == {"keyword"}


def test_dimension_mismatch_is_a_configuration_error(qdrant: QdrantStandin) -> None:
    with pytest.raises(Exception, match="16-d vectors"):
        ServerVectorStore(_settings(qdrant.url, open_timeout_s=0), DIM * 2)


# -- reads retry, writes report ------------------------------------------------------------


def test_reads_retry_outages_with_backoff(qdrant: QdrantStandin) -> None:
    store = ServerVectorStore(_settings(qdrant.url, read_retries=3), DIM)
    store.upsert(TURNS, [_point(1)])
    qdrant.faults.add(Fault("POST", r"/points/query$", status=503, count=2))
    qdrant.faults.add(Fault("POST", r"/points/scroll$", status=0, count=2))
    assert [h.id for h in store.search(TURNS, _point(1).vector, 5, None)] == [PID.format(1)]
    assert len(list(store.scroll(TURNS, {"session_id": "s"}))) == 1
    qdrant.faults.add(Fault("POST", r"/points/count$", status=502, count=10))
    with pytest.raises(StoreUnavailable, match="502"):
        store.count(TURNS, None)
    assert len([s for s in qdrant.requests(r"/points/count$") if s.status == 502]) == 4
    store.close()


@pytest.mark.parametrize(
    ("status", "error"),
    [(400, StoreRejected), (422, StoreRejected), (413, StoreRejected),
     (500, StoreUnavailable), (503, StoreUnavailable), (401, StoreUnavailable),
     (404, StoreUnavailable), (429, StoreUnavailable)],
)
def test_a_4xx_about_the_request_is_a_rejection_the_rest_an_outage(
    qdrant: QdrantStandin, status: int, error: type[Exception]
) -> None:
    store = ServerVectorStore(_settings(qdrant.url), DIM)
    qdrant.faults.add(Fault("PUT", r"/points$", status=status, message="Wrong input: no"))
    with pytest.raises(error) as caught:
        store.upsert(TURNS, [_point(1)])
    if error is StoreRejected:
        assert isinstance(caught.value, StoreRejected)
        assert caught.value.status == status and "Wrong input: no" in caught.value.reason
    store.upsert(TURNS, [_point(1)])  # the next request is fine: nothing was broken
    store.close()


def test_a_payload_qdrant_cannot_parse_is_rejected_with_its_reason(
    qdrant: QdrantStandin, monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = ServerVectorStore(_settings(qdrant.url), DIM)
    deep: dict[str, Any] = {}
    for _ in range(130):
        deep = {"x": deep}
    # Refused at the store boundary, before a request is sent (issue 35)...
    sent = len(qdrant.requests(r"/points$"))
    with pytest.raises(StoreRejected, match="metadata is nested more than"):
        store.upsert(TURNS, [_point(1, {"metadata": deep})])
    assert len(qdrant.requests(r"/points$")) == sent
    # ...and what the server itself refuses still comes back with the server's reason.
    monkeypatch.setattr(server_module, "check_payloads", lambda *_: None)
    with pytest.raises(StoreRejected, match="recursion limit exceeded"):
        store.upsert(TURNS, [_point(1, {"metadata": deep})])
    store.upsert(TURNS, [_point(2)])
    assert store.count(TURNS, None) == 1
    store.close()


# -- consistency -----------------------------------------------------------------------------


def test_layout_ordering_and_read_consistency_reach_the_server(fresh_qdrant: QdrantStandin) -> None:
    settings = _settings(fresh_qdrant.url, shard_number=2, replication_factor=3,
                         write_ordering="strong", read_consistency="majority")
    store = ServerVectorStore(settings, DIM)
    params = fresh_qdrant.engine.info("hivemem_turns")["config"]["params"]
    assert (params["shard_number"], params["replication_factor"],
            params["write_consistency_factor"]) == (2, 3, 2)
    store.upsert(TURNS, [_point(1, {"namespace": "default"})])
    store.search(TURNS, _point(1).vector, 3, {"$scope": Scope()})
    list(store.scroll(TURNS, None))
    store.retrieve(TURNS, [PID.format(1)])
    store.count(TURNS, None)
    upsert = fresh_qdrant.requests(r"/points$")[0]
    assert upsert.method == "PUT"
    assert (upsert.params["ordering"], upsert.params["wait"]) == ("strong", "true")
    for path in (r"/points/query$", r"/points/scroll$", r"/points$", r"/points/count$"):
        reads = [s for s in fresh_qdrant.requests(path) if s.method == "POST"]
        assert reads and all(s.params.get("consistency") == "majority" for s in reads), path
    store.close()


def test_settings_refuse_a_layout_where_recall_could_miss_a_write() -> None:
    assert QdrantSettings(replication_factor=3).write_replicas() == 2
    assert QdrantSettings(replication_factor=3, read_consistency="all").write_replicas() == 3
    assert QdrantSettings().write_replicas() is None
    for bad in ({"replication_factor": 3, "write_consistency_factor": 1},
                {"replication_factor": 3, "write_consistency_factor": 2,
                 "read_consistency": "all"},
                {"replication_factor": 2, "write_consistency_factor": 3},
                {"read_consistency": 0}):
        with pytest.raises(pydantic.ValidationError):
            QdrantSettings(**bad)


# -- the embed worker: a rejected turn is dead-lettered, the rest flow ------------------------


def test_embed_worker_dead_letters_a_turn_qdrant_rejects_and_moves_on(
    qdrant: QdrantStandin, redis_client: redis.Redis, tmp_path: Path
) -> None:
    settings = Settings.model_validate({
        "embedding": {"provider": "hashing", "dim": DIM},
        "qdrant": {"url": qdrant.url, "backoff_initial_s": 0.01},
        "worker": {"block_ms": 50, "claim_idle_ms": 200, "max_deliveries": 5,
                   "backoff_initial_s": 0.01, "backoff_max_s": 0.05},
    })
    embedder = HashingEmbedder(DIM)
    vectors = ServerVectorStore(settings.qdrant, DIM)
    qdrant.faults.add(Fault("PUT", r"/points$", status=400, count=100,
                            body_contains="refused-by-qdrant",
                            message="Format error in JSON body: recursion limit exceeded"))
    with MemoryClient(settings, redis_client=redis_client, vector_store=vectors,
                      embedder=embedder) as client:
        for i in range(6):
            client.ingest("s1", "user", "refused-by-qdrant" if i == 3 else f"turn {i}")
        streams = StreamStore(redis_client, client.keys)
        state = TurnLog(redis_client, client.keys, settings.ingest.recent_window)
        handler = EmbedHandler(embedder, vectors, state, streams, client.keys)
        worker = StreamWorker(embed_kind(handler), streams, settings.worker)
        report = worker.run(burst=True)
        assert (report.handled, report.dead_lettered) == (5, 1)
        [letter] = streams.stage_dead_letters(Topology(client.keys).embed)
        assert letter.deliveries == 1  # at once: a rejection is the same on every try
        assert "StoreRejected" in letter.error and "recursion limit" in letter.error
        stats = client.get_session_stats("s1")
        assert (stats.turns_processed, stats.turns_dead_lettered) == (5, 1)
        assert vectors.count_turns("s1") == 5


def test_an_existing_collection_too_weak_for_read_your_writes_is_reported(
    qdrant: QdrantStandin,
) -> None:
    body = {"vectors": {"dense": {"size": DIM, "distance": "Cosine"}},
            "sparse_vectors": {"lexical": {"modifier": "idf"}},
            "replication_factor": 3, "write_consistency_factor": 1}
    for name in ("weak_turns", "weak_facts"):
        assert _http("PUT", f"{qdrant.url}/collections/{name}", body)[0] == 200
    with structlog.testing.capture_logs() as logs:
        ServerVectorStore(_settings(qdrant.url, collection_prefix="weak_"), DIM).close()
    warned = [e for e in logs if e["event"] == "store.reads_may_miss_writes"]
    assert {e["collection"] for e in warned} == {"weak_turns", "weak_facts"}
    assert warned[0]["write_consistency_factor"] == 1 and "to 2" in warned[0]["fix"]


def test_a_missing_api_key_is_an_outage_to_fix_not_a_rejection(tmp_path: Path) -> None:
    with QdrantStandin(tmp_path / "keyed", api_key="s3cret") as keyed:
        with pytest.raises(StoreUnavailable, match="401"):
            ServerVectorStore(_settings(keyed.url, open_timeout_s=0), DIM)
        status, _ = _http("GET", f"{keyed.url}/collections")
        assert status == 401


def test_facts_written_after_reads_only_newer_facts_through_the_float_index(
    qdrant: QdrantStandin,
) -> None:
    """Recall's fact cache re-reads only what was written since its last read: on a server
    that is a range filter on `written_at` (indexed as a float), not a scroll of the session."""
    now = datetime.now(UTC)

    def fact(name: str, session: str = "s") -> Fact:
        return Fact(fact_id=f"{abs(hash(name)) % 10**12:032x}", session_id=session,
                    content=name, created_at=now, valid_from=now)

    store = ServerVectorStore(_settings(qdrant.url), DIM)
    try:
        vectors = np.ones((1, DIM), dtype=np.float32)
        store.upsert_facts([fact("old")], vectors)
        store.upsert_facts([fact("other", session="t")], vectors)
        everything = store.facts_written_after("s", None)
        assert [f.content for f, _ in everything] == ["old"]
        # Compare between the writes: the engine may hand a stored float back one ulp off.
        between = everything[0][1] + 0.05
        time.sleep(0.1)
        store.upsert_facts([fact("new")], vectors)
        newer = store.facts_written_after("s", between)
        assert [f.content for f, _ in newer] == ["new"]
        assert store.facts_written_after("s", newer[0][1] + 0.05) == []
        schema = qdrant.engine.info("hivemem_facts")["payload_schema"]
        assert schema["written_at"]["data_type"] == "float"
    finally:
        store.close()
