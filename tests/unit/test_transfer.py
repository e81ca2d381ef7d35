"""Export / import / backup / restore, on fakeredis and a real redis-server: the round trip is
byte-identical, every mode does what it says, and a bad file writes nothing."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import redis
from support.lifecycle_data import T0, fid, seed

from hivemem import MemoryClient, Settings
from hivemem.domain.episode import Episode
from hivemem.errors import ValidationError
from hivemem.providers.embedders import HashingEmbedder
from hivemem.store.sessions import SessionStore
from hivemem.store.vectors.server import ServerVectorStore

Pipeline = tuple[MemoryClient, Callable[[], None]]


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """Staleness prunes even these small sessions (by default only above 200 facts)."""
    return settings.model_copy(update={
        "compaction": settings.compaction.model_copy(update={"stale_above": 0})})
MakeClient = Callable[[str], MemoryClient]


@pytest.fixture
def make_client(redis_client: redis.Redis, settings: Settings) -> Iterator[MakeClient]:
    """Another, empty installation: the same Redis under its own key prefix, its own Qdrant."""
    made: list[MemoryClient] = []

    def make(prefix: str) -> MemoryClient:
        other = settings.model_copy(update={
            "redis": settings.redis.model_copy(update={"key_prefix": prefix})})
        vectors = ServerVectorStore(other.qdrant, 1024, location=":memory:")
        client = MemoryClient(other, redis_client=redis_client, vector_store=vectors,
                              embedder=HashingEmbedder(1024))
        made.append(client)
        return client

    yield make
    for client in made:
        client.vector_store().close()


def populated(pipeline: Pipeline) -> MemoryClient:
    client, drain = pipeline
    seed(client, drain, "s1")
    seed(client, drain, "s2", "frontend")
    store = SessionStore(client._redis, client.keys)
    store.add_episodes("s1", [Episode(
        episode_id="ep-s1-1", session_id="s1", index=1, turn_ids=("t0", "t1"), seq_start=1,
        seq_end=2, started_at=T0, ended_at=T0 + timedelta(days=1), close_reason="manual")])
    client.admin.set_session_info("s1", title="Database work", agent_id="planner")
    client.admin.compact("s1")  # superseded_by references and audit events to carry over
    return client


@pytest.mark.parametrize("vectors", [True, False])
def test_export_import_export_is_identical(
    pipeline: Pipeline, make_client: MakeClient, tmp_path: Path, vectors: bool
) -> None:
    source = populated(pipeline)
    first = tmp_path / "first.jsonl"
    summary = source.admin.export(first, vectors=vectors)
    assert summary.counts == {"session": 2, "turn": 8, "episode": 1, "fact": 8, "audit": 4}
    header = json.loads(first.read_text().splitlines()[0])
    assert header["format"] == "hivemem.export" and header["version"] == 1
    target = make_client("copy")
    done = target.admin.import_file(first, mode="append")
    assert done.sessions == {"s1": "s1", "s2": "s2"} and done.embedded == (0 if vectors else 16)
    second = tmp_path / "second.jsonl"
    target.admin.export(second, vectors=vectors)
    assert second.read_bytes() == first.read_bytes()
    # What was imported works: stats, facts, audit, recall.
    assert target.get_session_stats("s1").turns_processed == 4
    assert target.admin.session_info("s1").title == "Database work"
    assert [e.action for e in target.admin.audit(fid("s1-a"))] == ["merged", "reinforced"]
    assert target.recall("s1", "which database?", token_budget=300)


def test_append_renames_a_taken_session_and_remaps_every_reference(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    client = populated(pipeline)
    path = tmp_path / "s1.jsonl.gz"
    client.admin.export(path, ["s1"], vectors=True)
    with gzip.open(path, "rt") as fh:
        assert json.loads(fh.readline())["sessions"] == ["s1"]
    done = client.admin.import_file(path, mode="append")
    assert done.sessions == {"s1": "s1.2"}
    copy = {f.content: f for f in client.facts("s1.2", include_history=True)}
    original = {f.content: f for f in client.facts("s1", include_history=True)}
    assert set(copy) == set(original)
    merged = copy["The database is PostgreSQL"]
    assert merged.fact_id != fid("s1-a") and merged.session_id == "s1.2"
    keeper = copy["the database is postgresql!"]
    assert merged.superseded_by == keeper.fact_id  # the reference follows the new id
    events = client.admin.audit(merged.fact_id)
    assert events[0].related == [keeper.fact_id] and events[0].session_id == "s1.2"
    assert client.episodes("s1.2")[0].episode_id != "ep-s1-1"
    assert len(client.facts("s1", include_history=True)) == 4  # the original is untouched


def test_replace_skip_existing_and_overwrite(pipeline: Pipeline, tmp_path: Path) -> None:
    client = populated(pipeline)
    path = tmp_path / "all.jsonl"
    client.admin.export(path, vectors=True)
    store = client.vector_store()
    embed = HashingEmbedder(1024).embed_documents
    # Change one fact and add one after the export.
    goal = next(f for f in client.facts("s2") if f.fact_id == fid("s2-goal"))
    edited = goal.model_copy(update={"content": "Ship it next week"})
    extra = goal.model_copy(update={"fact_id": fid("s2-extra"), "content": "An extra fact"})
    store.upsert_facts([edited, extra], embed([edited.content, extra.content]))

    client.admin.import_file(path, mode="skip_existing")
    facts = {f.fact_id: f.content for f in client.facts("s2")}
    assert facts[fid("s2-goal")] == "Ship it next week" and fid("s2-extra") in facts

    summary = client.admin.import_file(path, mode="overwrite")
    facts = {f.fact_id: f.content for f in client.facts("s2")}
    assert facts[fid("s2-goal")] == "Ship the frontend migration" and fid("s2-extra") in facts
    assert summary.skipped.get("audit", 0) == 4  # events are never written twice
    assert len(client.admin.audit_log("s1")) == 4

    client.admin.import_file(path, mode="replace")
    facts = {f.fact_id: f.content for f in client.facts("s2")}
    assert fid("s2-extra") not in facts and facts[fid("s2-goal")] == "Ship the frontend migration"
    again = tmp_path / "again.jsonl"
    client.admin.export(again, vectors=True)
    assert again.read_bytes() == path.read_bytes()


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


@pytest.mark.parametrize("damage,message", [
    (lambda lines: ['{"format": "other.export", "version": 1}', *lines[1:]], "unknown format"),
    (lambda lines: [lines[0].replace('"version":1', '"version":2'), *lines[1:]],
     "unsupported hivemem.export version 2"),
    (lambda lines: [*lines[:5], "{not json", *lines[5:]], "line 6: corrupt line"),
    (lambda lines: [*lines[:5], lines[5].replace('"turn"', '"tune"', 1), *lines[6:]],
     "line 6"),
    (lambda lines: lines[:-1], "truncated: no end record"),
    (lambda lines: [*lines[:-3], *lines[-2:]], "truncated or corrupt"),
])
def test_a_bad_file_is_refused_before_anything_is_written(
    pipeline: Pipeline, make_client: MakeClient, tmp_path: Path,
    damage: Callable[[list[str]], list[str]], message: str,
) -> None:
    source = populated(pipeline)
    good = tmp_path / "good.jsonl"
    source.admin.export(good, vectors=True)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(damage(_lines(good))) + "\n")
    target = make_client("empty")
    with pytest.raises(ValidationError, match=message):
        target.admin.import_file(bad, mode="append")
    assert target.admin.sessions() == []
    assert target.vector_store().count_turns() == 0


def test_backup_and_restore(pipeline: Pipeline, make_client: MakeClient, tmp_path: Path) -> None:
    source = populated(pipeline)
    path = tmp_path / "backup.jsonl.gz"
    summary = source.admin.backup(path)
    assert summary.vectors and summary.sessions == ["s1", "s2"]
    target = make_client("restored")
    restored = target.admin.restore(path)
    assert restored.mode == "replace" and restored.embedded == 0
    assert [f.fact_id for f in target.facts("s1")] == [f.fact_id for f in source.facts("s1")]
    with pytest.raises(ValidationError, match="mode"):
        target.admin.import_file(path, mode="merge")
    with pytest.raises(ValidationError, match="no such file"):
        target.admin.import_file(tmp_path / "missing.jsonl")
    with pytest.raises(ValidationError, match="unknown session"):
        source.admin.export(tmp_path / "x.jsonl", ["nope"])
