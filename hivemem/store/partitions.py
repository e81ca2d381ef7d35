"""Which worker of a stage reads which partitions: membership and leases in Redis.

Every worker of a stage heartbeats into the stage's member set (a sorted set scored by the
time of its last heartbeat) and, from the live members (sorted by name), computes the same
assignment as every other worker: partition p goes to member p mod n. It then takes or
renews the lease of each partition assigned to it (SET NX with an expiry, its consumer
name as the value) and gives up the leases of partitions no longer assigned to it.

A worker that joins appears in the member set and the others give up its partitions at
their next refresh; one that leaves (`leave`) releases its leases at once; one that dies
stops renewing, so its heartbeat and its leases expire after `ttl_ms` (the stage's
`claim_idle_ms`) and its partitions move to the live workers, which then reclaim the
entries it left pending. A lease is held by one worker at a time, so while views of the
membership differ for a moment a partition may be unread, never read twice over.

Every command here touches one key, so this works unchanged on a Redis Cluster.
"""

from __future__ import annotations

import time
from typing import Any

from hivemem.pipeline.topology import Keys
from hivemem.store.redis import Redis, as_text, redis_errors, run_scripts
from hivemem.store.scripts import lua


def live_members(client: Redis, keys: Keys, stage: str, ttl_ms: int) -> int:
    """How many workers of `stage` sent a heartbeat within `ttl_ms` (a killed one's lingers
    in the set until a live worker prunes it)."""
    now = int(time.time() * 1000)
    with redis_errors("read stage members"):
        return int(client.zcount(keys.stage_members(stage), now - ttl_ms, "+inf"))


def assignment(members: list[str], partitions: int, member: str) -> list[int]:
    """The partitions `member` should own when `members` are the live workers."""
    ordered = sorted(members)
    if member not in ordered:
        return []
    n, i = len(ordered), ordered.index(member)
    return [p for p in range(partitions) if p % n == i]


class PartitionLeases:
    def __init__(
        self, client: Redis, keys: Keys, stage: str, member: str, ttl_ms: int,
        partitions: int | None = None,
    ) -> None:
        self._r = client
        self.keys = keys
        self.stage = stage
        self.member = member
        self.ttl_ms = ttl_ms
        self.partitions = keys.partitions if partitions is None else partitions
        self.owned: list[int] = []
        # True after a refresh that found partitions assigned to this worker still leased
        # by another (it gives them up at its own next refresh): worth asking again soon.
        self.waiting = False
        self._take = client.register_script(lua("partition_take"))
        self._give_up = client.register_script(lua("release_lease"))

    def refresh(self) -> list[int]:
        """Heartbeat, recompute the assignment, take/renew/give up leases. Returns the
        partitions this worker holds now (sorted)."""
        now = int(time.time() * 1000)
        members_key = self.keys.stage_members(self.stage)
        with redis_errors("refresh partition leases"):
            pipe = self._r.pipeline(transaction=False)
            pipe.zadd(members_key, {self.member: now})
            pipe.zremrangebyscore(members_key, "-inf", now - self.ttl_ms)
            pipe.zrange(members_key, 0, -1)
            pipe.pexpire(members_key, max(self.ttl_ms * 10, 60_000))
            _, _, raw_members, _ = pipe.execute()
            members = [as_text(m) for m in raw_members]
            wanted = assignment(members, self.partitions, self.member)
            drop = [p for p in self.owned if p not in wanted]
            calls: list[tuple[list[str], list[Any]]] = [
                ([self.keys.partition_lease(self.stage, p)], [self.member, self.ttl_ms])
                for p in wanted
            ]
            taken = run_scripts(self._r, self._take, calls) if calls else []
            if drop:
                self._give(drop)
        self.owned = sorted(p for p, ok in zip(wanted, taken, strict=True) if int(ok))
        self.waiting = len(self.owned) < len(wanted)
        return self.owned

    def renew(self) -> None:
        """Heartbeat and renew the leases held, nothing else (no rebalancing): what a
        worker does while a long batch is in its hands."""
        if not self.owned:
            return
        now = int(time.time() * 1000)
        with redis_errors("renew partition leases"):
            self._r.zadd(self.keys.stage_members(self.stage), {self.member: now})
            calls: list[tuple[list[str], list[Any]]] = [
                ([self.keys.partition_lease(self.stage, p)], [self.member, self.ttl_ms])
                for p in self.owned
            ]
            run_scripts(self._r, self._take, calls)

    def _give(self, partitions: list[int]) -> None:
        calls: list[tuple[list[str], list[Any]]] = [
            ([self.keys.partition_lease(self.stage, p)], [self.member]) for p in partitions
        ]
        run_scripts(self._r, self._give_up, calls)

    def leave(self) -> None:
        """Give up every lease and the membership (a clean stop: others take over now)."""
        with redis_errors("leave partition leases"):
            if self.owned:
                self._give(self.owned)
            self._r.zrem(self.keys.stage_members(self.stage), self.member)
        self.owned = []

    def holders(self) -> dict[int, str]:
        """Partition -> the worker holding its lease now (status, tests)."""
        with redis_errors("read partition leases"):
            pipe = self._r.pipeline(transaction=False)
            for p in range(self.partitions):
                pipe.get(self.keys.partition_lease(self.stage, p))
            replies = pipe.execute()
        return {p: as_text(v) for p, v in enumerate(replies) if v is not None}
