"""Where a command's memory lives: the ONE resolution every memory command goes through.

Precedence, first match wins:

1. ``--redis-url`` / ``--qdrant-url`` on the command: that deployment;
2. ``hivemem --local PATH``: the embedded mode on PATH;
3. the nearest `.hivemem/` workspace at or above the current folder (embedded mode);
4. ``HIVEMEM_REDIS__URL`` / ``HIVEMEM_QDRANT__URL`` / ``HIVEMEM_QDRANT__PATH`` in the
   environment: that deployment;
5. otherwise `NoTarget` (exit 1): there is no silent fallback to a Redis on 127.0.0.1,
   which would read some unrelated deployment's memory.

Commands get the resolved `Target` from the `with_target` decorator, which also adds the
``--redis-url``/``--qdrant-url`` options; `opened` turns it into a client for one command.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, TypeVar

import click
from pydantic import BaseModel, ConfigDict

from hivemem.config import Settings
from hivemem.errors import HivememError, NotFound, ValidationError
from hivemem.logs import configure_logging
from hivemem.producer.client import MemoryClient
from hivemem.runtime.owner import LOCK_NAME, OwnerRecord, read_record
from hivemem.runtime.workspace import Workspace, WorkspaceError, find_workspace

SERVER_ENV = ("HIVEMEM_REDIS__URL", "HIVEMEM_QDRANT__URL", "HIVEMEM_QDRANT__PATH")
NO_TARGET = "no workspace here: run `hivemem init`, or pass --local / --redis-url"

R = TypeVar("R")


class NoTarget(HivememError):
    """No flag, no `--local`, no workspace up the folder tree, no server in the environment."""

    def __init__(self) -> None:
        super().__init__(NO_TARGET)


class Target(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    mode: Literal["workspace", "local", "server"]
    settings: Settings
    workspace: Workspace | None = None
    store: Path | None = None  # the embedded store folder

    @property
    def embedded(self) -> bool:
        return self.store is not None

    def open(self, *, owner: bool = False) -> MemoryClient:
        """A client on the target. On an embedded folder another process owns (`hivemem
        serve`), a guest of that process; `owner=True`: own the folder or fail."""
        if self.store is not None:
            if owner:
                # A command that owned the folder a moment ago is closing: wait for it.
                embedded = self.settings.embedded.model_copy(update={"lock_wait_s": 30.0})
                settings = self.settings.model_copy(update={"embedded": embedded})
                return MemoryClient.local(self.store, settings, as_guest=False)
            return MemoryClient.local(self.store, self.settings)
        return MemoryClient(self.settings)

    def default_session(self, session: str | None = None) -> str:
        """`session`, else the workspace's default session, else ``"default"``."""
        if session:
            return session
        if self.workspace is not None:
            return self.workspace.config.default_session
        return "default"

    def describe(self) -> dict[str, Any]:
        server = self.mode == "server"
        qdrant = self.settings.qdrant
        return {
            "mode": self.mode,
            "workspace": str(self.workspace.root) if self.workspace else None,
            "store": str(self.store) if self.store else None,
            "redis_url": _without_password(self.settings.redis.url) if server else None,
            "qdrant": (qdrant.url or (str(qdrant.path) if qdrant.path else None))
            if server else None,
            # The process that owns the embedded folder now (`hivemem serve`, an app), which
            # a command reaches through its sockets; None: the command opened it itself.
            "owner_pid": owner.pid if (owner := self.owner()) is not None else None,
        }

    def owner(self) -> OwnerRecord | None:
        return read_record(self.store) if self.store is not None else None

    def holds_store(self) -> bool:
        """False for an embedded folder with no store in it (a typo, a folder never used):
        a read-only command must not create one there. A workspace's store folder, made by
        `hivemem init`, counts as a store even while empty; a deployment always does."""
        if self.store is None:
            return True
        if self.workspace is not None:
            return self.store.is_dir()
        # Every process that ever opened the folder left its lock file there.
        return (self.store / LOCK_NAME).is_file()


