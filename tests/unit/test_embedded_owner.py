"""The embedded folder's owner: its lock, socket paths, the guest wire format, and the model
location a workspace records."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import redis

from hivemem import FolderBusy, MemoryClient
from hivemem.config import Settings
from hivemem.domain.scope import Scope
from hivemem.providers.embedders import HashingEmbedder
from hivemem.providers.lexical import SparseVector
from hivemem.runtime.child_server import MAX_SOCKET_PATH, socket_path
from hivemem.runtime.owner import OwnerLock, owner_of, read_key, read_record
from hivemem.runtime.workspace import init_workspace, load_workspace
from hivemem.store.vectors import wire
from hivemem.store.vectors.base import SCOPE, Between, Hit, Point
from hivemem.store.vectors.proxy import ProxyVectorStore


def test_a_long_folder_gets_a_short_stable_socket_path(tmp_path: Path) -> None:
    deep = tmp_path / ("x" * 60) / ("y" * 60)
    path = socket_path(deep)
    assert len(os.fsencode(path)) <= MAX_SOCKET_PATH
    assert path == socket_path(deep)
    assert socket_path(deep, "owner.sock") != path
    assert socket_path(tmp_path) == tmp_path.resolve() / "redis.sock"


def test_two_owners_never_hold_one_folder(tmp_path: Path) -> None:
    first, second = OwnerLock(tmp_path), OwnerLock(tmp_path)
    assert first.acquire()
    assert not second.acquire()
    first.publish("unix:///x/redis.sock", "unix:///x/owner.sock")
    key = first.make_key()
    assert (tmp_path / "owner.key").stat().st_mode & 0o777 == 0o600
    assert read_key(tmp_path) == key
    record = owner_of(tmp_path)
    assert record is not None and record.pid == os.getpid()
    first.release()
    assert read_record(tmp_path) is None and read_key(tmp_path) is None
    assert owner_of(tmp_path) is None  # lock free: nobody owns it
    assert second.acquire()
    second.release()


def test_the_wire_format_round_trips_points_hits_and_scoped_filters() -> None:
    vector = np.arange(4, dtype=np.float32) / 3
    point = Point("p1", vector, {"content": "a[i] = b", "n": 1}, SparseVector([1, 5], [0.5, 2.0]))
    (back,) = wire.decode_points(wire.encode_points([point]))
    assert back.id == "p1" and back.payload == point.payload and back.sparse == point.sparse
    np.testing.assert_array_equal(back.vector, vector)
    (hit,) = wire.decode_hits(wire.encode_hits([Hit("h", 0.25, {"k": "v"}, None)]))
    assert (hit.id, hit.score, hit.payload, hit.vector) == ("h", 0.25, {"k": "v"}, None)
    where = {"session_id": "s", "markers": ["decision"], "seq": Between(3, 9),
             SCOPE: Scope("team", "agent-1")}
    assert wire.decode_where(json.loads(json.dumps(wire.encode_where(where)))) == where
    since = {"written_at": Between(1767254400.25)}  # a float, no upper end
    assert wire.decode_where(json.loads(json.dumps(wire.encode_where(since)))) == since


def test_a_workspace_records_where_its_model_is_and_goes_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FASTEMBED_CACHE_PATH", raising=False)  # the recorded one is used
    cache = tmp_path / "cache"
    (cache / "models--Qdrant--all-MiniLM-L6-v2-onnx").mkdir(parents=True)
    settings = Settings.model_validate(
        {"embedding": {"provider": "fastembed", "dim": 384, "cache_dir": str(cache)}})
    workspace, created = init_workspace(tmp_path / "ws", settings)
    assert created
    recorded = load_workspace(tmp_path / "ws").config.embedding
    assert recorded.cache_dir == cache.resolve() and recorded.offline
    later = workspace.settings(Settings.model_validate({}))
    assert later.embedding.cache_dir == cache.resolve() and later.embedding.offline


def test_a_second_client_on_an_owned_folder_is_the_owners_guest(
    tmp_path: Path, settings: Settings, embedder: HashingEmbedder
) -> None:
    owner = MemoryClient.local(tmp_path, settings, embedder=embedder, workers=1)
    try:
        owner.ingest("s", "user", "the deploy runs on fridays")
        owner.wait_until_processed("s", timeout=30)
        with pytest.raises(FolderBusy):
            MemoryClient.local(tmp_path, settings.model_copy(update={
                "embedded": settings.embedded.model_copy(update={"lock_wait_s": 0})}),
                embedder=embedder, as_guest=False)
        guest = MemoryClient.local(tmp_path, settings, embedder=embedder)
        try:
            assert isinstance(guest.vector_store(), ProxyVectorStore)
            found = guest.recall("s", "when does the deploy run")
            assert any("fridays" in item.content for item in found.items)
            key, _info = guest.admin.api_keys().create("team")
            guest.ingest("s", "user", "the guest adds a turn about tuesdays")
        finally:
            guest.close()
        assert [k.namespace for k in owner.admin.api_keys().list()] == ["team"]
        assert key.startswith("hm")
        owner.wait_until_processed("s", timeout=30)  # the owner's workers embedded it
        assert owner.vector_store().count_turns("s") == 2
    finally:
        owner.close()


def test_readyz_checks_say_why_a_store_is_not_ready(
    settings: Settings, embedder: HashingEmbedder
) -> None:
    unreachable = ProxyVectorStore(None, None, "x-key", unreachable="owned by process 42")
    client = MemoryClient(settings.model_copy(update={"redis": settings.redis.model_copy(
        update={"url": "unix:///nonexistent/hivemem-test.sock"})}),
        redis_client=redis.Redis(unix_socket_path="/nonexistent/hivemem-test.sock"),
        vector_store=unreachable, embedder=embedder)
    checks = client.admin.ready()
    assert checks["redis"].startswith("unavailable: redis unavailable: ping:")
    assert checks["vectors"] == "unavailable: vectors unavailable: owned by process 42"
