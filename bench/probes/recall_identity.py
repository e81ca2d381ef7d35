#!/usr/bin/env python
"""Does recall return the same items as before a change? LoCoMo conversation 26 (turns,
reflected facts) built once, then every dev question recalled against a copy of it.

    python bench/probes/recall_identity.py build /tmp/locomo26            # once, with either code
    PYTHONPATH=/tmp/base python bench/probes/recall_identity.py recall /tmp/locomo26 /tmp/before.json
    python bench/probes/recall_identity.py recall /tmp/locomo26 /tmp/after.json
    python bench/probes/recall_identity.py compare /tmp/before.json /tmp/after.json

`bench/probes/locomo_arms.py` builds its memory anew each run, and the build is not deterministic
(two runs of the same code recalled other items for 45 of 151 questions): comparing two
codes needs one store. Recall over a copy of a built store is (150/150 items identical
between two runs of the same code). Each item is dumped whole (`model_dump(mode="json")`)
with the Python type of every field.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: harness, suites

from harness import offline_model_env


def compare(a_path: Path, b_path: Path) -> None:
    a, b = json.loads(a_path.read_text()), json.loads(b_path.read_text())
    same = sum(x == y for x, y in zip(a, b, strict=True))
    ids = sum([i[-1]["source_id"] for i in x] == [i[-1]["source_id"] for i in y]
              for x, y in zip(a, b, strict=True))
    print(f"recalls {len(a)}: identical items {same}, same ids in order {ids}")
    if same != len(a):
        raise SystemExit(1)


def main() -> None:
    mode = sys.argv[1]
    if mode == "compare":
        compare(Path(sys.argv[2]), Path(sys.argv[3]))
        return
    offline_model_env()
    import locomo_arms as la

    folder = Path(sys.argv[2])
    convs, _ = la.load_dataset(["26"])
    if mode == "build":
        folder.mkdir(parents=True, exist_ok=True)
        la.build_memory(folder, convs, print).close()
        return
    from hivemem import MemoryClient
    from hivemem.config import Settings

    tmp = Path(tempfile.mkdtemp(prefix="hivemem-identity-"))
    shutil.copytree(folder, tmp / "copy")
    client = MemoryClient.local(tmp / "copy" / "memory", Settings())
    out: list[list[Any]] = []
    try:
        with la.ARMS["defaults"](client):
            client.recall("locomo-26", "warm up", limit=5)
            for q in convs[0]["questions"]:
                items = client.recall("locomo-26", q["question"], la.BIG_BUDGET,
                                      limit=max(la.KS))
                out.append([[type(v).__name__ for v in i.__dict__.values()]
                            + [i.model_dump(mode="json")] for i in items])
    finally:
        client.close()
        shutil.rmtree(tmp, ignore_errors=True)
    Path(sys.argv[3]).write_text(json.dumps(out), encoding="utf-8")
    print("recalls", len(out))


if __name__ == "__main__":
    main()
