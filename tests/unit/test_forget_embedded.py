"""Forget in embedded mode: after a forget and a stop, no byte under the store folder holds
the secret (the AOF rewritten, the engine's collections rebuilt), and the bystander session
recalls and holds the same facts as before."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hivemem import MemoryClient
from hivemem.config import Settings
from hivemem.errors import NotFound
from hivemem.service.forget import Forgetting
from hivemem.store.erasure import ErasureStore
from hivemem.store.vectors.base import Point
from tests.support.forget_data import (
    PoisonEmbedder,
    files_with,
    new_secret,
    payloads_with,
    redis_keys_with,
    wait_for,
    write_bystander,
    write_secret_session,
)


@pytest.fixture
def forget_settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"lifecycle": settings.lifecycle.model_copy(
        update={"forget_settle_s": 0.05, "forget_settle_timeout_s": 2.0})})


def _open(folder: Path, settings: Settings) -> MemoryClient:
    return MemoryClient.local(folder, settings, embedder=PoisonEmbedder(1024), workers=1,
                              as_guest=False)


def _written(client: MemoryClient, secret: str) -> None:
    """The secret is everywhere it should be before the forget."""
    admin = client.admin
    write_secret_session(client, "secret", secret)
    write_bystander(client, "other")
    wait_for(lambda: any(secret in str(d.fields) for d in admin.dead_letters()),
             what="the dead letter")
    client.wait_until_reflected("secret", 30)
    client.wait_until_reflected("other", 30)
    facts = admin.facts("secret", include_history=True)
    assert any(secret in f.content for f in facts), facts
    assert any(f.status == "superseded" for f in facts), facts
    assert any(secret in str(t) for t in admin.traces(session_id="secret"))


def _bystander(client: MemoryClient) -> tuple[list[str], list[str]]:
    facts = sorted(f"{f.fact_id}:{f.content}:{f.status}"
                   for f in client.admin.facts("other", include_history=True))
    recalled = [i.content for i in client.recall("other", "how do we deploy?",
                                                 token_budget=200)]
    return facts, recalled


def test_forget_session_leaves_no_byte_on_disk(tmp_path: Path,
                                               forget_settings: Settings) -> None:
    folder = tmp_path / "store"
    secret = new_secret()
    client = _open(folder, forget_settings)
    try:
        _written(client, secret)
        assert files_with(folder, secret)  # the test can fail: the bytes are there first
        before = _bystander(client)
        receipt = client.scoped().forget("secret")
        assert receipt.target == "session"
        assert receipt.removed["vectors"]["turns"] >= 3
        assert receipt.removed["vectors"]["facts"] >= 2
        assert receipt.removed["redis"]["dead_letters"] >= 1
        assert receipt.removed["redis"]["traces"] >= 1
        assert receipt.disk.redis_aof_rewritten and receipt.disk.vectors_compacted
        assert not redis_keys_with(client.admin.redis, secret)
        assert not payloads_with(client.vector_store(), secret)
        with pytest.raises(NotFound):
            client.scoped().forget("secret")
        assert _bystander(client) == before
        erasures = client.admin.erasures()
        assert erasures[0]["forget_id"] == receipt.forget_id
        assert secret not in str(erasures)
    finally:
        client.close()
    assert not files_with(folder, secret)
    reopened = _open(folder, forget_settings)
    try:
        assert _bystander(reopened) == before
        assert "secret" not in reopened.admin.sessions()
    finally:
        reopened.close()
    assert not files_with(folder, secret)


def test_forget_one_turn_keeps_the_rest(tmp_path: Path, forget_settings: Settings) -> None:
    folder = tmp_path / "store"
    secret = new_secret()
    client = _open(folder, forget_settings)
    try:
        handle = client.scoped()
        handle.ingest("s", "user", "We decided to use Redis streams for the queue",
                      markers=["decision"], turn_id="keep")
        handle.ingest("s", "user", f"the staging token is {secret}", turn_id="leak")
        handle.close_episode("s")
        client.wait_until_reflected("s", 30)
        warm = handle.recall("s", "what is the staging token?", token_budget=200)
        assert any(secret in i.content for i in warm)  # recall's caches hold it now
        receipt = handle.forget("s", turn_ids=["leak"])
        assert receipt.removed["vectors"]["turns"] == 1
        assert not redis_keys_with(client.admin.redis, secret)
        assert not payloads_with(client.vector_store(), secret)
        kept = [t.turn_id for t in client.admin.recent_turns("s", 10)]
        assert kept == ["keep"]
        recalled = handle.recall("s", "what queue do we use?", token_budget=200)
        assert any("Redis streams" in i.content for i in recalled)
        again = handle.recall("s", "what is the staging token?", token_budget=200)
        assert not any(secret in i.content for i in again)
        with pytest.raises(NotFound):
            handle.forget("s", turn_ids=["leak"])
    finally:
        client.close()
    assert not files_with(folder, secret)


def _fact_with(client: MemoryClient, session: str, text: str) -> Any:
    return next(f for f in client.admin.facts(session, include_history=True)
                if text in f.content)


def test_a_forget_cut_short_is_finished_when_the_store_opens_again(
        tmp_path: Path, forget_settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "store"
    secret = new_secret()
    client = _open(folder, forget_settings)
    try:
        handle = client.scoped()
        handle.ingest("cut", "user", f"We decided the door code is {secret}",
                      markers=["decision"])
        handle.ingest("keep", "user", "We decided to paint the door blue", markers=["decision"])
        handle.wait_until_processed("cut", 30)

        def crash(*_args: object, **_kwargs: object) -> int:
            raise RuntimeError("the process dies here")

        # Dies after the vectors and the streams are done, before the rest.
        monkeypatch.setattr(ErasureStore, "erase_traces", crash)
        with pytest.raises(RuntimeError):
            handle.forget("cut")
        monkeypatch.undo()
        pending = client.admin.pending_forgets()
        assert [p.session_id for p in pending] == ["cut"]
    finally:
        client.close()
    reopened = _open(folder, forget_settings)
    try:
        assert not reopened.admin.pending_forgets()
        assert reopened.admin.erasures(1)[0]["forget_id"] == pending[0].forget_id
        assert "cut" not in reopened.admin.sessions()
        assert "keep" in reopened.admin.sessions()
        assert not redis_keys_with(reopened.admin.redis, secret)
        assert not payloads_with(reopened.vector_store(), secret)
        assert reopened.admin.resume_forgets() == []  # nothing left to finish
    finally:
        reopened.close()
    assert not files_with(folder, secret)


def test_an_owner_killed_mid_forget_is_finished_by_the_next(tmp_path: Path,
                                                          forget_settings: Settings) -> None:
    """SIGKILL of the process in the middle of its forget: the next owner of the folder
    finishes it when it opens, and the secret is then in no file."""
    folder = tmp_path / "store"
    secret = new_secret()
    repo = Path(__file__).resolve().parents[2]
    owner = subprocess.Popen([sys.executable, "-m", "tests.support.forget_crash", str(folder),
                              secret], cwd=repo, stdout=subprocess.PIPE, text=True,
                             stderr=subprocess.DEVNULL)
    try:
        assert owner.stdout is not None
        line = owner.stdout.readline()
        assert line.strip() == "forgetting", line
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=30)
    assert files_with(folder, secret)  # killed before its disk step: the bytes are there
    reopened = MemoryClient.local(folder, forget_settings.model_copy(
        update={"embedding": forget_settings.embedding.model_copy(update={"dim": 64})}),
        embedder=PoisonEmbedder(64), workers=1, as_guest=False)
    try:
        assert not reopened.admin.pending_forgets()
        assert reopened.admin.erasures(1)[0]["target"] == "session"
        assert reopened.admin.sessions() == ["kept"]
        assert not redis_keys_with(reopened.admin.redis, secret)
    finally:
        reopened.close()
    assert not files_with(folder, secret)


def test_a_write_landing_between_the_passes_is_forgotten_too(
        tmp_path: Path, forget_settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """What an embed worker that read a turn before the forget began does: it writes the
    turn's point after the first pass deleted the session's. The second pass removes it."""
    secret = new_secret()
    client = _open(tmp_path / "store", forget_settings)
    try:
        handle = client.scoped()
        handle.ingest("late", "user", f"the late token is {secret}", turn_id="t1")
        handle.wait_until_processed("late", 30)
        vectors = client.vector_store()
        stored = vectors.retrieve("turns", [h.point_id for h in vectors.get_turns(
            "late", ["t1"])])
        original = Forgetting.settle_between_passes

        def late_write(self: Forgetting, *args: Any) -> None:
            original(self, *args)
            vectors.upsert("turns", [Point(h.id, h.vector, h.payload, None, h.window)
                                     for h in stored])  # the straggler lands now

        monkeypatch.setattr(Forgetting, "settle_between_passes", late_write)
        receipt = handle.forget("late")
        assert receipt.removed["vectors"]["turns"] == 2  # once per pass
        assert not payloads_with(vectors, secret)
    finally:
        client.close()