def _without_password(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    credentials, _, host = rest.rpartition("@")
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user + ':***@' if user else '***@'}{host}"


def resolve_target(
    settings: Settings,
    *,
    local: str | Path | None = None,
    redis_url: str | None = None,
    qdrant_url: str | None = None,
    start: Path | None = None,
    environ: dict[str, str] | None = None,
) -> Target:
    """The target by the precedence above. `start`: where the workspace search begins
    (default: the current folder). Raises `NoTarget`, or `WorkspaceError` for a workspace
    whose config cannot be read."""
    if redis_url or qdrant_url:
        update: dict[str, Any] = {}
        if redis_url:
            update["redis"] = settings.redis.model_copy(update={"url": redis_url})
        if qdrant_url:
            update["qdrant"] = settings.qdrant.model_copy(update={"url": qdrant_url, "path": None})
        return Target(mode="server", settings=settings.model_copy(update=update))
    if local:
        return Target(mode="local", settings=settings, store=Path(local))
    workspace = find_workspace(start)
    if workspace is not None:
        return Target(mode="workspace", settings=workspace.settings(settings),
                      workspace=workspace, store=workspace.store_path)
    env = os.environ if environ is None else environ
    if any(env.get(name) for name in SERVER_ENV):
        return Target(mode="server", settings=settings)
    raise NoTarget()


def local_settings(settings: Settings, start: Path | None = None) -> Settings:
    """`settings` for a command that makes its own embedded store (`demo`, `eval`): the
    nearest workspace's embedding settings (model, cache folder, model path, offline) when
    there is one, as every other command uses them; else `settings` as they are."""
    try:
        workspace = find_workspace(start)
    except WorkspaceError as exc:
        raise click.ClickException(str(exc)) from None
    return workspace.settings(settings) if workspace is not None else settings


def with_target(func: Callable[..., R]) -> Callable[..., R]:
    """Add ``--redis-url``/``--qdrant-url`` to a command and call it with ``target=`` the
    resolved `Target` (the root group's ``--local`` and settings come from the context).

    Put it under ``@click.command()`` and the command's own options. Click runs parameter
    callbacks first, so argument checks still exit 2 before anything is resolved."""

    @click.option("--redis-url", default=None, help="Redis URL (server mode).")
    @click.option("--qdrant-url", default=None, help="Qdrant server URL (server mode).")
    @functools.wraps(func)
    def command(*args: Any, redis_url: str | None, qdrant_url: str | None,
                **kwargs: Any) -> R:
        ctx = click.get_current_context()
        settings: Settings = ctx.obj["settings"]
        if ctx.obj.get("log_level") is None:
            # Commands print results: pipeline events only with --log-level.
            configure_logging("warning", settings.log_json)
        try:
            target = resolve_target(settings, local=ctx.obj.get("local"),
                                    redis_url=redis_url, qdrant_url=qdrant_url)
        except (NoTarget, WorkspaceError) as exc:
            raise click.ClickException(str(exc)) from None
        return func(*args, target=target, **kwargs)

    return command


@contextmanager
def opened(target: Target, *, owner: bool = False,
           read_only: bool = False) -> Iterator[MemoryClient]:
    """A client on `target` for one command, closed after it (`owner`: see `Target.open`).
    `read_only`: the command only reads, so a folder that holds no store is an error (exit
    1) and nothing is created there. An unknown session or fact (`NotFound`) is an error
    (exit 1); other bad input found by the client (`ValidationError`) a usage error (exit
    2); any other `HivememError` a clean error (exit 1) instead of a traceback."""
    if read_only and not target.holds_store():
        raise click.ClickException(
            f"no hivemem store in {target.store}: nothing to read (check the path; a command"
            " that writes, such as `hivemem ingest`, creates the store)")
    try:
        client = target.open(owner=owner)
    except HivememError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        yield client
    except NotFound as exc:
        raise click.ClickException(str(exc)) from None
    except ValidationError as exc:
        raise click.BadParameter(exc.message, param_hint=exc.field) from None
    except HivememError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        client.close()
