"""Redis connections, the translation of client errors, and the few helpers that differ
between a single Redis and a Redis Cluster (script batches, fan-out reads).

Errors: a Redis that is down or slow is `StoreUnavailable` (callers back off and retry); a
deployment that cannot work as configured (CROSSSLOT, MOVED seen by a non-cluster client, a
cluster client against a non-cluster server) is `ConfigurationError`: retrying cannot help,
and a stream worker must not dead-letter good entries for it.

`Redis` is the type every store is written against; a `redis.RedisCluster` is handed around
under it too (`hivemem.store.redis_connect`), as it offers the same commands for the
single-slot operations hivemem issues.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import redis
from redis.cluster import ClusterPipeline
from redis.commands.core import Script
from redis.exceptions import (
    AskError,
    ClusterCrossSlotError,
    CrossSlotTransactionError,
    NoScriptError,
    RedisClusterException,
)

from hivemem.config import RedisSettings
from hivemem.errors import ConfigurationError, StoreUnavailable

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


class _NoServer(redis.ConnectionPool):
    """A pool that never connects: every command through it fails at once."""

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        raise ConfigurationError(
            "this Redis client has no server: it only builds objects whose description is "
            "wanted (the OpenAPI document), never their data")


def unconnected() -> Redis:
    """A client that refuses every command, for building the handles and the API without a
    store (`hivemem.api.spec`): a document built on it provably reads and writes nothing."""
    return redis.Redis(connection_pool=_NoServer())


def _redact(url: str) -> str:
    """Drop credentials from a URL before it reaches a message or a log."""
    if "@" not in url:
        return url
    scheme, _, rest = url.partition("://")
    return f"{scheme}://***@{rest.rsplit('@', 1)[1]}"


def is_cluster(client: Any) -> bool:
    return isinstance(client, redis.RedisCluster)


def run_scripts(
    client: Redis, script: Script, calls: Sequence[tuple[Sequence[Any], Sequence[Any]]]
) -> list[Any]:
    """Run `script` once per (keys, args) in one pipeline (one round trip per node).

    EVALSHA goes as a raw command (a cluster pipeline refuses its `evalsha` method; routed
    by its keys there); the script is loaded once per client (on every primary of a
    cluster), and a call that meets a server without it (restarted, or a replica promoted
    since) did not run, so it is run again on its own (`Script` loads it there)."""
    if len(calls) == 1:
        keys, args = calls[0]
        return [script(keys=list(keys), args=list(args))]
    _load_everywhere(client, script)
    pipe = client.pipeline(transaction=False)
    for keys, args in calls:
        # Raw EVALSHA: a pipeline given the `Script` itself asks the server SCRIPT EXISTS
        # before every execute (one more round trip per batch).
        pipe.execute_command(  # type: ignore[no-untyped-call]
            "EVALSHA", script.sha, len(keys), *keys, *args,
            **(route(client, keys[0]) if keys else {}))
    replies = list(pipe.execute(raise_on_error=False))
    for i, reply in enumerate(replies):
        if isinstance(reply, NoScriptError):
            keys, args = calls[i]
            replies[i] = script(keys=list(keys), args=list(args))
        elif isinstance(reply, Exception):
            raise reply
    return replies


def route(client: Any, key: str) -> dict[str, Any]:
    """Keyword options that send a command for `key` straight to its slot's node. Without
    them redis-py 8's cluster client asks a server which keys an XREADGROUP names, and which
    keys each pipelined EVALSHA names (COMMAND GETKEYS: one blocking round trip per command,
    before the pipeline is even sent). The slot is computed locally instead; a MOVED reply
    is still followed (the retry routes by slot). Empty for a single Redis."""
    if not is_cluster(client):
        return {}
    return {"target_nodes": client.get_node_from_key(key)}


_LOADED: set[tuple[int, str]] = set()


def _load_everywhere(client: Redis, script: Script) -> None:
    marker = (id(client), script.sha)
    if marker not in _LOADED:
        client.script_load(script.script)  # a cluster client sends it to every primary
        _LOADED.add(marker)


def queue_script(
    pipe: Any, script: Script, keys: Sequence[Any], args: Sequence[Any], *,
    loaded: bool = False,
) -> None:
    """Queue one script call on `pipe` (a pipeline or MULTI of either client kind). On a
    cluster: EVALSHA when the caller made sure the script is `loaded` (and handles
    NOSCRIPT, as `run_scripts` does), else EVAL with the script's text."""
    if isinstance(pipe, ClusterPipeline):
        pipe.execute_command(  # type: ignore[no-untyped-call]
            "EVALSHA" if loaded else "EVAL", script.sha if loaded else script.script,
            len(keys), *keys, *args)
    else:
        script(keys=list(keys), args=list(args), client=pipe)


