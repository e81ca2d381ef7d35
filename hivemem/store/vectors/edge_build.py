"""The child process that builds a copied embedded collection's index (`edge_index`).

    python -m hivemem.store.vectors.edge_build [--nice N] <shard folder>

Opens the shard, runs qdrant-edge's optimisers until nothing is left to do (HNSW graphs,
payload indexes on the optimised segments), flushes and closes. Niced: recall in the parent
keeps the cores first.
"""

from __future__ import annotations

import json
import os
import sys
import time

import qdrant_edge as qe


def main(argv: list[str]) -> int:
    # --nice N: how much to step back for the parent's recall (10 by default; a benchmark
    # measuring the build itself passes 0).
    nice = 10
    if len(argv) == 3 and argv[0] == "--nice" and argv[1].isdigit():
        nice, argv = int(argv[1]), argv[2:]
    if len(argv) != 1:
        print("usage: python -m hivemem.store.vectors.edge_build [--nice N] <shard folder>",
              file=sys.stderr)
        return 2
    if nice:
        os.nice(nice)
    started = time.perf_counter()
    shard = qe.EdgeShard.load(argv[0])
    changed = shard.optimize()
    shard.flush()
    info = shard.info()
    shard.close()
    print(json.dumps({"optimized": changed, "seconds": round(time.perf_counter() - started, 2),
                      "points": info.points_count, "indexed": info.indexed_vectors_count}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
