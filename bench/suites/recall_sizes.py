"""Recall latency against memory size, through the public API only.

A store is filled through `MemoryClient.ingest_many` (the real pipeline: embed, window,
boundary and reflect workers) with synthetic word texts and the hashing embedder (384 dims),
so filling 100k turns costs minutes, not the model's hours; then `recall(session, query,
limit=20)` is timed (the `balanced` preset: dense + BM25 over turns and facts, neighbours,
scoring, budget; the query embedded by the same embedder). The shapes of bench/probes/
recall_scale.py (which fills the engine directly and compares with the bare search):
- c: N turns in one session (default 10k);
- a: one big session (default 100k);
- b: the multi-tenant shape, many sessions, recall in one of them.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from harness import Samples, machine_facts

from hivemem import (
    Backpressure,
    MemoryClient,
    ProcessingTimeout,
    ReflectionTimeout,
    RetryLater,
    Settings,
)

VOCAB_SIZE = 5000
TOPICS = 64
BATCH = 500


class Texts:
    """Synthetic turns: each from one of `TOPICS` topics (a topic favours its own words), so
    dense and lexical search have something to find."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)
        self.words = [f"w{i:04d}" for i in range(VOCAB_SIZE)]
        per = VOCAB_SIZE // TOPICS
        self.topics = [self.words[t * per:(t + 1) * per] for t in range(TOPICS)]

    def turn(self) -> str:
        topic = self.rng.choice(self.topics)
        words = [self.rng.choice(topic) if self.rng.random() < 0.7 else self.rng.choice(self.words)
                 for _ in range(self.rng.randint(8, 30))]
        return " ".join(words)

    def query(self) -> str:
        return " ".join(self.rng.choice(self.rng.choice(self.topics)) for _ in range(6))


def settings() -> Settings:
    return Settings.model_validate({"embedding": {"provider": "hashing", "dim": 384}})


def fill(client: MemoryClient, sessions: list[str], per_session: int, texts: Texts,
         log: Any = print) -> dict[str, Any]:
    """Ingest `per_session` turns into each session (interleaved, in batches), then wait
    until every turn is recallable. Returns the ingest and processing times."""
    rows = [{"session_id": s, "role": "user" if i % 2 else "assistant", "content": texts.turn()}
            for i in range(per_session) for s in sessions]
    t0 = time.perf_counter()
    for start in range(0, len(rows), BATCH):
        batch = rows[start:start + BATCH]
        while True:
            try:
                client.ingest_many(batch)
                break
            except (Backpressure, RetryLater):
                time.sleep(0.2)  # the workers are behind: let them catch up
        if (start // BATCH) % 50 == 49:
            log(f"    ingested {start + len(batch):,}/{len(rows):,}")
    ingest_s = time.perf_counter() - t0
    for session in sessions:
        client.wait_until_processed(session, timeout=3600)
    return {"turns": len(rows), "ingest_s": round(ingest_s, 1),
            "processed_s": round(time.perf_counter() - t0, 1),
            "turns_per_s": round(len(rows) / (time.perf_counter() - t0), 1)}


def timed_recalls(client: MemoryClient, session: str, texts: Texts, queries: int
                  ) -> dict[str, float]:
    client.recall(session, "warm up", limit=20)
    samples = Samples()
    for _ in range(queries):
        query = texts.query()
        with samples.timed():
            client.recall(session, query, limit=20)
    return samples.summary()


def run_row(row: str, *, sessions: int, per_session: int, queries: int,
            log: Any = print, settle_s: float = 0.0,
            probe: Callable[[MemoryClient, str, Texts], dict[str, Any]] | None = None,
            quiet: Callable[[MemoryClient], AbstractContextManager[Any]] | None = None,
            ) -> dict[str, Any]:
    """One row: a fresh embedded store, filled, then `queries` timed recalls in session 0.
    `settle_s`: first wait (at most that long in all) until every session is reflected, so
    that the recalls meet an idle pipeline; `probe`: more measurements on the filled store
    (bench/probes/recall_pipeline.py: the bare search, recall excl./incl. the embedding),
    merged into the row; `quiet` (a probe's): when reflection has not caught up within
    `settle_s`, the timed recalls run inside it (it holds the background work), noted as
    `idle_mode`."""
    texts = Texts(seed=ord(row[0]))
    names = [f"{row}-s{i}" for i in range(sessions)]
    folder = tempfile.mkdtemp(prefix=f"hivemem-sizes-{row}-")
    log(f"  row {row}: {sessions} session(s) x {per_session:,} turns")
    t0 = time.perf_counter()
    try:
        with MemoryClient.local(folder, settings()) as client:
            load0 = os.getloadavg()[0]
            filled = fill(client, names, per_session, texts, log)
            if settle_s:
                filled["reflected"] = _settle(client, names, settle_s)
                filled["reflected_s"] = round(time.perf_counter() - t0, 1)
            mode = "settled" if filled.get("reflected", True) else "not settled"
            hold: AbstractContextManager[Any] = nullcontext()
            if mode != "settled" and quiet is not None:
                hold, mode = quiet(client), "reflection held (not settled)"
            with hold:
                info = client.admin.session_info(names[0])
                facts, episodes = info.facts_active, info.episodes
                load_mid = os.getloadavg()[0]
                recall = timed_recalls(client, names[0], texts, queries)
                split = probe(client, names[0], texts) if probe is not None else None
                load1 = os.getloadavg()[0]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    log(f"  row {row}: recall p50 {recall['p50']:.1f} ms, p95 {recall['p95']:.1f} ms"
        f" ({filled['turns']:,} turns filled in {filled['processed_s']:.0f} s;"
        f" session 0: {facts:,} facts, {episodes:,} episodes)")
    out = {"row": row, "sessions": sessions, "turns_per_session": per_session,
           "fill": filled, "facts_active": facts, "episodes": episodes, "idle_mode": mode,
           "recall_ms": recall,
           "load1": [round(load0, 2), round(load_mid, 2), round(load1, 2)]}
    if split is not None:
        out.update(split)
    return out


def _settle(client: MemoryClient, sessions: list[str], timeout: float) -> bool:
    """Until every session is reflected (at most `timeout` s in all): True when all are."""
    deadline = time.monotonic() + timeout
    for session in sessions:
        try:
            client.wait_until_reflected(session, timeout=max(0.01, deadline - time.monotonic()))
        except (ProcessingTimeout, ReflectionTimeout):
            return False
    return True


def describe() -> dict[str, Any]:
    return {"embedder": "hashing, 384 dims", "texts": "synthetic words, 64 topics",
            "recall": "MemoryClient.recall(limit=20), balanced preset", "machine": machine_facts()}
