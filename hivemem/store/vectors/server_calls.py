"""How a call to a Qdrant server fails, and retrying the ones that may succeed next time.

Qdrant answers 400 (a body it cannot parse or hold: nesting past its JSON limit, a vector
of the wrong size), 413 (too large) and 422 (a value out of range) for a request that will
never succeed: that is `StoreRejected`, and the entry behind it is dead-lettered. A dropped
connection, a timeout, a 5xx, and 401/403/404/408/409/429 are `StoreUnavailable`: an
outage (or a credential or collection an operator must fix) during which workers back off
and lose nothing; dead-lettering every entry because a key was rotated would be worse.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TypeVar

import structlog
from qdrant_client.common.client_exceptions import QdrantException
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from hivemem.errors import HivememError, StoreRejected, StoreUnavailable

log = structlog.get_logger(__name__)
T = TypeVar("T")

STORE = "qdrant"
# The request itself is wrong: sending it again gets the same answer.
PERMANENT_STATUSES = frozenset({400, 413, 422})
CLIENT_ERRORS = (
    ResponseHandlingException, UnexpectedResponse, QdrantException, ConnectionError,
    TimeoutError, OSError,
)


def status_of(exc: BaseException) -> int | None:
    return exc.status_code if isinstance(exc, UnexpectedResponse) else None


def reason_of(exc: BaseException) -> str:
    """Qdrant's own error text (``status.error`` of its body) when there is one."""
    if isinstance(exc, UnexpectedResponse):
        try:
            body = json.loads(exc.content)
            error = body["status"]["error"]
        except (ValueError, KeyError, TypeError):
            error = exc.content[:300].decode("utf-8", "replace") or exc.reason_phrase
        return f"HTTP {exc.status_code}: {error}"
    text = str(exc).strip() or type(exc).__name__
    return f"{type(exc).__name__}: {text}"


def classify(action: str, exc: BaseException) -> HivememError:
    status = status_of(exc)
    if status in PERMANENT_STATUSES:
        return StoreRejected(STORE, action, reason_of(exc), status=status)
    return StoreUnavailable(STORE, f"{action}: {reason_of(exc)}")


def is_conflict(exc: BaseException) -> bool:
    return status_of(exc) == 409


def retrying(
    action: str, fn: Callable[[], T], *, attempts: int, initial_s: float, max_s: float,
    deadline_s: float | None = None,
) -> T:
    """`fn()`, tried up to `attempts` times (or until `deadline_s` seconds have passed, if
    given) while it fails as an outage. A rejection is raised at once."""
    delay = initial_s
    started = time.monotonic()
    attempt = 0
    while True:
        attempt += 1
        try:
            return fn()
        except CLIENT_ERRORS as exc:
            error = classify(action, exc)
            if isinstance(error, StoreRejected):
                raise error from None
            out_of_time = (
                deadline_s is not None and time.monotonic() - started + delay > deadline_s
            )
            if out_of_time or (deadline_s is None and attempt >= attempts):
                raise error from None
            log.warning("store.retry", store=STORE, action=action, attempt=attempt,
                        error=reason_of(exc), sleep_s=round(delay, 2))
            time.sleep(delay)
            delay = min(delay * 2, max_s)
