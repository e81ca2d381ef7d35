"""Filling an embedded store fast for the scale benchmarks (not what they measure).

Synthetic 384-d vectors around topic centres and synthetic word texts (for BM25), written as
the product's turn payloads through `EdgeVectorStore.upsert` in big batches: no embedder,
no Redis, no pipeline. `legacy_indexes` creates the payload indexes the way the store did
before its keyword indexes stopped taking part in the HNSW build (for a before/after).
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

DIM = 384


class FixedQuery:
    """A query embedder whose vector is given (computed before the clock starts): recall
    without the query's embedding cost. It frees the GIL as the embedder it wraps says (as
    the product's query embedder does, so recall's helper thread works beside the caller)."""

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
CENTRES = 512
VOCAB = 5000


def load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def corpus(n: int, rng: np.random.Generator, chunk: int = 100_000) -> tuple[np.ndarray,
                                                                            np.ndarray]:
    """n unit vectors (float32) and their topics; generated in chunks to bound memory."""
    centres = rng.standard_normal((CENTRES, DIM)).astype(np.float32)
    topic = rng.integers(0, CENTRES, n)
    vectors = np.empty((n, DIM), dtype=np.float32)
    for i in range(0, n, chunk):
        part = centres[topic[i:i + chunk]] + 0.9 * rng.standard_normal(
            (len(topic[i:i + chunk]), DIM)).astype(np.float32)
        part /= np.linalg.norm(part, axis=1, keepdims=True)
        vectors[i:i + chunk] = part
    return vectors, topic


def text_of(topic: int, j: int) -> str:
    """Twelve words, most of them from the topic's share of the vocabulary (deterministic)."""
    return " ".join(f"w{(topic * 7 + (j * 31 + k * 977) % 97) % VOCAB}" for k in range(12))


def create_legacy_indexes(path: Path, dim: int, settings: Any = None) -> None:
    """Payload indexes as the store made them before: plain schemas (enable_hnsw on)."""
    import qdrant_edge as qe

    from hivemem.store.vectors.base import FLOAT_FIELDS, INTEGER_FIELDS, KEYWORD_FIELDS
    from hivemem.store.vectors.edge import EdgeVectorStore

    store = EdgeVectorStore(path, dim, settings)
    config = store._config()
    store.close()
    for name in ("turns", "facts"):
        folder = path / name
        import shutil

        shutil.rmtree(folder)
        folder.mkdir()
        shard = qe.EdgeShard.create(str(folder), config)
        for field in KEYWORD_FIELDS:
            schema = (qe.KeywordIndexParams(is_tenant=True) if field == "session_id"
                      else qe.PayloadSchemaType.Keyword)
            shard.update(qe.UpdateOperation.create_field_index(field, schema))
        for field in INTEGER_FIELDS:
            shard.update(qe.UpdateOperation.create_field_index(
                field, qe.PayloadSchemaType.Integer))
        for field in FLOAT_FIELDS:
            shard.update(qe.UpdateOperation.create_field_index(
                field, qe.PayloadSchemaType.Float))
        shard.flush()
        shard.close()


def _without_index_upgrade(make: Any) -> Any:
    from hivemem.store.vectors.edge import EdgeVectorStore

    real = EdgeVectorStore._ensure_indexes
    EdgeVectorStore._ensure_indexes = lambda self, collection: None  # type: ignore[method-assign]
    try:
        return make()
    finally:
        EdgeVectorStore._ensure_indexes = real  # type: ignore[method-assign]


