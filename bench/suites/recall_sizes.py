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
from typing import Any

from harness import Samples, machine_facts, summarize

from hivemem import Backpressure, MemoryClient, RetryLater, Settings

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


class FixedQuery:
    """A query embedder whose vector is given (computed before the clock starts): recall
    without the query's embedding. Frees the GIL as the embedder it wraps says."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.vector: Any = None
        self.dim = inner.dim
        self.name = "fixed-query"
        self.releases_gil = bool(getattr(inner, "releases_gil", False))

    def embed_documents(self, texts: Any) -> Any:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> Any:
        return self.vector


def query_model() -> Any:
    """The product's query model (all-MiniLM-L6-v2, int8, 384 dims like the hashing
    vectors: same search cost), for the "incl. embedding" column."""
    from hivemem.config import EmbeddingSettings
    from hivemem.providers.embedders import build_embedder

    return build_embedder(EmbeddingSettings(), for_queries=True)


def parts(client: MemoryClient, session: str, texts: Texts, queries: int,
          model: Any) -> dict[str, Any]:
    """Interleaved per query: the bare engine search (`search_turns`, the session's dense
    search recall makes first), `recall(limit=20)` with the query vector given (excl. the
    embedding) and with the product's query model embedding it (incl.). Reaches into the
    client's read path (a bench's measurement, not an API)."""
    from hivemem.domain.names import session_name
    from hivemem.domain.recall.policy import PRESETS

    recaller = client._service.reads.recaller()  # noqa: SLF001 - the bench's probe
    own = recaller.embedder
    fixed = FixedQuery(own)
    name = session_name("default", session)
    limit = PRESETS["balanced"].search_limit
    bare: list[float] = []
    excl: list[float] = []
    incl: list[float] = []
    try:
        for i in range(queries + 5):
            query = texts.query()
            vec = own.embed_query(query)
            t0 = time.perf_counter()
            recaller.vectors.search_turns(name, vec, limit)
            t1 = time.perf_counter()
            fixed.vector = vec
            recaller.embedder = fixed
            client.recall(session, query, limit=20)
            t2 = time.perf_counter()
            recaller.embedder = model
            client.recall(session, query, limit=20)
            t3 = time.perf_counter()
            if i >= 5:  # the first reads after filling
                bare.append((t1 - t0) * 1000)
                excl.append((t2 - t1) * 1000)
                incl.append((t3 - t2) * 1000)
    finally:
        recaller.embedder = own
    out = {"bare_search_ms": summarize(bare), "recall_excl_embedding_ms": summarize(excl),
           "recall_incl_embedding_ms": summarize(incl)}
    out["excl_over_bare_p95"] = round(out["recall_excl_embedding_ms"]["p95"]
                                      / out["bare_search_ms"]["p95"], 2)
    return out


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
            log: Any = print, settle_s: float = 0.0, model: Any = None) -> dict[str, Any]:
    """One row: a fresh embedded store, filled, then `queries` timed recalls in session 0.
    `settle_s`: first wait (at most that long) until reflection has caught up, so that the
    recalls meet an idle pipeline; `model`: also the bare search and recall excl./incl. the
    query embedding with that query model (`parts`)."""
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
                filled["reflected"] = _settle(client, settle_s)
                filled["reflected_s"] = round(time.perf_counter() - t0, 1)
            info = client.admin.session_info(names[0])
            facts, episodes = info.facts_active, info.episodes
            load_mid = os.getloadavg()[0]
            recall = timed_recalls(client, names[0], texts, queries)
            split = parts(client, names[0], texts, queries, model) if model else None
            load1 = os.getloadavg()[0]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    log(f"  row {row}: recall p50 {recall['p50']:.1f} ms, p95 {recall['p95']:.1f} ms"
        f" ({filled['turns']:,} turns filled in {filled['processed_s']:.0f} s;"
        f" session 0: {facts:,} facts, {episodes:,} episodes)")
    out = {"row": row, "sessions": sessions, "turns_per_session": per_session,
           "fill": filled, "facts_active": facts, "episodes": episodes, "recall_ms": recall,
           "load1": [round(load0, 2), round(load_mid, 2), round(load1, 2)]}
    if split is not None:
        out.update(split)
        log(f"  row {row}: bare search p95 {split['bare_search_ms']['p95']:.2f} ms, recall"
            f" excl. embedding p95 {split['recall_excl_embedding_ms']['p95']:.2f} ms, incl."
            f" {split['recall_incl_embedding_ms']['p95']:.2f} ms")
    return out


def _settle(client: MemoryClient, timeout: float) -> bool:
    """Until every stage and the reflect queue are idle (every session's), at most
    `timeout` s: the embedded runtime's own drain (a bench's reach)."""
    runtime = client._runtime  # noqa: SLF001 - the bench's probe
    return bool(runtime is not None and runtime.drain(timeout))


def describe() -> dict[str, Any]:
    return {"embedder": "hashing, 384 dims", "texts": "synthetic words, 64 topics",
            "recall": "MemoryClient.recall(limit=20), balanced preset", "machine": machine_facts()}
