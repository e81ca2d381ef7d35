"""Workspaces: a `.hivemem/` folder that holds one embedded memory, found like git finds `.git`.

    .hivemem/
        config.json     {"format": "hivemem.workspace", "version": 1, ...}
        store/          the embedded mode's data (Qdrant Edge shards, the Redis AOF, and
                        while a process owns it: owner.lock, owner.json, owner.key, sockets)

`init_workspace(folder)` creates one (or opens the one already there, keeping its data);
`find_workspace(start)` walks up from `start` to the filesystem root and returns the nearest.
The config records the embedding model the store was built with: vectors of one workspace
must all come from the same model, so later commands use the recorded one. It also records
where the model is (the cache folder or export used at `init`) and whether it is local, so
that commands inside the workspace need no FASTEMBED_CACHE_PATH / HF_HUB_OFFLINE.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic import ValidationError as PydanticValidationError

from hivemem.config import EmbeddingSettings, Settings
from hivemem.errors import ConfigurationError
from hivemem.providers.embedders import model_cache, model_is_local

DIRNAME = ".hivemem"
CONFIG_NAME = "config.json"
FORMAT = "hivemem.workspace"
VERSION = 1


class WorkspaceError(ConfigurationError):
    """A workspace that cannot be used: missing, unreadable, or from a newer hivemem."""


class WorkspaceEmbedding(BaseModel):
    """The embedder a workspace's vectors come from (fixed for its lifetime)."""

    model_config = ConfigDict(extra="ignore")

    provider: Literal["fastembed", "hashing"] = "fastembed"
    model: str = "sentence-transformers/all-MiniLM-L6-v2"
    dim: int = 384  # the hashing provider's size; fastembed models have their own
    # Where the model was found at `init` (absolute), and whether it is local: then no
    # command of the workspace asks a model hub (HF_HUB_OFFLINE is set for fastembed).
    cache_dir: Path | None = None
    model_path: Path | None = None
    offline: bool = False


class WorkspaceConfig(BaseModel):
    """The versioned `config.json` (unknown keys are kept out, never fatal)."""

    model_config = ConfigDict(extra="ignore")

    format: Literal["hivemem.workspace"] = "hivemem.workspace"
    version: int = Field(default=VERSION, ge=1)
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    store: str = "store"  # relative to the .hivemem folder
    default_session: str = "default"
    embedding: WorkspaceEmbedding = WorkspaceEmbedding()


class Workspace(BaseModel):
    """An opened workspace: `root` is the folder that contains `.hivemem/`."""

    model_config = ConfigDict(frozen=True)

    root: Path
    config: WorkspaceConfig

    @property
    def dir(self) -> Path:
        return self.root / DIRNAME

    @property
    def store_path(self) -> Path:
        return self.dir / self.config.store

    def settings(self, base: Settings) -> Settings:
        """`base` with the workspace's embedder; the recorded model location and offline
        setting unless `base` sets its own (threads and batch stay `base`'s)."""
        recorded = self.config.embedding
        own = base.embedding
        embedding: EmbeddingSettings = own.model_copy(update={
            "provider": recorded.provider, "model": recorded.model, "dim": recorded.dim,
            "cache_dir": own.cache_dir or _env_path("FASTEMBED_CACHE_PATH")
            or recorded.cache_dir,
            "model_path": own.model_path or recorded.model_path,
            "offline": own.offline or recorded.offline,
        })
        return base.model_copy(update={"embedding": embedding})


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value) if value else None


def _write_config(path: Path, config: WorkspaceConfig) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(config.model_dump_json(indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def load_workspace(root: Path) -> Workspace:
    """The workspace whose `.hivemem/` is directly in `root`."""
    path = Path(root) / DIRNAME / CONFIG_NAME
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise WorkspaceError(f"{path} is missing: run `hivemem init` in {root}") from None
    except (OSError, ValueError) as exc:
        raise WorkspaceError(f"cannot read {path}: {exc}") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise WorkspaceError(f"{path} is not a hivemem workspace config (format {FORMAT!r})")
    version = raw.get("version")
    if not isinstance(version, int) or version > VERSION:
        raise WorkspaceError(
            f"{path} has version {version!r}; this hivemem reads version {VERSION}: upgrade"
        )
    try:
        config = WorkspaceConfig.model_validate(raw)
    except PydanticValidationError as exc:
        raise WorkspaceError(f"{path} is invalid: {exc}") from None
    return Workspace(root=Path(root).resolve(), config=config)


def find_workspace(start: Path | None = None) -> Workspace | None:
    """The nearest workspace at or above `start` (default: the current folder), or None."""
    here = Path(start if start is not None else Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / DIRNAME / CONFIG_NAME).is_file():
            return load_workspace(folder)
    return None


def init_workspace(folder: Path, settings: Settings) -> tuple[Workspace, bool]:
    """Create `folder/.hivemem/` (recording `settings`' embedder). A workspace already
    there is returned as is, data and config untouched. Returns (workspace, created)."""
    root = Path(folder).resolve()
    if (root / DIRNAME / CONFIG_NAME).is_file():
        return load_workspace(root), False
    embedding = settings.embedding
    model_path = Path(embedding.model_path).resolve() if embedding.model_path else None
    offline = embedding.provider == "fastembed" and (
        embedding.offline or os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0")
        or model_is_local(embedding))
    config = WorkspaceConfig(
        embedding=WorkspaceEmbedding(
            provider=embedding.provider, model=embedding.model, dim=embedding.dim,
            cache_dir=model_cache(embedding), model_path=model_path, offline=offline,
        )
    )
    workspace = Workspace(root=root, config=config)
    workspace.store_path.mkdir(parents=True, exist_ok=True)
    _write_config(workspace.dir / CONFIG_NAME, config)
    (workspace.dir / ".gitignore").write_text("*\n", encoding="utf-8")
    return workspace, True
