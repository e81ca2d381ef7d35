"""Forgetting a long session (issue 36): how long `forget` takes, and how long until its bytes
are gone from the store's files, against the plain delete the store already had, in the same
run.

    python bench/forget.py [--turns 10000] [--bystander 2000]

Fills an embedded store (hashing embedder, its own valkey child, qdrant-edge, worker threads)
through the product's ingest path with two identical sessions of `--turns` turns (each turn
carries that session's unique secret; episodes of up to 500 turns are closed and reflected)
and a bystander session, then, on the same store:

- baseline, `delete`: what `import --mode replace` did before forget existed: the session's
  points deleted by filter and its Redis keys purged (`SessionStore.purge`): no stream entry,
  dead letter, trace, job or audit reason hunted down, nothing rewritten on disk;
- `forget`: `admin.forget(session)`: every copy, then the AOF rewritten and the engine's
  collections rebuilt (`receipt.disk.seconds` is when the last file no longer held it).

After each, every file under the store folder is read for the session's secret (while the
store is still open): the baseline leaves it on disk, the forget must not. Prints the times
and their ratio and saves bench/results/forget.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

from common import RESULTS, machine_facts  # noqa: E402

from hivemem import MemoryClient  # noqa: E402
from hivemem.config import Settings  # noqa: E402
from hivemem.providers.embedders import HashingEmbedder  # noqa: E402
from hivemem.store.sessions import SessionStore  # noqa: E402
from hivemem.store.vectors.base import FACTS, TURNS  # noqa: E402

DIM = 64
WORDS = ("deploy", "database", "billing", "cache", "queue", "search", "auth", "metrics")


def fill(client: MemoryClient, session: str, turns: int, secret: str | None) -> None:
    handle = client.scoped()
    start = datetime.now(UTC) - timedelta(seconds=turns)
    for first in range(0, turns, 1000):
        handle.ingest_many([{
            "session_id": session, "role": "user" if i % 2 else "assistant",
            "content": (f"note {i}: we decided the {WORDS[i % len(WORDS)]} setting is {i % 97}"
                        + (f", key {secret}" if secret and i % 10 == 0 else "")),
            "timestamp": start + timedelta(seconds=i),
        } for i in range(first, min(turns, first + 1000))])
    handle.wait_until_processed(session, 3600)
    handle.close_episode(session)
    handle.wait_until_reflected(session, 3600)


def files_with(folder: Path, needle: str) -> list[str]:
    raw = needle.encode()
    return [str(p.relative_to(folder)) for p in folder.rglob("*")
            if p.is_file() and raw in p.read_bytes()]


def folder_mb(folder: Path) -> float:
    return round(sum(p.stat().st_blocks * 512 for p in folder.rglob("*") if p.is_file())
                 / 2**20, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=10_000)
    parser.add_argument("--bystander", type=int, default=2_000)
    args = parser.parse_args()
    settings = Settings.model_validate({
        "embedding": {"provider": "hashing", "dim": DIM},
        "episodes": {"max_turns": 500, "topic_shift_threshold": -1.0},
    })
    secrets = {"deleted": "zq" + uuid.uuid4().hex[:14], "forgotten": "zq" + uuid.uuid4().hex[:14]}
    with tempfile.TemporaryDirectory(prefix="hivemem-forget-bench-") as tmp:
        folder = Path(tmp) / "store"
        client = MemoryClient.local(folder, settings, embedder=HashingEmbedder(DIM),
                                    as_guest=False)
        try:
            began = time.perf_counter()
            for name, secret in secrets.items():
                fill(client, name, args.turns, secret)
            fill(client, "bystander", args.bystander, None)
            fill_s = time.perf_counter() - began
            size_before = folder_mb(folder)
            print(f"filled 2 x {args.turns} + {args.bystander} turns in {fill_s:.0f} s"
                  f" ({size_before} MB on disk)", flush=True)

            vectors = client.vector_store()
            began = time.perf_counter()
            where = {"session_id": "deleted"}
            vectors.delete(TURNS, where)
            vectors.delete(FACTS, where)
            SessionStore(client.admin.redis, client.keys).purge("deleted")
            delete_s = time.perf_counter() - began
            deleted_files = files_with(folder, secrets["deleted"])

            began = time.perf_counter()
            receipt = client.admin.forget("forgotten")
            forget_s = time.perf_counter() - began
            forgotten_files = files_with(folder, secrets["forgotten"])
            print(f"delete (baseline): {delete_s * 1000:.0f} ms, secret still in"
                  f" {len(deleted_files)} file(s)")
            print(f"forget: {forget_s * 1000:.0f} ms, disk clean {receipt.disk.seconds:.2f} s"
                  f" after it began, secret in {len(forgotten_files)} file(s);"
                  f" {forget_s / delete_s:.1f}x the baseline's time")
            print(f"removed: {json.dumps(receipt.removed)}")
        finally:
            client.close()
    RESULTS.mkdir(parents=True, exist_ok=True)
    report = {
        "turns": args.turns, "bystander_turns": args.bystander, "fill_s": round(fill_s, 1),
        "store_mb": size_before,
        "baseline_delete": {"ms": round(delete_s * 1000, 1),
                            "files_with_secret_after": deleted_files},
        "forget": {"ms": round(forget_s * 1000, 1),
                   "disk_clean_s": receipt.disk.seconds,
                   "aof_rewritten": receipt.disk.redis_aof_rewritten,
                   "vectors": receipt.disk.vectors_vacuum,
                   "files_with_secret_after": forgotten_files,
                   "removed": receipt.removed},
        "ratio_forget_to_delete": round(forget_s / delete_s, 2),
        "machine": machine_facts(),
    }
    (RESULTS / "forget.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"saved {RESULTS / 'forget.json'}")


if __name__ == "__main__":
    main()
