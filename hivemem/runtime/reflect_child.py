"""The embedded owner's reflection process: `python -m hivemem.runtime.reflect_child`.

Started by `hivemem.runtime.reflect_process` (never by hand). It reads what it runs with
from its standard input (a pickle the owner writes into the pipe: settings on the owner's
Redis, the owner's worker API and its key), runs the reflect queue's loop (the same
`ThreadWorker` the owner would run in a thread) with its vector calls sent to the owner, and
ends after the job it runs on SIGTERM, or by itself when its owner is gone. The owner holds
it (SIGSTOP / SIGCONT) while its recalls run (`hivemem.runtime.process_share`); so that an
owner killed while holding it does not leave it stopped for good, it asks the kernel for a
SIGCONT when the owner goes.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import threading
from typing import Any

import structlog

from hivemem.errors import StoreUnavailable
from hivemem.logs import configure_logging
from hivemem.runtime.owner import KEY_HEADER
from hivemem.runtime.process_share import continue_on_parent_death
from hivemem.runtime.reflect_process import ChildOrder
from hivemem.runtime.wiring import Wiring
from hivemem.store.vectors.proxy import ProxyVectorStore

log = structlog.get_logger(__name__)


def run(order: ChildOrder) -> int:
    configure_logging(order.log_level, order.settings.log_json)
    if order.nice:
        os.nice(order.nice)
    parent = os.getppid()
    continue_on_parent_death()
    vectors = ProxyVectorStore(order.vectors_url, order.key, KEY_HEADER)
    with Wiring(order.settings, vectors=vectors) as wiring:
        worker = wiring.thread_worker()
        stop = threading.Event()

        def on_term(_signum: int, _frame: Any) -> None:
            stop.set()
            worker.stop()

        signal.signal(signal.SIGTERM, on_term)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the owner's Ctrl-C: the owner stops us

        def orphaned() -> None:
            # An owner killed with kill -9 sends no SIGTERM: end with it.
            while not stop.wait(1.0):
                if os.getppid() != parent:
                    log.warning("embedded.reflect_child_orphaned", parent=parent)
                    on_term(signal.SIGTERM, None)

        threading.Thread(target=orphaned, name="hivemem-orphan-watch", daemon=True).start()
        log.info("embedded.reflect_child_started", pid=os.getpid(), nice=order.nice)
        worker.run()
        vectors.close()
    return 0


def main() -> int:
    order = pickle.load(sys.stdin.buffer)  # our own parent's pipe
    sys.stdin.close()
    if not isinstance(order, ChildOrder):
        raise SystemExit("reflect_child: expected a ChildOrder on stdin")
    try:
        return run(order)
    except StoreUnavailable as exc:
        # The owner closed its store before this process could start (a client opened and
        # closed at once): one line, not a traceback on the owner's terminal.
        log.warning("embedded.reflect_child_store_gone", error=str(exc)[:200])
        return 1


if __name__ == "__main__":
    sys.exit(main())
