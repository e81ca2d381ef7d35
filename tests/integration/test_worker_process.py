"""The embed worker as a real process: signals, poison entries, burst mode, startup errors."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import redis
from integration_support import (
    GROUP,
    HIVEMEM_SCRIPT,
    KEYS,
    STREAM,
    WORKER_MODULE,
    conversation,
    pending_count,
    processed_count,
    require_model,
    server_settings,
    worker_env,
)

from hivemem.producer.client import MemoryClient
from hivemem.store.reflection import ReflectionState
from hivemem.store.state import TurnLog
from hivemem.store.vectors.edge import EdgeVectorStore

pytestmark = pytest.mark.integration


def _enqueue(redis_url: str, sessions: list[str], per_session: int) -> int:
    turns = conversation(sessions, per_session)
    with MemoryClient(server_settings(redis_url)) as producer:
        for start in range(0, len(turns), 500):
            producer.ingest_many(turns[start : start + 500])
    return len(turns)


def _run_cli(args: list[str], env: dict[str, str], timeout: float = 60) -> tuple[int, str]:
    done = subprocess.run(
        args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout,
        check=False,
    )
    return done.returncode, done.stdout.decode(errors="replace")


def _flat(text: str) -> str:
    """rich wraps messages at 80 columns when not on a terminal: compare without the breaks."""
    return re.sub(r"\s+", " ", text)


@pytest.mark.model
def test_sigterm_finishes_the_batch_in_hand_acks_it_and_exits_zero(
    tmp_path: Path, redis_url: str, real_redis: redis.Redis, start_worker
) -> None:
    require_model()
    sessions = [f"term-s{i}" for i in range(4)]
    n = _enqueue(redis_url, sessions, 256)
    qdrant_path = tmp_path / "qdrant"
    worker = start_worker(
        worker_env(redis_url, qdrant_path, provider="fastembed",
                   extra={"HIVEMEM_WORKER__BATCH_SIZE": "256"}),
        "--name", "graceful",
    )

    deadline = time.monotonic() + 45
    while True:
        assert worker.process.poll() is None, worker.output()
        assert time.monotonic() < deadline, f"no progress:\n{worker.output()}"
        if processed_count(real_redis, sessions) > 0 and pending_count(real_redis) > 0:
            in_hand = real_redis.xpending_range(STREAM, GROUP, min="-", max="+", count=n)
            if in_hand:
                worker.signal(signal.SIGTERM)
                break
        time.sleep(0.005)

    assert worker.wait(timeout=30) == 0, worker.output()
    assert [e["signal"] for e in worker.events("worker.stopping")] == ["SIGTERM"]
    assert worker.events("worker.stopped"), worker.output()

    # The batch in hand at SIGTERM was finished and acked; the rest was never taken.
    assert pending_count(real_redis) == 0
    in_hand_ids = [row["message_id"] for row in in_hand]
    in_hand_seqs = {
        (f[b"turn"], int(f[b"seq"]))
        for entry_id in in_hand_ids
        for _, f in real_redis.xrange(STREAM, min=entry_id, max=entry_id)
    }
    assert len(in_hand_seqs) == len(in_hand_ids)
    done = processed_count(real_redis, sessions)
    assert done < n, "the worker drained the queue instead of stopping"
    lag = {g["name"]: g["lag"] for g in real_redis.xinfo_groups(STREAM)}[b"embed"]
    assert done + lag == n

    store = EdgeVectorStore(qdrant_path, 384)
    try:
        assert store.count_turns() == done
        stored = {(t.session_id, t.seq) for t in store.iter_turns()}
    finally:
        store.close()
    state = TurnLog(real_redis, KEYS, 50)
    marked = {
        (sid, seq)
        for sid in sessions
        for seq in range(1, state.last_seq(sid) + 1)
        if real_redis.getbit(KEYS.session_processed(sid), seq)
    }
    assert stored == marked
    for raw, seq in in_hand_seqs:
        assert (json.loads(raw)["session_id"], seq) in stored


def test_poison_entries_are_dead_lettered_and_the_rest_keeps_flowing(
    tmp_path: Path, redis_url: str, real_redis: redis.Redis, start_worker
) -> None:
    sessions = ["poison-a", "poison-b", "poison-c"]
    _enqueue(redis_url, sessions, 40)
    # Undecodable: dead-lettered at once.
    bad_json = real_redis.xadd(STREAM, {"seq": "x", "turn": "{not json"}).decode()
    not_a_turn = real_redis.xadd(
        STREAM, {"seq": "7", "turn": '{"session_id": "poison-a"}'}
    ).decode()
    # Decodes, but the store refuses it every time (NaN is not a payload number): the batch
    # falls back to one by one, the others go through, this one dies after max_deliveries.
    nan_turn = json.dumps({
        "turn_id": "nan-1", "session_id": "poison-nan", "role": "user", "content": "hello",
        "metadata": {"score": float("nan")}, "timestamp": "2026-03-02T09:00:00+00:00",
        "token_count": 1,
    })
    refused = real_redis.xadd(STREAM, {"seq": "1", "turn": nan_turn}).decode()
    # Turn ids t0..t39 again (duplicates: no-ops), then t40..t79 behind the poison.
    _enqueue(redis_url, sessions, 80)
    total = len(sessions) * 80

    worker = start_worker(
        worker_env(redis_url, tmp_path / "qdrant", extra={
            "HIVEMEM_WORKER__BATCH_SIZE": "50", "HIVEMEM_WORKER__MAX_DELIVERIES": "3",
            "HIVEMEM_WORKER__CLAIM_IDLE_MS": "200", "HIVEMEM_WORKER__CLAIM_INTERVAL_S": "0.1",
        }),
        "--burst",
    )
    assert worker.wait(timeout=60) == 0, worker.output()
    summary = worker.summary()
    assert summary["dead_lettered"] == 3, worker.output()
    assert summary["handled"] == total

    with MemoryClient(server_settings(redis_url)) as client:
        letters = {d.entry_id: d for d in client.admin.dead_letters()}
        assert set(letters) == {bad_json, not_a_turn, refused}
        assert letters[bad_json].fields == {"seq": "x", "turn": "{not json"}
        assert letters[bad_json].error.startswith("undecodable: ")
        assert letters[not_a_turn].error.startswith("undecodable: ValidationError")
        assert letters[bad_json].deliveries == letters[not_a_turn].deliveries == 1
        assert letters[refused].error.startswith("TypeError"), letters[refused].error
        assert "NaN" in letters[refused].error
        assert letters[refused].deliveries == 3
        assert letters[refused].fields["turn"] == nan_turn
        assert all(d.group == "embed" and d.stream == STREAM for d in letters.values())
        for sid in sessions:
            stats = client.get_session_stats(sid)
            assert (stats.turns_enqueued, stats.turns_processed) == (80, 80)
            assert stats.turns_dead_lettered == 0
    # The refused turn is accounted to its session as dead, so waiters settle.
    assert real_redis.getbit(KEYS.session_dead("poison-nan"), 1) == 1
    assert pending_count(real_redis) == 0
    assert real_redis.hlen(KEYS.delivery_errors(STREAM, GROUP)) == 0
    assert [e["entry_id"] for e in worker.events("worker.dead_lettered")] == [
        bad_json, not_a_turn, refused
    ]
    assert worker.events("worker.batch_failed")
    store = EdgeVectorStore(tmp_path / "qdrant", 64)
    try:
        assert store.count_turns() == total
        assert store.count_turns("poison-nan") == 0
    finally:
        store.close()


def test_console_script_burst_exits_once_the_queue_is_drained(
    tmp_path: Path, redis_url: str, real_redis: redis.Redis, start_worker
) -> None:
    assert HIVEMEM_SCRIPT.exists(), f"{HIVEMEM_SCRIPT} (the console script) is not installed"
    env = worker_env(redis_url, tmp_path / "qdrant")
    command = [str(HIVEMEM_SCRIPT), "worker", "embed"]

    # Nothing enqueued yet (not even a stream): burst returns at once.
    empty = start_worker(env, "--burst", command=command)
    assert empty.wait(timeout=30) == 0, empty.output()
    assert empty.summary() == {"handled": 0, "dead_lettered": 0, "reclaimed": 0}

    sessions = ["burst-a", "burst-b"]
    n = _enqueue(redis_url, sessions, 150)
    started = time.monotonic()
    worker = start_worker(env, "--burst", command=command)
    assert worker.wait(timeout=60) == 0, worker.output()
    assert time.monotonic() - started < 30
    assert worker.summary() == {"handled": n, "dead_lettered": 0, "reclaimed": 0}
    assert processed_count(real_redis, sessions) == n
    assert pending_count(real_redis) == 0
    store = EdgeVectorStore(tmp_path / "qdrant", 64)
    try:
        assert store.count_turns() == n
    finally:
        store.close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("kind", "command"),
    [("missing-socket", "module"), ("closed-port", "script"), ("with-password", "module")],
)
def test_unreachable_redis_exits_nonzero_with_a_clear_message(
    tmp_path: Path, kind: str, command: str
) -> None:
    url = {
        "missing-socket": f"unix://{tmp_path}/no-such.sock",
        "closed-port": f"redis://127.0.0.1:{_closed_port()}/0",
        "with-password": f"redis://agent:s3cr3t-pw@127.0.0.1:{_closed_port()}/0",
    }[kind]
    args = WORKER_MODULE if command == "module" else [str(HIVEMEM_SCRIPT), "worker", "embed"]
    started = time.monotonic()
    code, output = _run_cli([*args, "--burst"], worker_env(url, tmp_path / "qdrant"))
    assert code != 0
    assert time.monotonic() - started < 20
    text = _flat(output)
    assert "Traceback" not in output
    assert "redis unavailable" in text, output
    assert "s3cr3t-pw" not in output
    if kind == "with-password":
        assert "***@127.0.0.1" in text


def test_missing_model_offline_exits_with_how_to_fix(
    tmp_path: Path, redis_url: str
) -> None:
    empty = tmp_path / "empty-cache"
    empty.mkdir()
    env = worker_env(redis_url, tmp_path / "qdrant", provider="fastembed",
                     extra={"FASTEMBED_CACHE_PATH": str(empty), "HF_HUB_OFFLINE": "1"})
    started = time.monotonic()
    code, output = _run_cli([*WORKER_MODULE, "--burst"], env)
    assert code != 0
    assert time.monotonic() - started < 30  # no 40 s of hub retries
    text = _flat(output)
    assert "Traceback" not in output
    assert "could not load embedding model 'sentence-transformers/all-MiniLM-L6-v2'" in text
    assert "To fix:" in text
    assert "FASTEMBED_CACHE_PATH" in text and "HF_HUB_OFFLINE=1" in text
    assert "HIVEMEM_EMBEDDING__MODEL_PATH" in text


def test_qdrant_folder_held_by_another_process_exits_with_a_clear_message(
    tmp_path: Path, redis_url: str
) -> None:
    holder = EdgeVectorStore(tmp_path / "qdrant", 64)
    try:
        code, output = _run_cli(
            [*WORKER_MODULE, "--burst"], worker_env(redis_url, tmp_path / "qdrant")
        )
    finally:
        holder.close()
    assert code != 0
    assert "Traceback" not in output
    assert "open in another process" in _flat(output), output


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"HIVEMEM_WORKER__BATCH_SIZE": "0"}, "bad configuration"),
        ({"HIVEMEM_QDRANT__URL": "http://127.0.0.1:6333"}, "set either qdrant.url or qdrant.path"),
    ],
)
def test_bad_configuration_exits_nonzero_without_traceback(
    tmp_path: Path, redis_url: str, setting: dict[str, str], message: str
) -> None:
    env = worker_env(redis_url, tmp_path / "qdrant", extra=setting)
    code, output = _run_cli([*WORKER_MODULE, "--burst"], env)
    assert code != 0
    assert "Traceback" not in output
    assert message in _flat(output), output


def test_no_vector_store_configured_says_which_variable_to_set(redis_url: str) -> None:
    code, output = _run_cli([*WORKER_MODULE, "--burst"], worker_env(redis_url, None))
    assert code != 0
    assert "Traceback" not in output
    assert "HIVEMEM_QDRANT__PATH" in _flat(output) and "HIVEMEM_QDRANT__URL" in _flat(output)


def test_reflect_worker_process_runs_the_jobs_enqueued_by_the_boundary_stage(
    tmp_path: Path, redis_url: str, real_redis: redis.Redis, start_worker
) -> None:
    """embed, boundary and reflect workers as three processes (in turn, with --burst): the
    reflect process hands the jobs it picks up (enqueued by name by the boundary process)
    the context its wiring built, and reports how many it ran."""
    env = worker_env(redis_url, tmp_path / "qdrant")
    sessions = ["reflect-a", "reflect-b"]
    with MemoryClient(server_settings(redis_url)) as producer:
        for sid in sessions:
            producer.ingest(sid, "user", "We decided to use PostgreSQL for the database")
            producer.ingest(sid, "assistant", "Okay, PostgreSQL it is.")
            producer.close_session(sid)
    for kind in ("embed", "boundary"):
        stage = start_worker(env, "--burst", command=[*WORKER_MODULE[:-1], kind])
        assert stage.wait(timeout=60) == 0, stage.output()
    reflect = start_worker(env, "--burst", command=[*WORKER_MODULE[:-1], "reflect"])
    assert reflect.wait(timeout=60) == 0, reflect.output()
    assert reflect.summary()["handled"] == len(sessions)
    state = ReflectionState(real_redis, KEYS)
    assert [state.reflected(sid) for sid in sessions] == [1, 1]
    assert {t["reflector"] for t in state.traces(10)} == {"heuristic"}
    store = EdgeVectorStore(tmp_path / "qdrant", 64)
    try:
        for sid in sessions:
            assert store.list_facts(sid, ["active"]), sid
    finally:
        store.close()
