"""What `ingest` checks around its write: the embed backlog (backpressure) and, when asked,
that the write reached the server's disk (durability).

Backpressure costs one XINFO GROUPS round trip every `backlog_check_every` turns or
`backlog_check_interval_s` (whichever first), not one per turn, so the bound can be passed by
at most that much; once over it, every ingest measures again until the backlog drains.

Durability: Redis acknowledges a write once it is in memory; with ``appendfsync everysec``
the AOF reaches the disk about once a second, so a server killed (power loss, kill -9) can
lose the last second of acknowledged turns. `durable=True` closes that window: WAITAOF
(Redis >= 7.2) waits until the local AOF has it; a server with ``appendfsync always`` is
durable on every write already. Anything else is refused before the turn is written.
"""

from __future__ import annotations

import threading
import time

import structlog

from hivemem.config import IngestSettings
from hivemem.errors import Backpressure, StoreUnavailable
from hivemem.pipeline.topology import Stage
from hivemem.store.durability import persistence, wait_aof
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
        self._durable_mode: str | None = None  # "waitaof" | "always", once probed

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

    # -- durability ------------------------------------------------------------------------

    def require_durable(self) -> None:
        """Before a durable write: make sure the server can confirm it (probed once)."""
        if self._durable_mode is not None:
            return
        server = persistence(self._r)
        if not server.appendonly:
            raise StoreUnavailable(
                "redis", "durable ingest needs appendonly yes on the Redis server")
        if server.appendfsync == "always":
            self._durable_mode = "always"
            return
        if server.version >= (7, 2):
            self._durable_mode = "waitaof"
            return
        version = ".".join(map(str, server.version))
        raise StoreUnavailable(
            "redis",
            f"durable ingest needs Redis >= 7.2 (WAITAOF) or appendfsync always; this server"
            f" is {version} with appendfsync {server.appendfsync}",
        )

    def wait_durable(self) -> None:
        """After the write: block until the local AOF has it (or raise `StoreUnavailable`)."""
        if self._durable_mode != "waitaof":
            return
        if wait_aof(self._r, self.settings.durable_timeout_ms) < 1:
            raise StoreUnavailable(
                "redis", f"the turn was written but not fsynced to the AOF within"
                f" {self.settings.durable_timeout_ms} ms")