def bulk_fill(path: Path, n: int, n_sessions: int, rng: np.random.Generator, settings: Any,
              *, legacy_indexes: bool = False, log: Any = None,
              batch: int = 2000, sample: int = 2000, windows: bool = True,
              ) -> tuple[np.ndarray, list[str], list[str]]:
    """Write n turns round-robin over n_sessions sessions. Returns (vectors, sessions,
    texts) of up to `sample` of the first session's turns (query material; the whole
    vector array is dropped here: 1M x 384 float32 is 1.5 GB).

    `windows`: each turn gets a context-window vector as the product's default (refined
    or mean window modes) gives every embedded turn: here the normalised mean of the
    turn's and its session neighbours' vectors (what the mean mode stores)."""
    from hivemem.domain.models import Role, Turn
    from hivemem.providers.lexical import LexicalEncoder
    from hivemem.store.vectors.base import TURNS, Point, turn_payload, turn_point_id
    from hivemem.store.vectors.edge import EdgeVectorStore

    if legacy_indexes:
        create_legacy_indexes(path, DIM, settings)
    lexical = LexicalEncoder()
    vectors, topic = corpus(n, rng)
    sessions = [f"s{i}" for i in range(n_sessions)]
    start = datetime(2026, 1, 1, tzinfo=UTC)
    if legacy_indexes:
        # Opening would make the indexes again with today's parameters: keep the old ones.
        store = _without_index_upgrade(lambda: EdgeVectorStore(path, DIM, settings))
    else:
        store = EdgeVectorStore(path, DIM, settings)
    t0 = time.perf_counter()
    try:
        for i in range(0, n, batch):
            points = []
            for j in range(i, min(n, i + batch)):
                session = sessions[j % n_sessions]
                seq = j // n_sessions + 1
                text = text_of(int(topic[j]), j)
                turn = Turn.model_construct(
                    turn_id=f"t{seq}", session_id=session, agent_id=None, role=Role.USER,
                    content=text, markers=(), metadata={},
                    timestamp=start + timedelta(seconds=j), seq=seq, token_count=14,
                    namespace="default", visibility="shared", duplicate=False)
                points.append(Point(turn_point_id(session, turn.turn_id), vectors[j],
                                    turn_payload(turn), lexical.document(text),
                                    _window(vectors, j, n_sessions) if windows else None))
            store.upsert(TURNS, points)
            if log is not None and (i // batch) % 50 == 0:
                log(f"    {i + len(points)}/{n} points, {time.perf_counter() - t0:.0f} s")
        store.flush()
    finally:
        store.close()
    mine = np.arange(0, n, n_sessions)
    if len(mine) > sample:
        mine = np.sort(rng.choice(mine, size=sample, replace=False))
    picked = vectors[mine].copy()
    texts = [text_of(int(topic[j]), int(j)) for j in mine]
    del vectors
    return picked, sessions, texts


def _window(vectors: np.ndarray, j: int, step: int) -> np.ndarray:
    """The mean of turn j's vector and its session neighbours' (j - step, j + step)."""
    rows = vectors[j - step if j >= step else j:j + step + 1:step]
    mean = rows.mean(axis=0)
    return (mean / np.linalg.norm(mean)).astype(np.float32)


def versus_exact(hits: list[Any], exact: list[tuple[str, float]]) -> tuple[float, float, float]:
    """How an approximate (graph) search compares with the exact scan of the same query:
    the share of the true top-k it found, whether it found the true nearest, and the mean
    similarity of its results over that of the true top-k (1.0: as similar). The synthetic
    clusters are diffuse (a query's 30 nearest are near-ties among its topic's points), so
    the set overlap is pessimistic for a graph; the other two say what recall loses."""
    ids = {h.turn_id for h in hits}
    overlap = len(ids & {i for i, _s in exact}) / max(1, len(exact))
    top1 = float(bool(exact) and exact[0][0] in ids)
    want = sum(s for _i, s in exact) / max(1, len(exact))
    got = sum(h.score for h in hits) / max(1, len(hits))
    return overlap, top1, (got / want if want else 1.0)


def summarize_versus(rows: list[tuple[float, float, float]], k: int) -> dict[str, float]:
    a = np.asarray(rows, dtype=np.float64)
    return {f"overlap_at_{k}": round(float(a[:, 0].mean()), 4),
            "nearest_found": round(float(a[:, 1].mean()), 4),
            "similarity_ratio": round(float(a[:, 2].mean()), 4)}
