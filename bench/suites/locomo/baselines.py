"""LoCoMo baselines: Okapi BM25, dense (the same model), and their reciprocal rank fusion."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from adapters.reference import hivemem_estimate_tokens as estimate_tokens
from harness import (
    CpuMonitor,
)

from suites.locomo.data import (
    BUDGETS,
    KS,
    MODEL,
    RRF_K,
    Scores,
    pack_greedy,
)

# -- baselines --------------------------------------------------------------------------------

STOPWORDS = frozenset(
    """a about above after again against all am an and any are aren't as at be because been
    before being below between both but by can can't cannot could couldn't did didn't do
    does doesn't doing don't down during each few for from further had hadn't has hasn't
    have haven't having he he'd he'll he's her here here's hers herself him himself his how
    how's i i'd i'll i'm i've if in into is isn't it it's its itself let's me more most
    mustn't my myself no nor not of off on once only or other ought our ours ourselves out
    over own same shan't she she'd she'll she's should shouldn't so some such than that
    that's the their theirs them themselves then there there's these they they'd they'll
    they're they've this those through to too under until up very was wasn't we we'd we'll
    we're we've were weren't what what's when when's where where's which while who who's
    whom why why's with won't would wouldn't you you'd you'll you're you've your yours
    yourself yourselves s t d ll m re ve just also""".split()  # noqa: SIM905
)
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def bm25_tokens(text: str) -> list[str]:
    words = _WORD.findall(text.lower().replace("\u2019", "'"))
    out = []
    for w in words:
        if w in STOPWORDS:
            continue
        base = w.split("'")[0]  # "caroline's" -> "caroline"
        if base and base not in STOPWORDS:
            out.append(base)
    return out


class OkapiBM25:
    """Okapi BM25 exactly as rank_bm25.BM25Okapi (k1=1.5, b=0.75, epsilon=0.25): a fallback."""

    def __init__(self, corpus: list[list[str]], k1: float = 1.5, b: float = 0.75,
                 epsilon: float = 0.25) -> None:
        import numpy as np

        self.k1, self.b = k1, b
        self.doc_len = np.array([len(d) for d in corpus], dtype=float)
        self.avgdl = float(self.doc_len.mean()) if len(corpus) else 0.0
        self.doc_freqs = []
        df: dict[str, int] = {}
        for doc in corpus:
            freqs: dict[str, int] = {}
            for w in doc:
                freqs[w] = freqs.get(w, 0) + 1
            self.doc_freqs.append(freqs)
            for w in freqs:
                df[w] = df.get(w, 0) + 1
        n = len(corpus)
        self.idf: dict[str, float] = {}
        negative = []
        for w, f in df.items():
            self.idf[w] = math.log(n - f + 0.5) - math.log(f + 0.5)
            if self.idf[w] < 0:
                negative.append(w)
        floor = epsilon * (sum(self.idf.values()) / len(self.idf)) if self.idf else 0.0
        for w in negative:
            self.idf[w] = floor

    def get_scores(self, query: list[str]) -> Any:
        import numpy as np

        scores = np.zeros(len(self.doc_freqs))
        norm = self.k1 * (1 - self.b + self.b * self.doc_len / self.avgdl)
        for w in query:
            tf = np.array([d.get(w, 0) for d in self.doc_freqs], dtype=float)
            scores += self.idf.get(w, 0.0) * (tf * (self.k1 + 1) / (tf + norm))
        return scores


def make_bm25(corpus: list[list[str]]) -> tuple[Any, str]:
    from importlib.metadata import version

    try:
        from rank_bm25 import BM25Okapi

        return BM25Okapi(corpus), f"rank_bm25 {version('rank_bm25')} BM25Okapi"
    except ImportError:
        return OkapiBM25(corpus), "built-in Okapi BM25 (rank_bm25 not installed)"


def rrf(rankings: Sequence[Sequence[int]], k: int = RRF_K) -> list[int]:
    fused: dict[int, float] = {}
    for ranking in rankings:
        for r, doc in enumerate(ranking, start=1):
            fused[doc] = fused.get(doc, 0.0) + 1.0 / (k + r)
    return sorted(fused, key=lambda d: (-fused[d], d))


def run_baselines(
    convs: list[dict[str, Any]], scores: Scores, log: Callable[[str], None]
) -> dict[str, Any]:
    import numpy as np
    from fastembed import TextEmbedding

    info: dict[str, Any] = {"embed": {}, "cpu": {}}
    model = TextEmbedding(MODEL)

    def embed(texts: list[str]) -> Any:
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        rows = np.asarray(list(model.embed([texts[i] for i in order], batch_size=64)),
                          dtype=np.float32)
        out = np.empty_like(rows)
        out[order] = rows
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out

    embed(["warm up"])
    prepared = []
    for conv in convs:
        texts = [t["content"] for t in conv["turns"]]
        t0 = time.perf_counter()
        matrix = embed(texts)
        info["embed"][conv["name"]] = round(time.perf_counter() - t0, 2)
        bm25, impl = make_bm25([bm25_tokens(t) for t in texts])
        info["bm25"] = impl
        prepared.append((conv, texts, matrix, bm25))
        log(f"  baselines {conv['name']}: {len(texts)} turns embedded in"
            f" {info['embed'][conv['name']]:.1f} s; {impl}")

    lat: dict[str, list[float]] = {"bm25": [], "dense": [], "rrf": []}
    with CpuMonitor() as cpu:
        for conv, _texts, matrix, bm25 in prepared:
            ids = [t["dia_id"] for t in conv["turns"]]
            tokens = {t["dia_id"]: estimate_tokens(t["content"]) for t in conv["turns"]}
            for q in conv["questions"]:
                t0 = time.perf_counter()
                s = bm25.get_scores(bm25_tokens(q["question"]))
                bm_rank = [int(i) for i in np.argsort(-s, kind="stable") if s[i] > 0]
                t_bm = (time.perf_counter() - t0) * 1000
                t0 = time.perf_counter()
                qv = embed([q["question"]])[0]
                sims = matrix @ qv
                dense_rank = [int(i) for i in np.argsort(-sims, kind="stable")]
                t_dense = (time.perf_counter() - t0) * 1000
                t0 = time.perf_counter()
                fused = rrf([bm_rank, dense_rank])
                t_fuse = (time.perf_counter() - t0) * 1000
                lat["bm25"].append(t_bm)
                lat["dense"].append(t_dense)
                lat["rrf"].append(t_bm + t_dense + t_fuse)
                for name, order in (("bm25", bm_rank), ("dense", dense_rank), ("rrf", fused)):
                    ranked_ids = [ids[i] for i in order]
                    sets = {b: pack_greedy(ranked_ids, tokens, b) for b in BUDGETS}
                    toks = {b: sum(tokens[d] for d in sets[b]) for b in BUDGETS}
                    scores.add(name, q, [[d] for d in ranked_ids[: max(KS)]], sets, toks)
    info["cpu"]["queries"] = cpu.result
    for name, values in lat.items():
        scores.latency_ms[name] = values
    return info
