"""rq's command listener (a pubsub thread per worker) never holds a worker's teardown.

redis-py 8.2's `PubSubWorkerThread.stop()` joins the thread with no limit; rq's listener
waits up to 60 s (its `sleep_time`) for a subscription once the subscription is gone, so
rq's own `unsubscribe` could take a minute: each burst of the embedded reflect worker did,
and reflection stalled behind it.
"""

from __future__ import annotations

import threading
import time
from typing import Any, cast

from rq import Queue

from hivemem.testing import RedisServer
from hivemem.workers.rqworker import ContextWorker, ThreadContextWorker


def _until(check: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_workers_teardown_waits_at_most_a_second_for_its_command_listener(
    redis_server: RedisServer,
) -> None:
    connection = redis_server.client()
    worker = ContextWorker([Queue("listener", connection=connection)],
                           context=cast(Any, object()), connection=connection)
    worker.subscribe()
    listener = worker.pubsub_thread
    assert listener is not None
    _until(lambda: worker.pubsub.subscribed)
    # The subscription ends under the listener: it reads the reply, then waits (60 s in
    # rq) for a subscription that will not come back.
    worker.pubsub.unsubscribe()
    _until(lambda: not worker.pubsub.subscribed)
    time.sleep(0.1)
    started = time.monotonic()
    worker.unsubscribe()
    assert time.monotonic() - started < 3.0
    assert not worker.pubsub.subscribed
    connection.close()


def test_the_embedded_reflect_worker_opens_no_command_listener(
    redis_server: RedisServer,
) -> None:
    connection = redis_server.client()
    before = {t.ident for t in threading.enumerate()}
    worker = ThreadContextWorker([Queue("listener-thread", connection=connection)],
                                 context=cast(Any, object()), connection=connection)
    started = time.monotonic()
    for _burst in range(3):
        worker.work(burst=True, logging_level="WARNING")
    assert time.monotonic() - started < 5.0
    assert worker.pubsub_thread is None
    assert {t.ident for t in threading.enumerate()} <= before
    connection.close()
