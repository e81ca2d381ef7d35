"""`hivemem status`: queues, lag, workers (XINFO CONSUMERS) and dead letters at a glance."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from hivemem.cli.main import cli
from hivemem.config import ReflectionSettings
from hivemem.pipeline.topology import Keys
from hivemem.store.status import PipelineStatus, stage_statuses
from hivemem.workers.queue import JobQueue


def pipeline_status(redis_client: redis.Redis, keys: Keys, queue: str) -> PipelineStatus:
    """What the operator's status reads: the stages, and the reflect queue through rq."""
    jobs = JobQueue(redis_client, queue, ReflectionSettings())
    return PipelineStatus(stages=stage_statuses(redis_client, keys), reflect_queue=queue,
                          reflect_jobs=jobs.counts(), reflect_workers=jobs.workers())


def test_pipeline_status_reads_groups_consumers_and_dead_letters(
    redis_client: redis.Redis,
) -> None:
    keys = Keys("hm")
    empty = pipeline_status(redis_client, keys, "hivemem-reflect")
    assert [(s.stage, s.lag, s.consumers) for s in empty.stages] == [
        ("embed", 0, []), ("boundary", 0, [])]
    for i in range(3):
        redis_client.xadd(keys.turns_stream(0), {"seq": str(i)})
    redis_client.xgroup_create(keys.turns_stream(0), "embed", id="0")
    redis_client.xreadgroup("embed", "worker-1", {keys.turns_stream(0): ">"}, count=1)
    redis_client.xadd(keys.dead_letters(keys.turns_stream(0)), {"error": "boom"})
    redis_client.rpush("rq:queue:hivemem-reflect", "job-1")
    status = pipeline_status(redis_client, keys, "hivemem-reflect")
    embed = status.stages[0]
    assert (embed.length, embed.lag, embed.pending, embed.dead_letters) == (3, 2, 1, 1)
    assert [(c.name, c.pending) for c in embed.consumers] == [("worker-1", 1)]
    assert status.reflect_jobs["queued"] == 1 and status.reflect_workers == 0
    assert [s.stage for s in status.stages] == ["embed", "boundary"]  # no window group yet
    redis_client.xadd(keys.embedded_stream(0), {"kind": "skip", "seq": "1", "session_id": "s"})
    redis_client.xgroup_create(keys.embedded_stream(0), "window", id="0")
    window = pipeline_status(redis_client, keys, "hivemem-reflect").stages[-1]
    assert (window.stage, window.lag, window.dead_letters) == ("window", 1, 0)


def test_status_command_shows_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HIVEMEM_REDIS__URL", "HIVEMEM_QDRANT__URL", "HIVEMEM_QDRANT__PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HIVEMEM_EMBEDDING__PROVIDER", "hashing")
    store = str(tmp_path / "mem")
    runner = CliRunner()
    added = runner.invoke(cli, ["--local", store, "ingest", "We decided to use Redis", "--json"])
    assert added.exit_code == 0, added.output
    result = runner.invoke(cli, ["--local", store, "status", "--json"])
    assert result.exit_code == 0, result.output
    pipeline = json.loads(result.output)["pipeline"]
    embed = pipeline["stages"][0]
    assert embed["stage"] == "embed" and embed["consumers"], pipeline
    table = runner.invoke(cli, ["--local", store, "status"])
    assert "workers" in table.output and "dead letters" in table.output
