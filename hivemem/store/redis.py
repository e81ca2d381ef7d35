"""Redis connections and the translation of client errors into `StoreUnavailable`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis

from hivemem.config import RedisSettings
from hivemem.errors import StoreUnavailable

Redis = redis.Redis


def connect(settings: RedisSettings) -> Redis:
    """A client for the configured URL (redis://, rediss://, unix://). Checks it answers."""
    try:
        client = redis.Redis.from_url(settings.url, **connection_options(settings))
        client.ping()
    except (redis.RedisError, ValueError) as exc:
        raise StoreUnavailable("redis", f"{_redact(settings.url)}: {exc}") from None
    return client


def connection_options(settings: RedisSettings) -> dict[str, Any]:
    """Keyword options beside the URL: timeouts, the ACL user and password, the TLS CA
    (credentials in the URL win, as redis-py merges them over these)."""
    options: dict[str, Any] = {
        "socket_timeout": settings.socket_timeout,
        "socket_connect_timeout": settings.connect_timeout,
        "health_check_interval": 30,
    }
    if settings.username:
        options["username"] = settings.username
    if settings.password is not None:
        options["password"] = settings.password.get_secret_value()
    if settings.ssl_ca_certs is not None and settings.url.startswith("rediss://"):
        options["ssl_ca_certs"] = str(settings.ssl_ca_certs)
    return options


def fake_server() -> Any:
    """An in-process Redis (fakeredis) for unit tests (embedded mode runs a real server)."""
    import fakeredis

    return fakeredis.FakeServer()


def connect_fake(server: Any) -> Redis:
    import fakeredis

    client: Redis = fakeredis.FakeRedis(server=server)
    return client


def _redact(url: str) -> str:
    """Drop credentials from a URL before it reaches a message or a log."""
    if "@" not in url:
        return url
    scheme, _, rest = url.partition("://")
    return f"{scheme}://***@{rest.rsplit('@', 1)[1]}"


@contextmanager
def redis_errors(action: str) -> Iterator[None]:
    try:
        yield
    except redis.RedisError as exc:
        raise StoreUnavailable("redis", f"{action}: {exc}") from None
