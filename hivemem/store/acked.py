"""Writes that wait for an acknowledgement: script calls, then WAIT or WAITAOF, on one
connection to each master that holds their keys.

WAIT and WAITAOF wait for what *the connection they arrive on* has written (the server
keeps each client's offset of its last write). Sent on another pooled connection they wait
for nothing and answer at once; redis-py's cluster client even sends a bare WAIT to every
node and adds up the answers. So the writes and their wait go as one pipeline over one
connection to the master that owns the keys' slot (on a cluster: that node's own client,
found by slot locally), and the wait's reply is checked here.

A MOVED reply or a lost connection on a cluster (a failover, a reshard) refreshes the slot
map and sends the calls still undone again, to the new owner, with their wait; the scripts
are idempotent by turn id, so a call that did land is a no-op the second time.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis
from redis.commands.core import Script
from redis.exceptions import MovedError, NoScriptError

from hivemem.store.redis import Redis, is_cluster

__all__ = ["AckWait", "Shortfall", "run_acked"]

_ROUNDS = 4  # sends of one batch on a cluster: the first, and after each slot-map refresh
_REFRESH_PAUSE_S = 0.2


@dataclass(frozen=True, slots=True)
class Shortfall:
    """What a wait asked for and what it got (for `AckTimeout`)."""

    wanted: str
    got: str


@dataclass(frozen=True, slots=True)
class AckWait:
    """The wait after a write. `local_aof`: the master's AOF must have it (WAITAOF with
    numlocal 1); `replicas`: this many replicas must have it (in memory with WAIT, in their
    AOF with WAITAOF when `replica_aof`)."""

    level: str
    replicas: int
    local_aof: bool
    replica_aof: bool
    timeout_ms: int

    def command(self) -> tuple[Any, ...]:
        if self.local_aof or self.replica_aof:
            return ("WAITAOF", 1 if self.local_aof else 0,
                    self.replicas if self.replica_aof else 0, self.timeout_ms)
        return ("WAIT", self.replicas, self.timeout_ms)

    def shortfall(self, reply: Any) -> Shortfall | None:
        """None when `reply` (WAIT's count, WAITAOF's [local, replicas]) confirms it."""
        if self.local_aof or self.replica_aof:
            local, replicas = (int(x) for x in reply)
            want_local = 1 if self.local_aof else 0
            want_replicas = self.replicas if self.replica_aof else 0
            if local >= want_local and replicas >= want_replicas:
                return None
            wanted = " and ".join(part for part in (
                "the master's AOF fsync" if want_local else "",
                f"{want_replicas} replica AOF fsync(s)" if want_replicas else "") if part)
            return Shortfall(wanted, f"{local} local and {replicas} replica AOF fsync(s)")
        count = int(reply)
        if count >= self.replicas:
            return None
        return Shortfall(f"{self.replicas} replica(s)", f"{count}")


Call = tuple[Sequence[Any], Sequence[Any]]


def run_acked(
    client: Redis, script: Script, calls: Sequence[Call], wait: AckWait,
) -> tuple[list[Any], Shortfall | None]:
    """Run `script` once per (keys, args), each call's keys in one slot, and wait on every
    master written to. Returns the calls' replies in order and the first wait that fell
    short (None: every wait confirmed). Errors other than a redirect or an outage a cluster
    can route around are raised as redis-py raised them (the caller translates)."""
    replies: list[Any] = [None] * len(calls)
    todo = list(range(len(calls)))
    short: Shortfall | None = None
    for round_ in range(_ROUNDS):
        groups = _by_master(client, [(i, calls[i]) for i in todo])
        todo = []
        for target, members in groups:
            try:
                done, again, miss = _send(target, script, members, wait)
            except (redis.ConnectionError, redis.TimeoutError):
                if not is_cluster(client) or round_ == _ROUNDS - 1:
                    raise
                todo += [i for i, _ in members]
                continue
            for i, reply in done.items():
                replies[i] = reply
            todo += again
            short = short or miss
        if not todo:
            return replies, short
        # A failover or reshard on the way: ask the cluster who owns the slots now.
        time.sleep(_REFRESH_PAUSE_S * (round_ + 1))
        with contextlib.suppress(redis.RedisError):
            client.nodes_manager.initialize()  # type: ignore[attr-defined]
    raise redis.ConnectionError(
        f"acknowledged write: {len(todo)} call(s) found no master after {_ROUNDS} tries")


def _by_master(client: Redis, members: list[tuple[int, Call]]
               ) -> list[tuple[Redis, list[tuple[int, Call]]]]:
    if not is_cluster(client):
        return [(client, members)]
    groups: dict[str, tuple[Redis, list[tuple[int, Call]]]] = {}
    cluster: Any = client
    for i, call in members:
        node = cluster.get_node_from_key(call[0][0])
        entry = groups.get(node.name)
        if entry is None:
            entry = groups[node.name] = (cluster.get_redis_connection(node), [])
        entry[1].append((i, call))
    return list(groups.values())


def _send(
    target: Redis, script: Script, members: list[tuple[int, Call]], wait: AckWait,
) -> tuple[dict[int, Any], list[int], Shortfall | None]:
    """One pipeline to one master: the calls, then the wait. Returns the replies of the
    calls that ran, the indexes to send again (MOVED: another node owns the slot now), and
    the wait's shortfall. A call that met a server without the script (restarted, promoted)
    is sent again here with a wait of its own, after loading it."""
    done: dict[int, Any] = {}
    again: list[int] = []
    short: Shortfall | None = None
    pending = members
    for _attempt in range(2):
        pipe = target.pipeline(transaction=False)
        for _i, (keys, args) in pending:
            pipe.execute_command(  # type: ignore[no-untyped-call]
                "EVALSHA", script.sha, len(keys), *keys, *args)
        pipe.execute_command(*wait.command())  # type: ignore[no-untyped-call]
        *results, waited = pipe.execute(raise_on_error=False)
        if isinstance(waited, Exception):
            raise waited
        missing: list[tuple[int, Call]] = []
        wrote = False
        for (i, call), reply in zip(pending, results, strict=True):
            if isinstance(reply, NoScriptError):
                missing.append((i, call))
            elif isinstance(reply, MovedError) or (
                    isinstance(reply, redis.ResponseError) and str(reply).startswith("MOVED")):
                again.append(i)
            elif isinstance(reply, Exception):
                raise reply
            else:
                done[i] = reply
                wrote = True
        if wrote:  # a wait after nothing written confirms nothing: not counted
            short = short or wait.shortfall(waited)
        if not missing:
            break
        target.script_load(script.script)
        pending = missing
    else:
        raise NoScriptError("the append script is missing on the master even after loading it")
    return done, again, short
