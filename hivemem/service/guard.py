"""What `ingest` checks around its write: the embed backlog (backpressure) and, when asked,
what the write must reach before ingest returns (its acknowledgement level).

Backpressure costs one XINFO GROUPS round trip every `backlog_check_every` turns or
`backlog_check_interval_s` (whichever first), not one per turn, so the bound can be passed by
at most that much; once over it, every ingest measures again until the backlog drains.

Durability: Redis acknowledges a write once it is in memory; with ``appendfsync everysec``
the AOF reaches the disk about once a second, so a server killed (power loss, kill -9) can
lose the last second of acknowledged turns. `ack="aof"` (`durable=True`) closes that
window: WAITAOF (Redis >= 7.2) waits until the local AOF has it; a server with ``appendfsync
always`` is durable on every write already. Replication is asynchronous too: a master killed
right after its reply can take the turn with it at a failover; `ack="replica"` waits (WAIT)
until `ack_replicas` replicas have it, `ack="replica_aof"` (WAITAOF) until their AOFs do.
A server that cannot confirm the level asked for is refused before the turn is written; the
wait itself runs with the write (`hivemem.store.acked`).
"""

from __future__ import annotations

import threading
import time
from typing import get_args

import pydantic
import structlog

from hivemem.config import AckLevel, IngestSettings
from hivemem.errors import Backpressure, StoreUnavailable, ValidationError
from hivemem.pipeline.topology import Stage
from hivemem.store.acked import AckWait
from hivemem.store.durability import Persistence, persistence
from hivemem.store.redis import Redis
from hivemem.store.status import stage_backlog

log = structlog.get_logger(__name__)

_POLL_S = 0.05



class IngestGuard:
    def __init__(self, client: Redis, stage: Stage, settings: IngestSettings) -> None:
        """`stage`: the stage whose backlog bounds ingest (the embed stage)."""
        self._r = client
        self.stage = stage
        self.streams = stage.streams()
        self.settings = settings
        self._lock = threading.Lock()
        self._since_check = 0
        self._checked_at = 0.0
        self._over = False
        self._server: Persistence | None = None  # probed at the first acknowledged ingest

    # -- backpressure ----------------------------------------------------------------------

    def backlog(self) -> int:
        """Turns the embed stage has not finished, over every partition (one round trip)."""
        return stage_backlog(self._r, self.stage)

    def admit(self, count: int = 1) -> None:
        """Before writing `count` turns: raise `Backpressure` (or block, per settings) while
        the backlog is over `max_backlog`. Cheap when it is not due for a measurement."""
        limit = self.settings.max_backlog
        if limit <= 0:
            return
        with self._lock:
            self._since_check += count
            now = time.monotonic()
            due = (
                self._over
                or self._since_check >= self.settings.backlog_check_every
                or now - self._checked_at >= self.settings.backlog_check_interval_s
            )
            if not due:
                return
            self._since_check = 0
            self._checked_at = now
        backlog = self.backlog()
        if backlog + count <= limit:
            self._over = False
            return
        self._over = True
        if self.settings.backpressure == "raise":
            log.warning("ingest.backpressure", backlog=backlog, limit=limit)
            raise Backpressure(backlog, limit)
        started = time.monotonic()
        deadline = started + self.settings.block_timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                log.warning("ingest.backpressure", backlog=backlog, limit=limit,
                            waited_s=round(time.monotonic() - started, 2))
                raise Backpressure(backlog, limit, time.monotonic() - started)
            time.sleep(min(_POLL_S, remaining))
            backlog = self.backlog()
            if backlog + count <= limit:
                self._over = False
                return

    # -- acknowledgement -------------------------------------------------------------------

    def ack_wait(self, level: AckLevel) -> AckWait | None:
        """What a write at `level` waits for (None: nothing, the reply is enough). A server
        that cannot confirm it is refused here, before anything is written (probed once)."""
        if level == "memory":
            return None
        timeout = self.settings.durable_timeout_ms
        replicas = self.settings.ack_replicas
        if level == "replica":
            return AckWait(level, replicas, local_aof=False, replica_aof=False,
                           timeout_ms=timeout)
        server = self._persistence()
        if not server.appendonly:
            raise StoreUnavailable(
                "redis", f"ingest with ack={level} (or durable) needs appendonly yes on the"
                " Redis master")
        waitaof = server.version >= (7, 2)
        version = ".".join(map(str, server.version))
        if level == "aof":
            if server.appendfsync == "always":
                return None  # every write is fsynced before its reply
            if waitaof:
                return AckWait(level, 0, local_aof=True, replica_aof=False, timeout_ms=timeout)
            raise StoreUnavailable(
                "redis",
                f"durable ingest needs Redis >= 7.2 (WAITAOF) or appendfsync always; this"
                f" server is {version} with appendfsync {server.appendfsync}",
            )
        if not waitaof:
            raise StoreUnavailable(
                "redis", f"ingest with ack={level} needs Redis >= 7.2 (WAITAOF); this server"
                f" is {version} (ack=replica waits for the replicas' memory with WAIT)")
        return AckWait(level, replicas, local_aof=server.appendfsync != "always",
                       replica_aof=True, timeout_ms=timeout)

    def _persistence(self) -> Persistence:
        if self._server is None:
            self._server = persistence(self._r)
        return self._server


def ack_level(settings: IngestSettings, ack: str | None, durable: bool | None) -> AckLevel:
    """The level one ingest waits for: `ack` (validated) else `ingest.ack`; `durable`
    (else `ingest.durable`) adds the master's AOF: memory becomes aof, replica replica_aof."""
    if ack is None:
        level = settings.ack
    else:
        try:
            level = _LEVEL.validate_python(ack)
        except pydantic.ValidationError:
            raise ValidationError(
                "ack", f"must be one of {', '.join(get_args(AckLevel))}, got {ack!r}") from None
    if settings.durable if durable is None else durable:
        level = _WITH_AOF.get(level, level)
    return level


_LEVEL: pydantic.TypeAdapter[AckLevel] = pydantic.TypeAdapter(AckLevel)
_WITH_AOF: dict[str, AckLevel] = {"memory": "aof", "replica": "replica_aof"}
