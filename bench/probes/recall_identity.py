#!/usr/bin/env python
"""Does recall return the same items as before a change? LoCoMo conversation 26 (turns,
reflected facts) built once, then every dev question recalled against a copy of it.

    python bench/probes/recall_identity.py build /tmp/locomo26            # once, with either code
    PYTHONPATH=/tmp/base python bench/probes/recall_identity.py recall /tmp/locomo26 /tmp/before.json
    python bench/probes/recall_identity.py recall /tmp/locomo26 /tmp/after.json
    python bench/probes/recall_identity.py compare /tmp/before.json /tmp/after.json

`wide` instead of `recall`: each question under four policies (balanced; high_recall with
history; agent_state; cheap at 300 tokens), all with `explain`, so the items left out and
why are compared too. `cpu /tmp/locomo26 [PASSES]`: recall's CPU time per call over the
same questions (process_time), the query vectors cached after a first pass (excl. the
embedding; it swaps the client's recaller's embedder, an internal): the recall core
over real candidates with facts; run two trees side by side.

`bench/probes/locomo_arms.py` builds its memory anew each run, and the build is not deterministic
(two runs of the same code recalled other items for 45 of 151 questions): comparing two
codes needs one store. Recall over a copy of a built store is (150/150 items identical
between two runs of the same code). Each item is dumped whole (`model_dump(mode="json")`)
with the Python type of every field.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: harness, suites

from harness import offline_model_env

# `wide`: the policies each question is recalled under (keyword arguments of `recall`).
WIDE: list[dict[str, Any]] = [
    {"preset": "balanced", "explain": True},
    {"preset": "high_recall", "explain": True, "include_history": True},
    {"preset": "agent_state", "explain": True},
    {"preset": "cheap", "token_budget": 300, "explain": True},
]


def compare(a_path: Path, b_path: Path) -> None:
    a, b = json.loads(a_path.read_text()), json.loads(b_path.read_text())
    same = sum(x == y for x, y in zip(a, b, strict=True))
    if a and isinstance(a[0], dict):  # `wide`: items and exclusions per recall
        print(f"recalls {len(a)}: identical items and exclusions {same}")
    else:
        ids = sum([i[-1]["source_id"] for i in x] == [i[-1]["source_id"] for i in y]
                  for x, y in zip(a, b, strict=True))
        print(f"recalls {len(a)}: identical items {same}, same ids in order {ids}")
    if same != len(a):
        raise SystemExit(1)


def dump(items: Any) -> list[Any]:
    return [[type(v).__name__ for v in i.__dict__.values()] + [i.model_dump(mode="json")]
            for i in items]


class CachedQueries:
    """The product's query embedder, each question's vector kept after its first use."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.cache = inner, {}
        self.dim, self.name = inner.dim, getattr(inner, "name", "cached")
        self.releases_gil = bool(getattr(inner, "releases_gil", False))

    def embed_query(self, text: str) -> Any:
        vector = self.cache.get(text)
        if vector is None:
            vector = self.cache[text] = self.inner.embed_query(text)
        return vector

    def embed_documents(self, texts: Any) -> Any:
        return self.inner.embed_documents(texts)


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
    out: list[Any] = []
    cpu: list[float] = []
    questions = [q["question"] for q in convs[0]["questions"]]
    try:
        with la.ARMS["defaults"](client):
            client.recall("locomo-26", "warm up", limit=5)
            if mode == "cpu":
                recaller = client._service.reads.recaller()
                recaller.embedder = CachedQueries(recaller.embedder)
                for passes in range(1 + int(sys.argv[3] if len(sys.argv) > 3 else 2)):
                    for q in questions:
                        started = time.process_time()
                        client.recall("locomo-26", q, la.BIG_BUDGET, limit=max(la.KS))
                        if passes:  # the first embeds each question
                            cpu.append((time.process_time() - started) * 1000)
            for q in questions if mode in ("recall", "wide") else ():
                if mode == "wide":
                    for kw in WIDE:
                        r = client.recall("locomo-26", q, **kw)
                        out.append({"items": dump(r.items), "excluded": dump(r.excluded)})
                else:
                    out.append(dump(client.recall("locomo-26", q, la.BIG_BUDGET,
                                                  limit=max(la.KS))))
    finally:
        client.close()
        shutil.rmtree(tmp, ignore_errors=True)
    if mode == "cpu":
        v = sorted(cpu)
        print(json.dumps({"tree": os.environ.get("PYTHONPATH"), "n": len(v),
                          "cpu_ms_p50": round(v[len(v) // 2], 3),
                          "cpu_ms_p95": round(v[int(len(v) * 0.95)], 3),
                          "cpu_ms_mean": round(sum(v) / len(v), 3)}))
        return
    Path(sys.argv[3]).write_text(json.dumps(out), encoding="utf-8")
    print("recalls", len(out))


if __name__ == "__main__":
    main()
