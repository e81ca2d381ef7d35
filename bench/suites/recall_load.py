"""Recall while the pipeline catches up, against recall once it is idle (public API only).

A fresh embedded store (hashing embedder, 384 dims) gets one session's turns through
`MemoryClient.ingest_many` in batches of 1,000 (the real pipeline: embed, boundary,
reflection with the heuristic reflector: threads of this process, but reflection, by the
embedded default, a process of its own since issue 40), then
`wait_until_processed` (every turn recallable). From there recalls are timed in windows
while reflection works through the closed episodes ("catch-up"), each window with the
session's episodes and active facts at its end; then `wait_until_reflected` and the same
recalls once nothing runs ("idle"). The ratio of the two p95s is the point: foreground
recall should not wait behind the pipeline's threads.

Two shapes: `turns` (many turns, a quarter of them statements that reflection turns into
facts, many of them changes of a few slots) and `facts` (nearly every turn a new fact:
a session with thousands of facts).
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from harness import PausedBackground, machine_facts, summarize

from hivemem import (
    Backpressure,
    MemoryClient,
    ProcessingTimeout,
    ReflectionTimeout,
    RetryLater,
    Settings,
)

BATCH = 1000
SLOTS = ["database", "deploy day", "frontend framework", "cache", "logging standard",
         "queue", "region", "ci system", "message broker", "test runner"]
VALUES = ["MySQL", "Postgres", "Redis", "Kafka", "Vue", "React", "Tuesday", "Friday",
          "Datadog", "Jenkins", "GitHub Actions", "Memcached", "RabbitMQ", "Pytest"]
CITIES = ["Paris", "Berlin", "Tokyo", "Lima", "Oslo", "Cairo", "Quito", "Hanoi"]
WORDS = [f"w{i:04d}" for i in range(5000)]


class Turns:
    """Synthetic turns. `fact_share`: the share that states something (a switch of a
    slot, where someone lives, a preference, a decision); the rest are topic word salad.
    With `distinct`, each statement names a slot of its own (`slot 123`), so each becomes
    a new fact instead of a new version of a few."""

    def __init__(self, seed: int, fact_share: float, *, distinct: bool = False) -> None:
        self.rng = random.Random(seed)
        self.fact_share = fact_share
        self.distinct = distinct
        self.n = 0

    def _slot(self) -> str:
        if self.distinct:
            self.n += 1
            return f"{self.rng.choice(SLOTS)} {self.n}"
        return self.rng.choice(SLOTS)

    def turn(self) -> str:
        rng = self.rng
        if rng.random() >= self.fact_share:
            return " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 30)))
        pick = rng.random()
        value = rng.choice(VALUES)
        if self.distinct:
            return f"Decision: the {self._slot()} is {value} {self.n}."
        if pick < 0.4:
            return f"We switch the {self._slot()} to {value}."
        if pick < 0.6:
            return f"I live in {rng.choice(CITIES)} now."
        if pick < 0.8:
            return f"I prefer {value} for the {self._slot()}."
        return f"Decision: the {self._slot()} is {value}."

    def query(self) -> str:
        if self.rng.random() < 0.5:
            return f"what is the {self.rng.choice(SLOTS)} now?"
        return " ".join(self.rng.choice(WORDS) for _ in range(6))


def settings() -> Settings:
    return Settings.model_validate({"embedding": {"provider": "hashing", "dim": 384}})


def fill_batches(
    client: MemoryClient, session: str, turns: int, texts: Turns,
) -> Iterator[int]:
    """`turns` synthetic turns into `session`, `ingest_many` in batches of `BATCH` (waiting
    out backpressure); yields the turns written after each batch."""
    for start in range(0, turns, BATCH):
        rows = [{"session_id": session, "role": "user" if i % 2 else "assistant",
                 "content": texts.turn()} for i in range(start, min(turns, start + BATCH))]
        while True:
            try:
                client.ingest_many(rows)
                break
            except (Backpressure, RetryLater):
                time.sleep(0.2)
        yield start + len(rows)


def _fill(client: MemoryClient, session: str, turns: int, texts: Turns) -> dict[str, Any]:
    t0 = time.perf_counter()
    for _ in fill_batches(client, session, turns, texts):
        pass
    ingest_s = time.perf_counter() - t0
    client.wait_until_processed(session, timeout=7200)
    return {"turns": turns, "ingest_s": round(ingest_s, 1),
            "processed_s": round(time.perf_counter() - t0, 1)}


def _window(client: MemoryClient, session: str, texts: Turns, n: int,
            pause_niced: bool = False) -> dict[str, Any]:
    """`n` timed recalls; `pause_niced`: other work's niced processes stopped meanwhile
    (`PausedBackground`: not this process's own, so reflection goes on)."""
    ms = []
    with PausedBackground(pause_niced) as paused:
        for _ in range(n):
            query = texts.query()
            t0 = time.perf_counter()
            client.recall(session, query, limit=20)
            ms.append((time.perf_counter() - t0) * 1000)
    info = client.admin.session_info(session)
    return {"ms": ms, "episodes": info.episodes, "facts_active": info.facts_active,
            "load1": round(os.getloadavg()[0], 2), "paused_niced": paused.paused}


def _reflected(client: MemoryClient, session: str) -> bool:
    try:
        client.wait_until_reflected(session, timeout=0.01)
    except (ProcessingTimeout, ReflectionTimeout):
        return False
    return True


def run_row(name: str, *, turns: int, fact_share: float, distinct: bool, queries: int,
            catchup_s: float, settle_s: float, pause_s: float = 1.0,
            log: Any = print,
            quiet: Callable[[MemoryClient], AbstractContextManager[Any]] | None = None,
            probe: Callable[[MemoryClient, str, Turns], dict[str, Any]] | None = None,
            pause_niced: bool = False,
            ) -> dict[str, Any]:
    """One shape: fill, recall in windows of `queries` while reflection catches up (at most
    `catchup_s`), settle (at most `settle_s`), recall idle.
    `quiet` (a probe's): when reflection has not caught up within `settle_s`, the idle
    recalls run inside it (it holds the background work: bench/probes/recall_pipeline.py),
    noted as `idle.mode`; `probe`: more measurements on the idle store, merged in.
    `pause_niced`: other work's niced processes stopped while each window is timed."""
    texts = Turns(seed=len(name), fact_share=fact_share, distinct=distinct)
    folder = tempfile.mkdtemp(prefix=f"hivemem-load-{name}-")
    session = f"{name}-s0"
    log(f"  {name}: {turns:,} turns into one session")
    out: dict[str, Any] = {"row": name, "turns": turns, "fact_share": fact_share}
    try:
        with MemoryClient.local(folder, settings()) as client:
            out["fill"] = _fill(client, session, turns, texts)
            client.recall(session, "warm up", limit=20)
            windows = []
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < catchup_s and not _reflected(client, session):
                w = _window(client, session, texts, queries, pause_niced)
                w["t_s"] = round(time.perf_counter() - t0, 1)
                windows.append(w)
                log(f"    catch-up +{w['t_s']:.0f}s: p95 {summarize(w['ms'])['p95']:.1f} ms,"
                    f" {w['episodes']:,} episodes, {w['facts_active']:,} facts,"
                    f" load {w['load1']}")
                time.sleep(pause_s)  # recalls come and go; the pipeline runs between them
            t1 = time.perf_counter()
            try:
                client.wait_until_reflected(session, timeout=settle_s)
                settled = True
            except (ProcessingTimeout, ReflectionTimeout):
                settled = False
            out["settle_s"] = round(time.perf_counter() - t1, 1)
            out["settled"] = settled
            mode = "settled" if settled else "not settled"
            hold: AbstractContextManager[Any] = nullcontext()
            if not settled and quiet is not None:
                hold, mode = quiet(client), "reflection held (not settled)"
            with hold:
                idle = _window(client, session, texts, max(queries, 50), pause_niced)
                idle2 = _window(client, session, texts, max(queries, 50), pause_niced)
                idle["ms"] += idle2["ms"]
                extra = probe(client, session, texts) if probe is not None else {}
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    during = [m for w in windows for m in w["ms"]]
    out["catchup"] = {
        "recall_ms": summarize(during) if during else None,
        "windows": [{"t_s": w["t_s"], "recall_ms": summarize(w["ms"]),
                     "episodes": w["episodes"], "facts_active": w["facts_active"],
                     "load1": w["load1"], "paused_niced": w["paused_niced"]}
                    for w in windows]}
    out["pause_niced"] = pause_niced
    out["idle"] = {"recall_ms": summarize(idle["ms"]), "episodes": idle["episodes"],
                   "paused_niced": idle["paused_niced"] + idle2["paused_niced"],
                   "facts_active": idle["facts_active"], "load1": idle["load1"], "mode": mode,
                   **extra}
    if during:
        out["catchup_over_idle_p95"] = round(
            summarize(during)["p95"] / out["idle"]["recall_ms"]["p95"], 2)
    log(f"  {name}: catch-up p95 {out['catchup']['recall_ms']['p95'] if during else None}"
        f" ms, idle p95 {out['idle']['recall_ms']['p95']:.1f} ms"
        f" (settled {settled}, {idle['episodes']:,} episodes, {idle['facts_active']:,} facts)")
    return out


def describe() -> dict[str, Any]:
    return {"embedder": "hashing, 384 dims", "fill": "ingest_many batches of 1,000, one session",
            "recall": "MemoryClient.recall(limit=20), balanced preset",
            "reflection": "heuristic (the default), embedded defaults (a reflection process)",
            "machine": machine_facts()}
