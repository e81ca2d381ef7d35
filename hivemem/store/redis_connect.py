"""Which Redis client a deployment gets, chosen in this one place: a single server, a Redis
Cluster (`redis.RedisCluster`, which follows MOVED and ASK itself) or the master a Sentinel
names, by the URL's scheme or `RedisSettings.mode`; and rq's connection (rq needs a plain
Redis: it does not run on a cluster).

A wrong URL, a cluster client against a non-cluster server, a plain client against a
cluster node, or a partition count other than the one the data was written with are
`ConfigurationError`; a server that does not answer is `StoreUnavailable`.
"""

from __future__ import annotations

from typing import Any, cast
from urllib.parse import unquote, urlsplit

import redis
from redis.cluster import ClusterNode
from redis.exceptions import RedisClusterException
from redis.sentinel import Sentinel

from hivemem.config import RedisSettings
from hivemem.errors import ConfigurationError, StoreUnavailable
from hivemem.pipeline.topology import Keys
from hivemem.store.redis import Redis, _redact, connection_options, is_cluster

_CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
_SENTINEL_SCHEMES = {"redis+sentinel": "redis", "rediss+sentinel": "rediss"}


def mode_of(settings: RedisSettings) -> str:
    """standalone, cluster or sentinel: the setting, else what the URL's scheme says."""
    if settings.mode != "auto":
        return settings.mode
    scheme = settings.url.split("://", 1)[0].lower()
    if scheme in _CLUSTER_SCHEMES:
        return "cluster"
    if scheme in _SENTINEL_SCHEMES:
        return "sentinel"
    return "standalone"


def _hosts(netloc: str, field: str) -> list[tuple[str, int]]:
    hosts: list[tuple[str, int]] = []
    for part in netloc.rsplit("@", 1)[-1].split(","):
        host, _, port = part.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ConfigurationError(f"{field}: expected host:port[,host:port...], got {part!r}")
        hosts.append((host.strip("[]"), int(port)))
    return hosts


def _credentials(netloc: str) -> dict[str, Any]:
    if "@" not in netloc:
        return {}
    userinfo = netloc.rsplit("@", 1)[0]
    user, sep, password = userinfo.partition(":")
    out: dict[str, Any] = {}
    if sep:
        out["password"] = unquote(password)
        if user:
            out["username"] = unquote(user)
    elif user:
        out["password"] = unquote(user)
    return out


def _cluster(settings: RedisSettings) -> Redis:
    options = connection_options(settings)
    options.pop("health_check_interval", None)
    url = settings.url
    scheme = url.split("://", 1)[0].lower()
    if scheme in _CLUSTER_SCHEMES:
        parts = urlsplit(url)
        options.update(_credentials(parts.netloc))
        if _CLUSTER_SCHEMES[scheme] == "rediss":
            options["ssl"] = True
        nodes = [ClusterNode(h, p)  # type: ignore[no-untyped-call]
                 for h, p in _hosts(parts.netloc, "redis.url")]
        client = redis.RedisCluster(startup_nodes=nodes, **options)
    else:
        client = redis.RedisCluster.from_url(url, **options)
    return cast(Redis, client)


def _sentinel(settings: RedisSettings) -> Redis:
    parts = urlsplit(settings.url)
    path = [p for p in parts.path.split("/") if p]
    if not path:
        raise ConfigurationError(
            "redis.url: a Sentinel URL names its master: redis+sentinel://h:p,h:p/master[/db]")
    options = connection_options(settings)
    options.update(_credentials(parts.netloc))
    if len(path) > 1:
        if not path[1].isdigit():
            raise ConfigurationError(f"redis.url: bad database {path[1]!r}")
        options["db"] = int(path[1])
    if _SENTINEL_SCHEMES.get(parts.scheme.lower()) == "rediss":
        options["ssl"] = True
    # Through `Any`: redis-py annotates `Sentinel` from 8.2 on and not before, so neither an
    # ignore nor its absence type-checks against both.
    sentinel = cast(Any, Sentinel)(
        _hosts(parts.netloc, "redis.url"),
        socket_timeout=settings.socket_timeout,
        socket_connect_timeout=settings.connect_timeout,
        sentinel_kwargs={k: v for k, v in options.items() if k in ("username", "password")},
    )
    return cast(Redis, sentinel.master_for(path[0], **options))


def connect(settings: RedisSettings) -> Redis:
    """The deployment's Redis client, checked: it answers, and it is the kind of server the
    settings say (a cluster node needs the cluster client and vice versa)."""
    mode = mode_of(settings)
    where = _redact(settings.url)
    try:
        if mode == "cluster":
            client = _cluster(settings)
        elif mode == "sentinel":
            client = _sentinel(settings)
        else:
            if settings.url.split("://", 1)[0].lower() in {**_CLUSTER_SCHEMES,
                                                           **_SENTINEL_SCHEMES}:
                raise ConfigurationError(
                    f"redis.url: {where} is not a standalone URL but mode is standalone")
            client = redis.Redis.from_url(settings.url, **connection_options(settings))
        client.ping()
        if mode != "cluster":
            enabled = client.info("cluster").get("cluster_enabled")
            if int(enabled or 0) == 1:
                client.close()
                raise ConfigurationError(
                    f"redis.url: {where} is a Redis Cluster node: use redis+cluster://"
                    "host:port[,host:port...] (or redis.mode = cluster)")
    except ConfigurationError:
        raise
    except RedisClusterException as exc:
        raise ConfigurationError(f"redis.url: {where}: not a usable cluster: {exc}") from None
    except ValueError as exc:
        raise ConfigurationError(f"redis.url: {where}: {exc}") from None
    except redis.ResponseError as exc:
        raise ConfigurationError(f"redis.url: {where}: {exc}") from None
    except redis.RedisError as exc:
        raise StoreUnavailable("redis", f"{where}: {exc}") from None
    return client


def connect_rq(settings: RedisSettings, main: Redis | None = None) -> Redis:
    """rq's connection: `rq_url` when set, else the main Redis (refused on a cluster)."""
    if settings.rq_url is not None:
        return connect(settings.model_copy(update={"url": settings.rq_url, "mode": "auto",
                                                   "rq_url": None}))
    if main is None:
        main = connect(settings)
    if is_cluster(main):
        raise ConfigurationError(
            "redis.rq_url: rq (the reflect queue) does not run on Redis Cluster; point"
            " rq_url at a plain Redis server (or a Sentinel master)")
    return main


def check_partitions(client: Redis, keys: Keys) -> None:
    """Record the partition count on first start; refuse a different one later (every key
    name carries its partition: a new count would orphan the data)."""
    try:
        moving = client.get(keys.repartition_marker)
        if moving is None:
            client.set(keys.partition_count, keys.partitions, nx=True)
        raw = client.get(keys.partition_count)
    except redis.RedisError as exc:
        raise StoreUnavailable("redis", f"read partition count: {exc}") from None
    if moving is not None:
        text = moving.decode() if isinstance(moving, bytes) else str(moving)
        raise ConfigurationError(
            f"redis.partitions: a repartition is under way ({text}): run `hivemem "
            "repartition` again to finish it before starting anything")
    recorded = int(raw) if raw is not None else keys.partitions
    if recorded != keys.partitions:
        raise ConfigurationError(
            f"redis.partitions: this deployment's data is written with {recorded} partitions,"
            f" the settings say {keys.partitions}; to change it, stop every worker and run"
            f" `hivemem repartition {keys.partitions}`")
