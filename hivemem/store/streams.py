"""Redis Streams with consumer groups: read, claim, ack, dead-letter, trim.

Redis replies are decoded here (bytes to str, the RESP2 and RESP3 XREADGROUP shapes): callers
get `StreamEntry` rows, which a stage decodes to its typed message
(`hivemem.pipeline.messages`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import redis

from hivemem.domain.models import DeadLetter, StageLag
from hivemem.pipeline.messages import decode_dead_letter, encode_dead_letter
from hivemem.pipeline.topology import Keys, Stage
from hivemem.store.doorbell import Doorbell
from hivemem.store.partitions import PartitionLeases
from hivemem.store.redis import Redis, as_text, is_cluster, redis_errors, route
from hivemem.store.scripts import lua
from hivemem.store.stream_entries import StreamEntry, decode_entries, read_reply

__all__ = ["StreamEntry", "StreamStore", "decode_entries", "read_reply"]


class StreamStore:
    def __init__(self, client: Redis, keys: Keys) -> None:
        self._r = client
        self.keys = keys
        self._dead_letter = client.register_script(lua("dead_letter"))
        self._record_error = client.register_script(lua("record_error"))

    @property
    def redis(self) -> Redis:
        """The connection (the consume loop's partition leases share it)."""
        return self._r

    def leases(
        self, stage: str, member: str, ttl_ms: int, *, partitions: int | None = None,
    ) -> PartitionLeases:
        """The partition leases of one consumer of `stage`, on this connection."""
        return PartitionLeases(self._r, self.keys, stage, member, ttl_ms, partitions=partitions)

    def doorbell(self, block_ms: int) -> Doorbell:
        """The wake-up channel a consume loop waits on between reads, on this connection."""
        return Doorbell(self._r, block_ms)

    def append(self, stream: str, entries: list[dict[str, str]]) -> None:
        """XADD several entries in one round trip."""
        if not entries:
            return
        with redis_errors("append to stream"):
            pipe = self._r.pipeline(transaction=False)
            for fields in entries:
                pipe.xadd(stream, fields)  # type: ignore[arg-type]
            pipe.execute()

    def ensure_group(self, stream: str, group: str) -> None:
        with redis_errors("create consumer group"):
            try:
                self._r.xgroup_create(stream, group, id="0", mkstream=True)
            except redis.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    def ensure_groups(self, streams: list[str], group: str) -> None:
        """`ensure_group` for each stream, pipelined (a BUSYGROUP reply is success)."""
        with redis_errors("create consumer groups"):
            pipe = self._r.pipeline(transaction=False)
            for stream in streams:
                pipe.xgroup_create(stream, group, id="0", mkstream=True)
            for reply in pipe.execute(raise_on_error=False):
                if isinstance(reply, Exception) and "BUSYGROUP" not in str(reply):
                    raise reply

    def drop_groups(self, streams: list[str], group: str) -> None:
        """Remove `group` from each stream that has it (pipelined; a missing stream or
        group is no error)."""
        with redis_errors("remove consumer groups"):
            pipe = self._r.pipeline(transaction=False)
            for stream in streams:
                pipe.xgroup_destroy(stream, group)
            pipe.execute(raise_on_error=False)

    def read(
        self,
        stream: str,
        group: str,
        consumer: str,
        *,
        count: int,
        block_ms: int | None,
        own_pending: bool = False,
    ) -> list[StreamEntry]:
        """New entries (`>`), or with `own_pending` the ones this consumer holds unacked."""
        return self.read_many([stream], group, consumer, count=count, block_ms=block_ms,
                              own_pending=own_pending)

    def read_many(
        self,
        streams: list[str],
        group: str,
        consumer: str,
        *,
        count: int,
        block_ms: int | None,
        own_pending: bool = False,
    ) -> list[StreamEntry]:
        """One XREADGROUP over several streams (up to `count` from each). On a cluster the
        streams live in different slots: one read per stream, pipelined, non-blocking for
        more than one stream, and the caller waits between empty polls (`blocks`)."""
        if not streams:
            return []
        start = "0" if own_pending else ">"
        with redis_errors("read stream"):
            if is_cluster(self._r):
                # Raw XREADGROUP routed by its stream's slot (`route`: no COMMAND GETKEYS
                # round trip per read); BLOCK only when one stream is read.
                block = None if own_pending or len(streams) > 1 else block_ms
                pipe = self._r.pipeline(transaction=False)
                for stream in streams:
                    args: list[Any] = ["XREADGROUP", "GROUP", group, consumer, "COUNT", count]
                    if block is not None:
                        args += ["BLOCK", block]
                    pipe.execute_command(  # type: ignore[no-untyped-call]
                        *args, "STREAMS", stream, start, **route(self._r, stream))
                out: list[StreamEntry] = []
                for reply in pipe.execute():
                    out += read_reply(reply)
                return out
            reply = self._r.xreadgroup(
                group, consumer, dict.fromkeys(streams, start), count=count,
                block=None if own_pending else block_ms,
            )
        return read_reply(reply)

    def blocks(self, streams: int) -> bool:
        """Does `read_many` over this many streams block until an entry arrives? (On a
        cluster only a read of one stream can: the others are other slots.)"""
        return streams == 1 or not is_cluster(self._r)

    def claim_idle(
        self, stream: str, group: str, consumer: str, *, min_idle_ms: int, count: int
    ) -> list[StreamEntry]:
        """Take over entries that another (presumably dead) consumer left pending."""
        with redis_errors("claim pending entries"):
            reply = self._r.xautoclaim(
                stream, group, consumer, min_idle_time=min_idle_ms, start_id="0-0", count=count
            )
        return decode_entries(reply[1], stream)

    def touch(self, stream: str, group: str, consumer: str, entry_ids: list[str]) -> None:
        """Reset the idle time of entries `consumer` holds (XCLAIM to itself, JUSTID: the
        delivery count is not raised), so that a handler still working on them is not
        taken for dead and its entries are not reclaimed under it."""
        if not entry_ids:
            return
        with redis_errors("touch pending entries"):
            ids: list[Any] = list(entry_ids)
            self._r.xclaim(stream, group, consumer, 0, ids, justid=True)

    def deliveries(self, stream: str, group: str, entry_ids: list[str]) -> dict[str, int]:
        """How many times each entry has been delivered (for dead-lettering)."""
        if not entry_ids:
            return {}
        # One exact lookup per id (pipelined): a range read could be cut short by other
        # consumers' pending entries lying between the ids.
        with redis_errors("read pending entries"):
            pipe = self._r.pipeline(transaction=False)
            for entry_id in entry_ids:
                pipe.xpending_range(stream, group, min=entry_id, max=entry_id, count=1)
            replies = pipe.execute()
        out: dict[str, int] = {}
        for rows in replies:
            for row in rows:
                out[as_text(row["message_id"])] = int(row["times_delivered"])
        return out

    def ack(self, stream: str, group: str, entry_ids: list[str]) -> None:
        if not entry_ids:
            return
        with redis_errors("ack entries"):
            pipe = self._r.pipeline(transaction=False)
            pipe.xack(stream, group, *entry_ids)
            pipe.hdel(self.keys.delivery_errors(stream, group), *entry_ids)
            pipe.execute()

    def record_error(self, stream: str, group: str, entry_id: str, error: str) -> None:
        """Why a delivery failed (an error may quote the entry: nothing is recorded for an
        entry a forget deleted meanwhile)."""
        with redis_errors("record delivery error"):
            self._record_error(keys=[stream, self.keys.delivery_errors(stream, group)],
                               args=[entry_id, error[:2000]])

    def last_error(self, stream: str, group: str, entry_id: str) -> str | None:
        with redis_errors("read delivery error"):
            raw = self._r.hget(self.keys.delivery_errors(stream, group), entry_id)
        return None if raw is None else as_text(raw)

    def dead_letter(
        self, stream: str, group: str, entry: StreamEntry, error: str, deliveries: int,
        *, held: bool = False,
    ) -> bool:
        """Move an entry to the stream's dead-letter stream and ack it, in one script.
        `held`: a worker holds the entry, and nothing is written if it is no longer on its
        stream (a forget deleted it meanwhile): it is only acked, and False returned."""
        record = encode_dead_letter(DeadLetter(
            stream=stream, group=group, entry_id=entry.entry_id, fields=entry.fields,
            error=error, deliveries=deliveries, failed_at=datetime.now(UTC),
        ))
        pairs = [x for kv in record.items() for x in kv]
        with redis_errors("dead-letter entry"):
            return bool(self._dead_letter(
                keys=[stream, self.keys.dead_letters(stream),
                      self.keys.delivery_errors(stream, group)],
                args=[group, entry.entry_id, "1" if held else "0", *pairs]))

    def dead_letters(self, stream: str, count: int = 100) -> list[DeadLetter]:
        with redis_errors("list dead letters"):
            rows = self._r.xrange(self.keys.dead_letters(stream), count=count)
        return [decode_dead_letter(entry.fields, stream) for entry in decode_entries(rows)]

    def stage_dead_letters(self, stage: Stage, count: int = 100) -> list[DeadLetter]:
        """The dead letters of every partition of `stage`, oldest first, up to `count`."""
        out: list[DeadLetter] = []
        for stream in stage.streams():
            out += self.dead_letters(stream, count)
        out.sort(key=lambda letter: letter.failed_at)
        return out[:count]

    def pending_count(self, stream: str, group: str) -> int:
        with redis_errors("read pending summary"):
            summary = self._r.xpending(stream, group)
        return int(summary["pending"])

    def drained(self, streams: list[str], group: str) -> bool:
        """Nothing pending and nothing undelivered for `group` on any of `streams`: one
        pipelined XINFO GROUPS per stream (one round trip per node)."""
        if not streams:
            return True
        with redis_errors("read group info"):
            pipe = self._r.pipeline(transaction=False)
            for stream in streams:
                pipe.xinfo_groups(stream)
            replies = pipe.execute()
        for groups in replies:
            for info in groups:
                if as_text(info["name"]) == group and (
                        int(info["pending"]) or int(info.get("lag") or 0)):
                    return False
        return True

    def length(self, stream: str) -> int:
        with redis_errors("read stream length"):
            return int(self._r.xlen(stream))

    def lag(self, stream: str, group: str) -> int:
        """Entries not yet delivered to the group (Redis >= 7 reports it)."""
        with redis_errors("read group info"):
            groups = self._r.xinfo_groups(stream)
        for info in groups:
            if as_text(info["name"]) == group:
                lag = info.get("lag")
                return int(lag) if lag is not None else 0
        return 0

    def stage_lag(self, stage: Stage) -> StageLag:
        """Backlog of one stage, summed over its partitions; zeros before its groups exist."""
        streams = stage.streams()
        with redis_errors("read stage backlog"):
            pipe = self._r.pipeline(transaction=False)
            for stream in streams:
                pipe.exists(stream)
                pipe.xlen(self.keys.dead_letters(stream))
            replies = pipe.execute()
            lag = pending = dead = 0
            live = [st for st, ex in zip(streams, replies[::2], strict=True) if ex]
            dead = sum(int(d) for d in replies[1::2])
            if live:
                pipe = self._r.pipeline(transaction=False)
                for stream in live:
                    pipe.xinfo_groups(stream)
                for groups in pipe.execute():
                    for info in groups:
                        if as_text(info["name"]) == stage.group:
                            lag += int(info.get("lag") or 0)
                            pending += int(info["pending"])
        return StageLag(stage=stage.name, stream=stage.stream_for(0), lag=lag,
                        pending=pending, dead_letters=dead)

    def trim_consumed(self, stream: str) -> int:
        """Drop entries every group has acknowledged. Returns how many were removed."""
        with redis_errors("trim stream"):
            groups = self._r.xinfo_groups(stream)
            if not groups:
                return 0
            floor: tuple[int, int] | None = None
            for info in groups:
                name = as_text(info["name"])
                summary = self._r.xpending(stream, name)
                if summary["pending"]:
                    candidate = as_text(summary["min"])
                else:
                    candidate = as_text(info["last-delivered-id"])
                parts = candidate.split("-")
                key = (int(parts[0]), int(parts[1]))
                floor = key if floor is None or key < floor else floor
            if floor is None or floor == (0, 0):
                return 0
            return int(self._r.xtrim(stream, minid=f"{floor[0]}-{floor[1]}", approximate=False))
