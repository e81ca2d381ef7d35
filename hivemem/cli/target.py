"""Where the workspace commands' memory lives: a server deployment, `--local`, or a workspace.

Precedence, first match wins:

1. ``--redis-url`` / ``--qdrant-url`` on the command: that deployment;
2. ``hivemem --local PATH``: the embedded mode on PATH;
3. ``HIVEMEM_REDIS__URL`` / ``HIVEMEM_QDRANT__URL`` / ``HIVEMEM_QDRANT__PATH`` in the
   environment: that deployment (like ``GIT_DIR``, explicit configuration beats discovery);
4. the nearest `.hivemem/` workspace at or above the current folder;
5. otherwise an error that says to run ``hivemem init``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

import click
from pydantic import BaseModel, ConfigDict

from hivemem.config import Settings
from hivemem.logs import configure_logging
from hivemem.producer.client import MemoryClient
from hivemem.runtime.workspace import Workspace, WorkspaceError, find_workspace

SERVER_ENV = ("HIVEMEM_REDIS__URL", "HIVEMEM_QDRANT__URL", "HIVEMEM_QDRANT__PATH")

F = TypeVar("F", bound=Callable[..., Any])


class Target(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    mode: Literal["workspace", "local", "server"]
    settings: Settings
    workspace: Workspace | None = None
    store: Path | None = None  # the embedded store folder

    def open(self) -> MemoryClient:
        if self.store is not None:
            return MemoryClient.local(self.store, self.settings)
        return MemoryClient(self.settings)

    def describe(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "workspace": str(self.workspace.root) if self.workspace else None,
            "store": str(self.store) if self.store else None,
            "redis_url": _without_password(self.settings.redis.url)
            if self.mode == "server" else None,
            "qdrant": (self.settings.qdrant.url or (str(self.settings.qdrant.path)
                       if self.settings.qdrant.path else None))
            if self.mode == "server" else None,
        }


def _without_password(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    credentials, _, host = rest.rpartition("@")
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user + ':***@' if user else '***@'}{host}"


def server_options(func: F) -> F:
    """``--redis-url`` and ``--qdrant-url``: run this command against a deployment."""
    func = click.option("--qdrant-url", default=None, help="Qdrant server URL (server mode).")(
        func
    )
    func = click.option("--redis-url", default=None, help="Redis URL (server mode).")(func)
    return func


def resolve_target(
    ctx: click.Context, redis_url: str | None = None, qdrant_url: str | None = None
) -> Target:
    settings: Settings = ctx.obj["settings"]
    if ctx.obj.get("log_level") is None:
        # These commands print results: pipeline events only with --log-level.
        configure_logging("warning", settings.log_json)
    if redis_url or qdrant_url:
        update: dict[str, Any] = {}
        if redis_url:
            update["redis"] = settings.redis.model_copy(update={"url": redis_url})
        if qdrant_url:
            update["qdrant"] = settings.qdrant.model_copy(update={"url": qdrant_url, "path": None})
        return Target(mode="server", settings=settings.model_copy(update=update))
    local: str | None = ctx.obj.get("local")
    if local:
        return Target(mode="local", settings=settings, store=Path(local))
    if any(os.environ.get(name) for name in SERVER_ENV):
        return Target(mode="server", settings=settings)
    try:
        workspace = find_workspace()
    except WorkspaceError as exc:
        raise click.ClickException(str(exc)) from None
    if workspace is None:
        raise click.ClickException(
            "no hivemem workspace in this folder or any parent: run `hivemem init` here, "
            "or point at a deployment with --redis-url/--qdrant-url (or HIVEMEM_REDIS__URL)"
        )
    return Target(
        mode="workspace",
        settings=workspace.settings(settings),
        workspace=workspace,
        store=workspace.store_path,
    )


def default_session(target: Target, session: str | None) -> str:
    if session:
        return session
    if target.workspace is not None:
        return target.workspace.config.default_session
    return "default"
