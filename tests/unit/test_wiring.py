"""The composition root: one place builds the stores, and jobs get their context from the
worker that runs them (never from a module global)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from rq import Queue

from hivemem import MemoryClient
from hivemem.config import Settings
from hivemem.domain.fact import FactAction, FactKind
from hivemem.errors import HivememError
from hivemem.providers.embedders import HashingEmbedder
from hivemem.providers.reflector import ReflectionRequest, ReflectionResult
from hivemem.runtime.wiring import Wiring
from hivemem.store.vectors.edge import EdgeVectorStore
from hivemem.testing import connect_fake, fake_server
from hivemem.workers.jobs import JobContext
from hivemem.workers.rqworker import ContextJob

PACKAGE = Path(__file__).resolve().parents[2] / "hivemem"

# Constructors that only the composition root may call.
BUILDERS = ("TurnLog", "StreamStore", "EpisodeStore", "EdgeVectorStore",
            "ServerVectorStore", "build_embedder", "open_vector_store", "build_reflector",
            "JobContext", "SessionStore", "AuditLog", "ReflectionState", "ApiKeyStore",
            "JobQueue", "Service", "IngestGuard", "Wiring")
# Where a constructor call is allowed besides runtime/wiring.py, and why.
ALLOWED = {
    # The one switch between the two vector backends; only wiring calls it (pinned below).
    "store/vectors/factory.py": {"EdgeVectorStore", "ServerVectorStore"},
    # Recovery routines of the store layer: given one connection (at open, before any
    # worker exists), they replay through the episode and stream stores of that connection.
    "store/rebuild.py": {"EpisodeStore", "StreamStore"},
    # One wiring per process: embedded mode's (the SDK client takes it from the runtime)
    # and a worker process's (`hivemem worker KIND`, one command per process).
    "runtime/embedded.py": {"Wiring"},
    "runtime/runner.py": {"Wiring"},
    # Embedded mode's reflection process: a worker process of its own (one wiring).
    "runtime/reflect_child.py": {"Wiring"},
}


class Recorder:
    """A reflector that remembers which sessions it was asked about and keeps the first
    turn of each episode as a decision."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.sessions: list[str] = []

    def reflect(self, request: ReflectionRequest) -> ReflectionResult:
        self.sessions.append(request.session_id)
        first = request.turns[0]
        return ReflectionResult(actions=[FactAction(
            op="add", content=first.content, kind=FactKind.DECISION, subject="database",
            source_turn_ids=[first.turn_id],
        )])


def _calls(source: str) -> set[str]:
    found = set()
    for name in BUILDERS:
        # A call, not a method of that name, a definition or a mention in a docstring.
        if re.search(rf"(?<![\w.`]){name}\(", source) and not re.search(
            rf"(def|class) {name}\(", source
        ):
            found.add(name)
    return found


def test_only_the_wiring_constructs_stores_and_providers() -> None:
    offenders: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel == "runtime/wiring.py":
            continue
        calls = _calls(path.read_text()) - ALLOWED.get(rel, set())
        if calls:
            offenders[rel] = calls
    assert offenders == {}
    wiring_source = (PACKAGE / "runtime" / "wiring.py").read_text()
    assert {"TurnLog", "StreamStore", "EpisodeStore", "build_embedder",
            "open_vector_store", "JobContext"} <= _calls(wiring_source)


def _settings(tmp_path: Path, name: str) -> Settings:
    return Settings.model_validate({
        "embedding": {"provider": "hashing", "dim": 64},
        "worker": {"block_ms": 50},
        "redis": {"key_prefix": name},
        "episodes": {"reflect_queue": f"reflect-{name}"},
        "qdrant": {"path": str(tmp_path / name)},
    })


def whose_context(context: JobContext, tag: str) -> tuple[str, str]:
    """A job: says which worker's context it ran with."""
    return context.settings.redis.key_prefix, tag


