"""Service commands: `hivemem serve` (HTTP API), `hivemem mcp` (MCP server) and
`hivemem apikey create|revoke|list`.

They run on the same target as the workspace commands (`hivemem.cli.target`): a deployment
(``--redis-url``/``--qdrant-url`` or the environment), ``hivemem --local PATH``, or the
nearest workspace.
"""

from __future__ import annotations

import json
import os
from typing import Any

import click

from hivemem.cli.target import resolve_target, server_options
from hivemem.cli.workspace import Opened, emit_json, stderr, stdout
from hivemem.errors import HivememError


def _missing(extra: str, module: str) -> click.ClickException:
    return click.ClickException(
        f"{module} is not installed: pip install 'hivemem[{extra}]'"
    )


@click.command()
@click.option("--host", default=None, help="Bind address (default HIVEMEM_API__HOST, 127.0.0.1).")
@click.option("--port", type=click.IntRange(0, 65535), default=None,
              help="Port (default HIVEMEM_API__PORT, 8080).")
@click.option("--workers", type=click.IntRange(1, 64), default=1, show_default=True,
              help="API processes (a deployment only: embedded mode is one process).")
@server_options
@click.pass_context
def serve(ctx: click.Context, host: str | None, port: int | None, workers: int,
          redis_url: str | None, qdrant_url: str | None) -> None:
    """Run the HTTP API (OpenAPI at /docs and /openapi.json, metrics at /metrics)."""
    try:
        import uvicorn

        from hivemem.api import create_app
    except ImportError as exc:
        raise _missing("api", exc.name or "fastapi") from None
    target = resolve_target(ctx, redis_url, qdrant_url)
    settings = target.settings
    if ctx.obj.get("log_level") is None:
        from hivemem.logs import configure_logging

        configure_logging(settings.log_level, settings.log_json)
    bind: dict[str, Any] = {"host": host or settings.api.host, "port": port or settings.api.port,
            "log_level": "warning", "access_log": False}
    if workers > 1:
        if target.mode != "server" or target.settings.qdrant.path is not None:
            raise click.UsageError("--workers needs a deployment (Redis and a Qdrant server)")
        # Each process builds its app from the environment (hivemem.api.app:from_env).
        os.environ["HIVEMEM_REDIS__URL"] = settings.redis.url
        if settings.qdrant.url:
            os.environ["HIVEMEM_QDRANT__URL"] = settings.qdrant.url
        uvicorn.run("hivemem.api.app:from_env", factory=True, workers=workers, **bind)
        return
    with Opened(target) as client:
        uvicorn.run(create_app(settings, client=client), **bind)


@click.command("mcp")
@click.option("--transport", type=click.Choice(["stdio", "http"]), default="stdio",
              show_default=True)
@click.option("--namespace", default="default", show_default=True,
              help="The namespace this server reads and writes.")
@click.option("--host", default="127.0.0.1", show_default=True, help="http transport only.")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True,
              help="http transport only (path /mcp).")
@server_options
@click.pass_context
def mcp_cmd(ctx: click.Context, transport: str, namespace: str, host: str, port: int,
            redis_url: str | None, qdrant_url: str | None) -> None:
    """Run an MCP server with the tools remember, recall and known_facts."""
    try:
        from hivemem.mcp import run
    except ImportError as exc:
        raise _missing("mcp", exc.name or "mcp") from None
    target = resolve_target(ctx, redis_url, qdrant_url)
    with Opened(target) as client:
        run(client, transport=transport, namespace=namespace, host=host, port=port)


@click.group()
def apikey() -> None:
    """API keys of the HTTP API: each belongs to one namespace."""


@apikey.command("create")
@click.argument("namespace")
@click.option("--name", default="", help="A label (who or what uses the key).")
@click.option("--json", "as_json", is_flag=True)
@server_options
@click.pass_context
def apikey_create(ctx: click.Context, namespace: str, name: str, as_json: bool,
                  redis_url: str | None, qdrant_url: str | None) -> None:
    """Create a key for NAMESPACE; it is printed once and only its hash is stored."""
    from hivemem.store.apikeys import ApiKeyStore

    target = resolve_target(ctx, redis_url, qdrant_url)
    with Opened(target) as client:
        try:
            key, info = ApiKeyStore(client._redis, client.keys).create(namespace, name)
        except HivememError as exc:
            raise click.BadParameter(str(exc), param_hint="NAMESPACE") from None
    if as_json:
        emit_json({"key": key, **info.model_dump(mode="json")})
        return
    click.echo(key)
    stderr().print(f"key {info.key_id} for namespace {info.namespace!r}: store it now, "
                   "it cannot be shown again")


@apikey.command("revoke")
@click.argument("key_id")
@server_options
@click.pass_context
def apikey_revoke(ctx: click.Context, key_id: str, redis_url: str | None,
                  qdrant_url: str | None) -> None:
    """Revoke a key (its id, as `list` shows it, or the key itself)."""
    from hivemem.store.apikeys import ApiKeyStore

    target = resolve_target(ctx, redis_url, qdrant_url)
    with Opened(target) as client:
        removed = ApiKeyStore(client._redis, client.keys).revoke(key_id)
    if not removed:
        raise click.ClickException(f"no API key {key_id!r}")
    click.echo(json.dumps({"revoked": key_id}))


@apikey.command("list")
@click.option("--json", "as_json", is_flag=True)
@server_options
@click.pass_context
def apikey_list(ctx: click.Context, as_json: bool, redis_url: str | None,
                qdrant_url: str | None) -> None:
    """Every key's id, namespace, name and creation time (never the key)."""
    from rich.table import Table

    from hivemem.store.apikeys import ApiKeyStore

    target = resolve_target(ctx, redis_url, qdrant_url)
    with Opened(target) as client:
        keys = ApiKeyStore(client._redis, client.keys).list()
    if as_json:
        emit_json([k.model_dump(mode="json") for k in keys])
        return
    table = Table(title="API keys")
    for column in ("id", "namespace", "name", "created"):
        table.add_column(column)
    for k in keys:
        table.add_row(k.key_id, k.namespace, k.name, k.created_at.isoformat(timespec="seconds"))
    stdout().print(table)


def register(group: click.Group) -> None:
    group.add_command(serve)
    group.add_command(mcp_cmd)
    group.add_command(apikey)
