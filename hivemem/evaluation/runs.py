"""What both suites share: a run's header, and the timed recall each probe is judged on."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from pydantic import BaseModel

if TYPE_CHECKING:
    from hivemem.domain.models import RecallResult
    from hivemem.producer.client import MemoryClient


class RunInfo(BaseModel):
    """The system that ran, its version, the reflector behind it and the token budget every
    recall of the run had."""

    system: str
    version: str
    reflector: str
    token_budget: int


def timed_recall(
    client: MemoryClient, session_id: str, query: str, token_budget: int,
) -> tuple[RecallResult, float]:
    """One probe's recall and how long it took (ms)."""
    started = time.perf_counter()
    result = client.recall(session_id, query, token_budget)
    return result, (time.perf_counter() - started) * 1000
