"""A producer as its own process for multi-process tests:
``python -m tests.support.producer_process SETTINGS_JSON SESSIONS PER_SESSION``
ingests the sessions' conversation (batches of 6, stable turn ids, retried on a transient
failure: a retried turn id is a no-op), closes each session, and prints ``done N``."""

from __future__ import annotations

import json
import sys
import time

from hivemem.config import Settings
from hivemem.errors import StoreUnavailable
from hivemem.producer.client import MemoryClient
from tests.integration.integration_support import conversation


def _retry(fn: object) -> None:
    for _ in range(200):
        try:
            fn()  # type: ignore[operator]
            return
        except StoreUnavailable:
            time.sleep(0.05)  # a failover in progress
    raise SystemExit("redis stayed unavailable")


def main(argv: list[str]) -> int:
    settings = Settings.model_validate(json.loads(argv[0]))
    sessions = argv[1].split(",")
    turns = conversation(sessions, int(argv[2]))
    with MemoryClient(settings) as client:
        for start in range(0, len(turns), 6):
            batch = turns[start:start + 6]
            _retry(lambda b=batch: client.ingest_many(b))
            time.sleep(0.01)
        for sid in sessions:
            _retry(lambda s=sid: client.close_session(s))
    print(f"done {len(turns)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
