"""The one reading of Retry-After both HTTP clients use."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest

from hivemem.providers.retry_after import retry_after


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, None),
        ({"retry-after": "3"}, 3.0),
        ({"retry-after": "-5"}, 0.0),
        ({"retry-after": "soon"}, None),
        ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),
        ({"retry-after-ms": "x", "retry-after": "2"}, 2.0),
        ({"retry-after": format_datetime(datetime(2000, 1, 1, tzinfo=UTC))}, 0.0),
    ],
)
def test_retry_after_reads_seconds_millis_and_dates(
    headers: dict[str, str], expected: float | None
) -> None:
    assert retry_after(httpx.Headers(headers)) == expected


def test_a_future_http_date_is_the_seconds_until_it() -> None:
    when = datetime.now(UTC) + timedelta(seconds=30)
    wait = retry_after({"retry-after": format_datetime(when, usegmt=True)})
    assert wait is not None and 25.0 <= wait <= 30.0
