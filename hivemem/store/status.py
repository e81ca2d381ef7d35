"""The deployment's pipeline at a glance, from Redis: per stage the lag, pending entries,
dead letters and consumers (XINFO CONSUMERS).
Also the one number ingest's backpressure needs: a stage's backlog (`stage_backlog`), and
what a stage on spare capacity asks of the stage before it (`stage_activity`).

Read by `hivemem status` and by the metrics collector (through the service, which adds the
reflect queue's counts from rq).
"""

from __future__ import annotations

from typing import Any

import redis as redis_py
from pydantic import BaseModel, Field

from hivemem.errors import StoreUnavailable
from hivemem.pipeline.topology import Keys, Stage, Topology
from hivemem.store.redis import Redis, as_text, is_cluster, redis_errors


class Consumer(BaseModel):
    name: str
    pending: int
    idle_ms: int


class StageStatus(BaseModel):
    stage: str
    stream: str
    length: int = 0
    lag: int = 0
    pending: int = 0
    dead_letters: int = 0
    consumers: list[Consumer] = Field(default_factory=list)


class PipelineStatus(BaseModel):
    stages: list[StageStatus]
    reflect_queue: str
    reflect_jobs: dict[str, int]
    reflect_workers: int
    # Of those, the ones not heard from lately (killed, or backing off while their Redis is
    # away): rq keeps a dead worker registered for minutes.
    reflect_workers_stale: int = 0
    # Sessions whose boundary buffer holds entries, and how long the oldest has waited (ms;
    # None: none waits). Entries wait for a predecessor still on its way, or for a lease
    # to lapse before the boundary workers' sweep drains them (`episodes.sweep_interval_s`):
    # a wait much longer than episodes.lease_ms + that interval is a stall.
    boundary_waiting: int = 0
    boundary_waiting_oldest_ms: int | None = None



def _stage(redis: Redis, stage: Stage) -> StageStatus:
    """The stage summed over its partitions; a consumer that reads several partitions is
    one row (its pending entries and its lowest idle time)."""
    status = StageStatus(stage=stage.name, stream=stage.stream_for(0))
    streams = stage.streams()
    pipe = redis.pipeline(transaction=False)
    for partition, stream in enumerate(streams):
        pipe.exists(stream)
        pipe.xlen(stage.dead_letters_for(partition))
        pipe.xlen(stream)
    replies = pipe.execute()
    consumers: dict[str, Consumer] = {}
    for i, stream in enumerate(streams):
        exists, dead, length = replies[3 * i: 3 * i + 3]
        status.dead_letters += int(dead)
        if not exists:
            continue
        status.length += int(length)
        for info in redis.xinfo_groups(stream):
            if as_text(info["name"]) != stage.group:
                continue
            status.lag += int(info.get("lag") or 0)
            status.pending += int(info["pending"])
            for consumer in redis.xinfo_consumers(stream, stage.group):
                name = as_text(consumer["name"])
                seen = consumers.get(name)
                pending, idle = int(consumer["pending"]), int(consumer["idle"])
                if seen is not None:
                    pending += seen.pending
                    idle = min(idle, seen.idle_ms)
                consumers[name] = Consumer(name=name, pending=pending, idle_ms=idle)
    status.consumers = sorted(consumers.values(), key=lambda c: c.name)
    return status


def stage_statuses(redis: Redis, keys: Keys) -> list[StageStatus]:
    """Every stage's row of the pipeline status (the reflect queue's counts are rq's:
    `hivemem.workers.queue.JobQueue`)."""
    with redis_errors("read pipeline status"):
        topology = Topology(keys)
        stage_rows = [_stage(redis, s) for s in topology.stages]
        # The window stage reads the boundary stage's stream (and shares its dead letters,
        # counted there): shown once its group exists, i.e. with `window_mode: refined`.
        window = _stage(redis, topology.window)
        if window.lag or window.pending or window.consumers:
            stage_rows.append(window.model_copy(update={"dead_letters": 0}))
    return stage_rows


def stage_backlog(redis: Redis, stage: Stage) -> int:
    """Entries `stage`'s group has not finished, over every partition: never delivered (lag)
    plus delivered but not acked (pending). Before the group exists: the stream's length.
    One pipelined round trip."""
    return stage_activity(redis, stage).backlog


class StageActivity(BaseModel):
    """A stage's backlog, and how long ago (server clock) the newest entry it was handed
    was written (None: it has read nothing yet)."""

    backlog: int
    idle_ms: int | None


def stage_activity(redis: Redis, stage: Stage) -> StageActivity:
    """`stage_backlog` and the age of the newest entry the stage's group was delivered
    (its id's milliseconds against the server's TIME). One pipelined round trip; on a
    Redis Cluster, whose pipelines refuse TIME (it names no key), TIME is a second one
    (to any node: a cluster's clocks agree to well under the idle times asked about)."""
    clustered = is_cluster(redis)
    with redis_errors(f"read {stage.name} activity"):
        pipe = redis.pipeline(transaction=False)
        if not clustered:
            pipe.time()
        for stream in stage.streams():
            pipe.xlen(stream)
            pipe.xinfo_groups(stream)
        replies = pipe.execute(raise_on_error=False)
        if clustered:
            replies.insert(0, redis.time())
    now = replies[0]
    if isinstance(now, Exception):
        raise StoreUnavailable("redis", f"read {stage.name} activity: {now}")
    now_ms = int(now[0]) * 1000 + int(now[1]) // 1000
    total = 0
    newest: int | None = None
    for length, groups in zip(replies[1::2], replies[2::2], strict=True):
        if isinstance(length, redis_py.RedisError) and not isinstance(
                length, redis_py.ResponseError):
            raise StoreUnavailable("redis", f"read {stage.name} activity: {length}")
        if isinstance(groups, Exception):  # no stream yet
            continue
        total += _group_backlog(stage.group, int(length), groups)
        for info in groups:
            if as_text(info["name"]) == stage.group:
                delivered = int(as_text(info["last-delivered-id"]).split("-")[0])
                if delivered and (newest is None or delivered > newest):
                    newest = delivered
    return StageActivity(backlog=total,
                         idle_ms=None if newest is None else max(0, now_ms - newest))


def _group_backlog(group: str, length: int, groups: list[Any]) -> int:
    for info in groups:
        if as_text(info["name"]) == group:
            lag = info.get("lag")
            if lag is None:  # Redis cannot tell after deletions: count it all
                return length
            return int(lag) + int(info.get("pending") or 0)
    return length
