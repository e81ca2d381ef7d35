"""Who owns an embedded store folder, and how other processes reach it.

One process at a time owns a folder (`hivemem serve`, an app's `MemoryClient.local`, any
CLI command when nothing else runs): it holds an exclusive `flock` on `<store>/owner.lock`
for its lifetime (the kernel drops it when the process dies, however it dies), runs the
folder's Redis server and opens the vector engine. It writes `<store>/owner.json`: its pid,
the Redis socket and, when it serves the HTTP API, the API's address. The API's local key,
made for the purpose at each start, is in `<store>/owner.key` (mode 0600: only the folder's
user can read it). Another process that finds the lock taken reads these and goes through
the owner: Redis through the shared socket, vectors through the API.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import time
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field
from pydantic import ValidationError as PydanticValidationError

from hivemem.errors import FolderBusy

LOCK_NAME = "owner.lock"
RECORD_NAME = "owner.json"
KEY_NAME = "owner.key"
# The header the owner's vector API reads the local key from.
KEY_HEADER = "x-hivemem-owner-key"


class OwnerRecord(BaseModel):
    """`owner.json`: where the owner of a folder can be reached."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    pid: int
    redis_url: str
    api_url: str | None = None
    started_at: datetime = Field(default_factory=lambda: datetime.now(UTC))


def _write_private(path: Path, text: str) -> None:
    """Write `text` to `path` atomically, readable by the owner's user only."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


class OwnerLock:
    """The exclusive lock on a folder. `acquire(wait)` returns False when another process
    holds it after `wait` seconds; `release()` also removes the owner's files."""

    def __init__(self, store: Path) -> None:
        self.store = Path(store)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, wait: float = 0.0) -> bool:
        self.store.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.store / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    return False
                time.sleep(0.05)
                continue
            self._fd = fd
            # What a previous owner wrote is stale now (it died holding the lock).
            for name in (RECORD_NAME, KEY_NAME):
                (self.store / name).unlink(missing_ok=True)
            return True

    def publish(self, redis_url: str, api_url: str | None = None) -> OwnerRecord:
        """Write `owner.json` (the owner is reachable from now on)."""
        record = OwnerRecord(pid=os.getpid(), redis_url=redis_url, api_url=api_url)
        _write_private(self.store / RECORD_NAME, record.model_dump_json() + "\n")
        return record

    def make_key(self) -> str:
        """A fresh local key for the owner's API, kept in `owner.key` (mode 0600)."""
        key = "hmo_" + secrets.token_urlsafe(32)
        _write_private(self.store / KEY_NAME, key + "\n")
        return key

    def release(self) -> None:
        if self._fd is None:
            return
        for name in (RECORD_NAME, KEY_NAME):
            (self.store / name).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None


def owner_of(store: Path) -> OwnerRecord | None:
    """The record of the process holding `store`'s lock, or None when nobody holds it.
    A lock holder that has not published its record yet is waited for (it is starting);
    `FolderBusy` when it has not within a minute."""
    store = Path(store)
    if not (store / LOCK_NAME).exists():
        return None
    # An owner starting up publishes once its store is open (model loads included).
    deadline = time.monotonic() + 60.0
    while True:
        if not _locked(store):
            return None
        record = read_record(store)
        if record is not None:
            return record
        if time.monotonic() >= deadline:
            raise FolderBusy(f"{store} is locked by another process that published no"
                             f" address in {RECORD_NAME}")
        time.sleep(0.1)


def _locked(store: Path) -> bool:
    fd = os.open(store / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops a shared lock taken here
    return False


def read_record(store: Path) -> OwnerRecord | None:
    try:
        return OwnerRecord.model_validate(json.loads((Path(store) / RECORD_NAME).read_text()))
    except (OSError, ValueError, PydanticValidationError):
        return None


def read_key(store: Path) -> str | None:
    try:
        return (Path(store) / KEY_NAME).read_text(encoding="utf-8").strip() or None
    except OSError:
        return None
