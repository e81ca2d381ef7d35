"""Service commands: `hivemem serve` (HTTP API), `hivemem mcp` (MCP server),
`hivemem apikey create|revoke|list` and `hivemem worker`.

They run on the target every memory command resolves (`hivemem.cli.target`); a worker
needs a deployment (embedded mode runs its own worker threads).
"""

from __future__ import annotations

import os
import signal
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from hivemem.cli.output import cells, emit_json, stderr, stdout
from hivemem.cli.target import Target, opened, with_target
from hivemem.errors import ValidationError
from hivemem.logs import configure_logging
from hivemem.runtime.runner import KINDS, run_worker

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


def _say_where(target: Target, command: str) -> None:
    """Which store a long-running command serves, first thing on stderr."""
    where = {k: v for k, v in target.describe().items() if v is not None}
    # Plain text, one line (a terminal-width wrap would split a path).
    click.echo(f"hivemem {command}: " + ", ".join(f"{k}={v}" for k, v in where.items()),
               err=True)


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
@with_target
def serve(target: Target, host: str | None, port: int | None, workers: int) -> None:
    """Run the HTTP API (OpenAPI at /docs and /openapi.json, metrics at /metrics)."""
    try:
        import uvicorn

        from hivemem.api import create_app
        from hivemem.api.serving import server_config, server_options
    except ImportError as exc:
        raise _missing("api", exc.name or "fastapi") from None
    settings = target.settings
    if click.get_current_context().obj.get("log_level") is None:
        # A server's events are its output (the target resolution set "warning").
        configure_logging(settings.log_level, settings.log_json)
    bind: dict[str, Any] = {"host": host or settings.api.host, "port": port or settings.api.port}
    _say_where(target, "serve")
    if bind["host"] not in LOOPBACK:
        stderr().print(f"[yellow]warning[/]: listening on {escape(bind['host'])} (beyond loopback):"
                       " every /v1 call needs an API key; put TLS in front of it",
                       markup=True)
    if workers > 1:
        if target.mode != "server" or target.settings.qdrant.path is not None:
            raise click.UsageError("--workers needs a deployment (Redis and a Qdrant server)")
        # Each process builds its app from the environment (hivemem.api.app:from_env).
        os.environ["HIVEMEM_REDIS__URL"] = settings.redis.url
        if settings.qdrant.url:
            os.environ["HIVEMEM_QDRANT__URL"] = settings.qdrant.url
        _say_listening(bind["host"], bind["port"])
        uvicorn.run("hivemem.api.app:from_env", factory=True, workers=workers, **bind,
                    **server_options(settings))
        return
    with opened(target, owner=True) as client:  # a server owns its folder, never a guest
        _close_on_sigterm("http")
        config = server_config(create_app(settings, client=client), settings, **bind)
        # Bound here, so that the address printed is the real one (--port 0 too).
        sock = config.bind_socket()
        _say_listening(*sock.getsockname()[:2])
        uvicorn.Server(config).run(sockets=[sock])


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _say_listening(host: str, port: int, path: str = "") -> None:
    """Where a server listens, on stderr, once it does."""
    url = _url(host, port)
    docs = "" if path else f" (API docs: {url}/docs)"
    click.echo(f"listening on {url}{path}{docs}", err=True)


def _close_on_sigterm(transport: str) -> None:
    """SIGTERM (how Docker and systemd stop services) must end in the `with` that closes the
    client: an embedded folder's workers drain and its child Redis server stops.
    uvicorn shuts down on SIGTERM and then raises it again with the handler found at start;
    with the default one the process would die before the client closes, so ours does
    nothing. A stdio server has no such shutdown: SIGTERM interrupts it like Ctrl-C."""
    if transport == "http":
        signal.signal(signal.SIGTERM, lambda *_: None)
    else:
        signal.signal(signal.SIGTERM, signal.default_int_handler)


@click.command("mcp")
@click.option("--transport", type=click.Choice(["stdio", "http"]), default="stdio",
              show_default=True)
@click.option("--namespace", default="default", show_default=True,
              help="The namespace this server reads and writes.")
@click.option("--host", default="127.0.0.1", show_default=True, help="http transport only.")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True,
              help="http transport only (path /mcp).")
@click.option("--no-auth", is_flag=True,
              help="http transport on loopback only: serve --namespace without API keys.")
