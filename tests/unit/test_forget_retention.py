"""Retention: with `lifecycle.retention_days` (or a namespace's own), the turns and facts
older than it are forgotten as any forget is, as of an injected clock; a namespace at 0
keeps everything; no retention set (the default): nothing is touched. And the sweep runs
one round per interval across processes (a lease)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from hivemem import MemoryClient
from hivemem.config import Settings
from hivemem.providers.embedders import HashingEmbedder
from hivemem.workers.retention import RetentionSweep
from tests.support.forget_data import T0, files_with, new_secret, payloads_with, redis_keys_with


def _client(tmp_path: Path, settings: Settings, **lifecycle: object) -> MemoryClient:
    tuned = settings.model_copy(update={"lifecycle": settings.lifecycle.model_copy(
        update={"forget_settle_s": 0.0, "forget_settle_timeout_s": 1.0, **lifecycle})})
    return MemoryClient.local(tmp_path / "store", tuned, embedder=HashingEmbedder(1024),
                              workers=1, as_guest=False)


@pytest.fixture
def old_and_new(tmp_path: Path, settings: Settings) -> Iterator[tuple[MemoryClient, str]]:
    secret = new_secret()
    client = _client(tmp_path, settings, retention_days=30.0,
                     namespace_retention_days={"archive": 0.0})
    try:
        for ns in ("default", "archive"):
            handle = client.scoped(namespace=ns)
            sid = f"{ns}-s"
            handle.ingest(sid, "user", f"We decided the old vault code is {secret}",
                          markers=["decision"], timestamp=T0, turn_id="old")
            handle.close_episode(sid)
            handle.wait_until_reflected(sid, 30)
            handle.ingest(sid, "user", "We decided to move the office to Lyon",
                          markers=["decision"], timestamp=T0 + timedelta(days=40),
                          turn_id="new")
            handle.close_episode(sid)
            handle.wait_until_reflected(sid, 30)
        yield client, secret
    finally:
        client.close()


def _turns(client: MemoryClient, sid: str) -> list[str]:
    return sorted(t.turn_id for t in client.admin.recent_turns(sid, 50))


def test_retention_forgets_what_is_older_as_of_the_clock(
        old_and_new: tuple[MemoryClient, str], tmp_path: Path) -> None:
    client, secret = old_and_new
    # 20 days after the first turn nothing is 30 days old yet.
    assert all(r.total() == 0 for r in client.admin.apply_retention(now=T0 + timedelta(days=20)))
    assert _turns(client, "default-s") == ["new", "old"]
    receipts = client.admin.apply_retention(now=T0 + timedelta(days=45))
    assert [r.target for r in receipts] == ["retention"]  # "archive" keeps everything
    assert receipts[0].removed["vectors"]["turns"] == 1
    assert _turns(client, "default-s") == ["new"]
    assert _turns(client, "archive/archive-s") == ["new", "old"]  # the operator's name
    facts = [f.content for f in client.admin.facts("default-s", include_history=True)]
    assert facts and not any(secret in f for f in facts)
    assert any("Lyon" in f for f in facts)
    assert any(secret in f.content for f in client.admin.facts("archive/archive-s"))
    # 80 days on, the new turn is old too: the session goes whole.
    client.admin.apply_retention(now=T0 + timedelta(days=80))
    assert "default-s" not in client.admin.sessions()
    # Only the archive namespace's copies of the secret are left.
    vectors = client.vector_store()
    holders = {vectors.retrieve(c, [i])[0].payload["session_id"]
               for c, i in (p.split("/") for p in payloads_with(vectors, secret))}
    assert holders == {"archive-s"}
    assert redis_keys_with(client.admin.redis, secret)  # the archive's window and streams


def test_no_retention_by_default(tmp_path: Path, settings: Settings) -> None:
    client = _client(tmp_path, settings)
    try:
        client.scoped().ingest("s", "user", "an old turn", timestamp=T0)
        client.scoped().wait_until_processed("s", 30)
        assert client.admin.apply_retention(now=T0 + timedelta(days=3650)) == []
        assert _turns(client, "s") != []
    finally:
        client.close()
    assert files_with(tmp_path / "store", "an old turn")


def test_the_sweep_runs_one_round_per_interval() -> None:
    held: set[str] = set()

    def take(owner: str, _ms: int) -> bool:
        if held:
            return False
        held.add(owner)
        return True

    runs: list[int] = []
    first = RetentionSweep(lambda: runs.append(1) or [], take, 60)
    second = RetentionSweep(lambda: runs.append(2) or [], take, 60)
    assert first.run_once() == 0 and second.run_once() == 0
    assert runs == [1]
