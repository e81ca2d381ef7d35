"""Embedded mode's Redis (fakeredis) saved to and loaded from a file in its folder.

Taken on `close()`, after the workers stopped, so it is consistent. After a crash the last
snapshot is loaded and `rebuild_state`/`refeed_boundary` recover what came after it.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

from hivemem.store.redis import Redis, redis_errors

SNAPSHOT = "redis.snapshot"
_FORMAT = ("hivemem.runtime.embedded-redis", 1)


def save_snapshot(client: Redis, path: Path) -> int:
    data: dict[bytes, tuple[bytes, int]] = {}
    with redis_errors("snapshot"):
        for key in client.scan_iter(count=1000):
            dumped = client.dump(key)
            if dumped is None:
                continue
            ttl = int(client.pttl(key))
            data[key] = (dumped, ttl if ttl > 0 else 0)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as fh:
        pickle.dump({"format": _FORMAT, "keys": data}, fh, protocol=pickle.HIGHEST_PROTOCOL)
        fh.flush()
        os.fsync(fh.fileno())
    tmp.replace(path)
    return len(data)


def load_snapshot(client: Redis, path: Path) -> int:
    if not path.exists():
        return 0
    with open(path, "rb") as fh:
        # Our own file in the store's folder, written by save_snapshot (fakeredis DUMP
        # payloads are pickles themselves).
        snapshot = pickle.load(fh)
    if snapshot.get("format") != _FORMAT:
        raise ValueError(f"{path}: unknown snapshot format {snapshot.get('format')!r}")
    with redis_errors("restore snapshot"):
        pipe = client.pipeline(transaction=False)
        for key, (dumped, ttl) in snapshot["keys"].items():
            pipe.restore(key, ttl, dumped, replace=True)
        pipe.execute()
    return len(snapshot["keys"])