@with_target
def mcp_cmd(target: Target, transport: str, namespace: str, host: str, port: int,
            no_auth: bool) -> None:
    """Run an MCP server with the tools ingest, recall and known_facts.

    Over http every request needs an API key (`hivemem apikey create`), which decides its
    namespace (and, for an agent key, its agent); --namespace is for stdio and --no-auth."""
    if transport == "http" and no_auth and host not in LOOPBACK:
        raise click.UsageError(f"--no-auth is refused beyond loopback ({host}): create an"
                               " API key and drop --no-auth")
    try:
        from hivemem.mcp import run
    except ImportError as exc:
        raise _missing("mcp", exc.name or "mcp") from None
    _say_where(target, "mcp")
    if transport == "http":
        _say_listening(host, port, "/mcp")
    with opened(target) as client:
        _close_on_sigterm(transport)
        run(client, transport=transport, namespace=namespace, host=host, port=port,
            auth=transport == "http" and not no_auth)


@click.group()
def apikey() -> None:
    """API keys of the HTTP API: each belongs to one namespace."""


@apikey.command("create")
@click.argument("namespace")
@click.option("--agent", "agent_id", default=None,
              help="Bind the key to this agent: it can act as that agent only.")
@click.option("--name", default="", help="A label (who or what uses the key).")
@click.option("--json", "as_json", is_flag=True)
@with_target
def apikey_create(target: Target, namespace: str, agent_id: str | None, name: str,
                  as_json: bool) -> None:
    """Create a key for NAMESPACE; it is printed once and only its hash is stored.

    Without --agent it is a namespace key (a trusted orchestrator: any agent of the
    namespace); with --agent it acts as that one agent only."""
    with opened(target) as client:
        try:
            key, info = client.admin.api_keys().create(namespace, name, agent_id=agent_id)
        except ValidationError as exc:
            hint = "--agent" if exc.field == "agent_id" else "NAMESPACE"
            raise click.BadParameter(exc.message, param_hint=hint) from None
    if as_json:
        emit_json({"key": key, "kind": info.kind, **info.model_dump(mode="json")})
        return
    click.echo(key)
    bound = f", agent {info.agent_id!r} only" if info.agent_id else ""
    stderr().print(escape(f"key {info.key_id} for namespace {info.namespace!r}{bound}: "
                          "store it now, it cannot be shown again"))


@apikey.command("revoke")
@click.argument("key_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@with_target
def apikey_revoke(target: Target, key_id: str, as_json: bool) -> None:
    """Revoke a key (its id, as `list` shows it, or the key itself)."""
    with opened(target) as client:
        removed = client.admin.api_keys().revoke(key_id)
    if not removed:
        raise click.ClickException(f"no API key {key_id!r}")
    if as_json:
        emit_json({"revoked": key_id})
    else:
        click.echo(f"revoked {key_id}")


@apikey.command("list")
@click.option("--json", "as_json", is_flag=True)
@with_target
def apikey_list(target: Target, as_json: bool) -> None:
    """Every key's id, namespace, name and creation time (never the key)."""
    with opened(target, read_only=True) as client:
        keys = client.admin.api_keys().list()
    if as_json:
        emit_json([k.model_dump(mode="json") for k in keys])
        return
    table = Table(title="API keys")
    for column in ("id", "namespace", "agent", "name", "created"):
        table.add_column(column)
    for k in keys:
        table.add_row(*cells(k.key_id, k.namespace, k.agent_id or "(any)", k.name,
                             k.created_at.isoformat(timespec="seconds")))
    stdout().print(table)


@click.command()
@click.argument("kind", type=click.Choice(KINDS))
@click.option("--burst", is_flag=True, help="Exit once there is nothing left to do.")
@click.option("--name", default=None, help="Consumer name (default: host-pid-random).")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None,
              help="Serve Prometheus metrics on this port.")
@with_target
def worker(
    target: Target, kind: str, burst: bool, name: str | None, metrics_port: int | None
) -> None:
    """Run a pipeline worker (scale by starting more of them)."""
    if target.embedded:
        raise click.UsageError(
            "workers run against Redis + Qdrant servers; embedded mode runs its own threads"
        )
    if click.get_current_context().obj.get("log_level") is None:
        # A worker's events are its output (the target resolution set "warning").
        configure_logging(target.settings.log_level, target.settings.log_json)
    report = run_worker(kind, target.settings, burst=burst, name=name,
                        metrics_port=metrics_port)
    stderr().print(
        f"handled={report.handled} dead_lettered={report.dead_lettered}"
        f" reclaimed={report.reclaimed}"
    )


COMMANDS: tuple[click.Command, ...] = (serve, mcp_cmd, apikey, worker)