def test_jobs_enqueued_by_name_run_with_their_workers_context(tmp_path: Path) -> None:
    server = fake_server()
    conn = connect_fake(server)
    wirings = {name: Wiring(_settings(tmp_path, name), redis=conn, embedder=HashingEmbedder(64))
               for name in ("one", "two")}
    jobs = {}
    for name, wiring in wirings.items():
        queue = Queue(wiring.settings.episodes.reflect_queue, connection=conn)
        jobs[name] = queue.enqueue_call(f"{__name__}.whose_context", args=(f"for-{name}",))
    try:
        for name, wiring in wirings.items():
            worker = wiring.reflect_worker()
            worker.work(burst=True)
            assert worker.handled == 1
            jobs[name].refresh()
            assert jobs[name].return_value() == (name, f"for-{name}")
    finally:
        for wiring in wirings.values():
            wiring.close()


def test_a_job_without_a_context_fails_with_a_clear_error() -> None:
    conn = connect_fake(fake_server())
    job = ContextJob.create(whose_context, args=("x",), connection=conn)
    with pytest.raises(HivememError, match="needs a hivemem worker"):
        job.perform()


def test_two_embedded_runtimes_reflect_with_their_own_reflectors(
    tmp_path: Path, settings: Settings
) -> None:
    """Two embedded runtimes in one process: each reflects its own episodes, with its own
    reflector, into its own store."""
    recorders = {"a": Recorder("rec-a"), "b": Recorder("rec-b")}
    texts = {"a": "We decided to use PostgreSQL for the database",
             "b": "We decided to use MySQL for the database"}
    clients = {name: MemoryClient.local(tmp_path / name, settings,
                                        embedder=HashingEmbedder(1024),
                                        reflector=recorders[name], workers=1)
               for name in ("a", "b")}
    try:
        for name, client in clients.items():
            for sid in (f"{name}1", f"{name}2"):
                client.ingest(sid, "user", texts[name])
                client.ingest(sid, "assistant", "Noted.")
                client.close_session(sid)
        for name, client in clients.items():
            for sid in (f"{name}1", f"{name}2"):
                client.wait_until_reflected(sid, 30)
        for name, client in clients.items():
            # One wiring per embedded client: its runtime's, shared by the SDK's service.
            assert client._runtime is not None and client._wiring is client._runtime.wiring
            assert sorted(recorders[name].sessions) == [f"{name}1", f"{name}2"]
            for sid in (f"{name}1", f"{name}2"):
                assert [f.content for f in client.facts(sid)] == [texts[name]]
            traces = client.traces(10)
            assert len(traces) == 2
            assert {t["reflector"] for t in traces} == {f"rec-{name}"}
    finally:
        for client in clients.values():
            client.close()


def test_the_wiring_builds_once_and_closes_only_what_it_opened(tmp_path: Path) -> None:
    settings = _settings(tmp_path, "w")
    conn = connect_fake(fake_server())
    wiring = Wiring(settings, redis=conn)
    assert wiring.state is wiring.state and wiring.episodes is wiring.episodes
    assert "vectors" not in wiring.__dict__  # nothing opened before it is asked for
    vectors = wiring.vectors
    assert vectors.dim == 64 and wiring.embedder.dim == 64
    wiring.close()
    # The folder's lock is released (a second opener would fail otherwise) and the
    # handed-in connection still answers.
    EdgeVectorStore(tmp_path / "w", 64).close()
    assert conn.ping()
    handed = EdgeVectorStore(tmp_path / "w", 64)
    try:
        with Wiring(settings, redis=conn, vectors=handed) as other:
            assert other.vectors is handed
        assert handed.list_facts("nobody", ["active"]) == []  # not closed by the wiring
    finally:
        handed.close()


def test_a_client_loads_no_model_and_opens_no_store_before_recall(
    redis_client: Any, settings: Settings
) -> None:
    client = MemoryClient(settings, redis_client=redis_client)
    client.ingest("s", "user", "hello")
    # What the boundary stage counts (this test runs none): a producer's progress reads
    # it from Redis, without a vector store.
    redis_client.hset(client.keys.boundary_state("s"), mapping={"marker:decision": 1})
    assert client.get_session_stats("s").markers == {"decision": 1}
    built = client._wiring.__dict__
    assert not {"vectors", "embedder", "query_embedder", "reflector"} & set(built)
