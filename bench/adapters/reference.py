"""Shared helpers for the reference-system adapters (bench/adapters/gleanr.py, mneno.py).

These run inside the reference systems' own venvs (/work/venv-gleanr, /work/venv-mneno), which have
fastembed and numpy but not hivemem, so this module only needs the standard library, numpy and
fastembed. Not a test module.

Protocol: bench/suites/locomo.py writes a JSON job file (turns as ingested by hivemem, questions, budgets,
model cache folder) and runs `<venv>/bin/python bench/adapters/<system>.py TASK JOB OUT`; the driver writes
OUT: per conversation and question the ranked dia_ids (first `k_max`), and per budget the dia_ids it
returned, plus latencies. bench/suites/locomo.py scores everything the same way.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def load_job(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        job: dict[str, Any] = json.load(fh)
    # Offline model, set before fastembed is imported anywhere (a job without a cache folder
    # keeps the environment's FASTEMBED_CACHE_PATH).
    if job.get("model_cache"):
        os.environ["FASTEMBED_CACHE_PATH"] = job["model_cache"]
    os.environ["HF_HUB_OFFLINE"] = "1"
    return job


def write_out(path: str, out: dict[str, Any]) -> None:
    tmp = Path(path).with_suffix(".tmp")
    tmp.write_text(json.dumps(out), encoding="utf-8")
    tmp.replace(path)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


_PIECES = re.compile(r"\w+|[^\w\s]", re.UNICODE)


def hivemem_estimate_tokens(text: str) -> int:
    """A copy of `hivemem.domain.tokens.estimate_tokens` (hivemem is not installed in these venvs).

    bench/suites/locomo checks this copy against the token counts hivemem's own recall returns.
    """
    if not text:
        return 0
    return max(math.ceil(len(text) / 4), len(_PIECES.findall(text)))


class FastEmbedModel:
    """sentence-transformers/all-MiniLM-L6-v2 through fastembed: the model hivemem uses.

    Unit-length float32 rows (the model's output is already normalised; normalised again so a dot
    product is the cosine), texts sorted by length before batching as hivemem's embedder does.
    `cache=True` memoises vectors by text (for mneno, which re-embeds every memory at every query).
    """

    def __init__(self, model: str, *, cache: bool = False, batch_size: int = 64) -> None:
        from fastembed import TextEmbedding

        self._model = TextEmbedding(model)
        self.batch_size = batch_size
        self._cache: dict[str, list[float]] | None = {} if cache else None
        self.calls = 0
        self.texts_embedded = 0
        self.dim = len(self.embed_raw(["dimension probe"])[0])

    def embed_raw(self, texts: Sequence[str]) -> list[list[float]]:
        import numpy as np

        if not texts:
            return []
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        rows = np.asarray(
            list(self._model.embed([texts[i] for i in order], batch_size=self.batch_size)),
            dtype=np.float32,
        )
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        rows = rows / norms
        out: list[list[float]] = [[] for _ in texts]
        for pos, i in enumerate(order):
            out[i] = rows[pos].tolist()
        self.texts_embedded += len(texts)
        return out

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        if self._cache is None:
            return self.embed_raw(texts)
        missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if missing:
            for text, vec in zip(missing, self.embed_raw(missing), strict=True):
                self._cache[text] = vec
        return [self._cache[t] for t in texts]


class Timer:
    def __enter__(self) -> Timer:
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.ms = (time.perf_counter() - self.t0) * 1000.0


class Vectors:
    def __init__(self, pool: list[str], vectors: list[list[float]], model: FastEmbedModel):
        self.by_text = dict(zip(pool, vectors, strict=True))
        self.model = model

    def embed(self, texts: list[str]) -> list[list[float]]:
        out: list[list[float] | None] = []
        missing: list[int] = []
        for i, text in enumerate(texts):
            base = text.rsplit(" (note ", 1)[0]
            vec = self.by_text.get(base)
            out.append(vec)
            if vec is None:
                missing.append(i)
        if missing:
            fresh = self.model.embed_raw([texts[i] for i in missing])
            for i, vec in zip(missing, fresh, strict=True):
                out[i] = vec
                self.by_text[texts[i]] = vec
        return [v for v in out if v is not None]


def pct(values: list[float], p: float) -> float:
    v = sorted(values)
    k = (len(v) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def stats(ms: list[float]) -> dict[str, float]:
    return {"n": len(ms), "p50": round(pct(ms, 50), 3), "p95": round(pct(ms, 95), 3),
            "p99": round(pct(ms, 99), 3)}