def send_pipeline(pipe: Any) -> Callable[[], list[Any]]:
    """Send the reads queued on `pipe` now; the returned call reads their replies (each as
    `pipe.execute()` would give it, errors raised). The caller does other work between:
    recall sends its Redis reads before the engine's first search, and the replies wait
    in the socket meanwhile. Blocking on the round trip cost a recall more than the trip's
    own ~0.3 ms: at 100k points, recall with the read answered from memory ran 0.86x (p50
    and p95) against the read over a socket; sent ahead, 0.89-0.98x p50
    (`bench/results/archive/2026-12-05-and-before/recall_ab_evening.json`).

    Read-only commands, no transaction, no script. On a cluster client, or when sending
    fails, the pipeline runs at once (retried as usual) and the call returns its replies.
    The call must be made exactly once (a `try`/`finally`): until then the connection
    stays out of the pool.
    """
    # A plain pipeline is itself a client: it parses replies with its callbacks.
    plain = type(pipe) is redis.client.Pipeline and vars(pipe).get("transaction") is False
    stack = list(pipe.command_stack)
    if not plain or not stack:
        replies = pipe.execute()
        return lambda: replies
    pool = pipe.connection_pool
    conn = pool.get_connection()
    try:
        conn.send_packed_command(conn.pack_commands([args for args, _options in stack]))
    except redis.ConnectionError:
        conn.disconnect()
        pool.release(conn)
        replies = pipe.execute()  # reconnects, with the client's retries
        return lambda: replies
    except BaseException:
        conn.disconnect()
        pool.release(conn)
        raise
    pipe.reset()

    def read() -> list[Any]:
        try:
            replies = [pipe.parse_response(conn, args[0], **options)
                       for args, options in stack]
        except (redis.ConnectionError, redis.TimeoutError):
            conn.disconnect()
            pool.release(conn)
            pipe.command_stack = stack  # lost on the way: again, with the client's retries
            return list(pipe.execute())
        except BaseException:
            conn.disconnect()  # replies may be left unread: the socket is out of step
            pool.release(conn)
            raise
        pool.release(conn)
        return replies

    return read


def set_union(client: Redis, set_keys: Sequence[str]) -> set[str]:
    """Members of several sets that may live in different slots: one pipelined SMEMBERS
    each (SUNION would be CROSSSLOT on a cluster)."""
    pipe = client.pipeline(transaction=False)
    for key in set_keys:
        pipe.smembers(key)
    out: set[str] = set()
    for members in pipe.execute():
        out.update(as_text(m) for m in members)
    return out


def as_text(value: Any) -> str:
    """A Redis reply value as text (bytes from a client without decode_responses)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


_MISCONFIGURED = (ClusterCrossSlotError, CrossSlotTransactionError, AskError)


def _misconfigured(exc: BaseException) -> bool:
    if isinstance(exc, _MISCONFIGURED):
        return True
    text = str(exc)
    # A plain client against a cluster node: redis-py's message drops the word "MOVED".
    return isinstance(exc, redis.ResponseError) and (
        "CROSSSLOT" in text or text.startswith(("MOVED", "ASK")) or "cluster support disabled"
        in text
    )


# What an outage raises out of redis-py (and so out of rq, which calls it directly): a
# server loading its AOF after a restart answers LOADING, a `BusyLoadingError`, a
# `ConnectionError` too.
OUTAGE_ERRORS: tuple[type[Exception], ...] = (redis.ConnectionError, redis.TimeoutError)


@contextmanager
def redis_errors(action: str) -> Iterator[None]:
    try:
        yield
    except RedisClusterException as exc:
        # Not a RedisError: a cluster client's own refusals (a cross-slot transaction, no
        # cluster at the address). Retrying would not help.
        raise ConfigurationError(f"redis cluster: {action}: {exc}") from None
    except redis.RedisError as exc:
        if _misconfigured(exc):
            raise ConfigurationError(
                f"redis: {action}: {exc} (a cluster needs a redis+cluster:// URL and every"
                " key of one step in one slot)") from None
        raise StoreUnavailable("redis", f"{action}: {exc}") from None
