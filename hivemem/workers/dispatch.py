"""The outbox dispatcher: closed episodes (each partition's outbox stream) -> one rq reflect
job each, on rq's Redis.

The boundary commit writes a closed episode and its outbox entry in one atomic step, so no
episode closes without an entry; the entry is acked only after its job is enqueued, so none
is lost when a dispatcher dies (the entry is redelivered). The job is enqueued at most once:
in one MULTI on rq's Redis, WATCHed on the episode's dispatch marker, the marker is set and
the job enqueued (its id derives from the episode id); a redelivered entry finds the marker
and enqueues nothing. The marker outlives rq's own job TTLs.
"""

from __future__ import annotations

import structlog

from hivemem.pipeline.messages import OutboxEntry
from hivemem.pipeline.topology import Keys, Topology
from hivemem.store.once import write_once
from hivemem.store.redis import Redis
from hivemem.store.streams import StreamEntry
from hivemem.workers.queue import Enqueue
from hivemem.workers.stream import WorkerKind

log = structlog.get_logger(__name__)

_MARKER_TTL_S = 90 * 24 * 3600


def decode_outbox_entry(entry: StreamEntry) -> OutboxEntry:
    return OutboxEntry.from_fields(entry.fields)


class DispatchHandler:
    def __init__(self, queue_redis: Redis, keys: Keys, enqueue: Enqueue) -> None:
        self._r = queue_redis
        self.keys = keys
        self.enqueue = enqueue

    def __call__(self, items: list[OutboxEntry]) -> None:
        for item in items:
            self.dispatch(item)

    def dispatch(self, item: OutboxEntry) -> bool:
        """Enqueue the episode's job unless it was enqueued before. True: enqueued now."""
        enqueued = write_once(self._r, self.keys.dispatched(item.episode_id), _MARKER_TTL_S,
                              lambda pipe: self.enqueue(pipe, item), what="enqueue reflect job")
        if not enqueued:
            return False
        log.info("episode.dispatched", episode_id=item.episode_id, session_id=item.session_id,
                 index=item.index)
        return True


def dispatch_kind(handler: DispatchHandler) -> WorkerKind[OutboxEntry]:
    return WorkerKind.of(Topology(handler.keys).dispatch, decode_outbox_entry, handler)
