"""Server mode's workers as threads of the test process (embed, boundary, outbox dispatch,
reflect), on their own `Wiring`: what `hivemem worker ...` processes run, without the
processes."""

from __future__ import annotations

import threading
from typing import Any

from hivemem.config import Settings
from hivemem.providers.embedders import Embedder
from hivemem.runtime.wiring import Wiring


class ServerWorkers:
    def __init__(self, settings: Settings, embedder: Embedder) -> None:
        self.wiring = Wiring(settings, embedder=embedder)
        fast = settings.worker.model_copy(update={"block_ms": min(settings.worker.block_ms, 100)})
        w = self.wiring
        self.workers: list[Any] = [
            w.embed_worker(w.connect(), worker_settings=fast, consumer="t-embed"),
            w.boundary_worker(w.connect(), worker_settings=fast, consumer="t-boundary"),
            w.dispatch_worker(w.connect(), worker_settings=fast, consumer="t-dispatch"),
            w.thread_worker(),
        ]
        self.threads = [threading.Thread(target=x.run, daemon=True) for x in self.workers]

    def __enter__(self) -> ServerWorkers:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        for x in self.workers:
            x.stop()
        for t in self.threads:
            t.join(timeout=10)
        self.wiring.close()
