#!/usr/bin/env python
"""LoCoMo dev, hivemem only: the current defaults against variants, in the same run.

    python bench/probes/locomo_arms.py                      # all arms, 5 conversations
    python bench/probes/locomo_arms.py --arms defaults int8-query --conversations 26

The memory is built once (bench/suites/locomo.py's data and ingestion: embedded mode, default
Settings, real embed / boundary / reflect workers), then every question is recalled once per
arm (`recall(token_budget=1e6, limit=20)`, query embedding included), the arms taking turns
question by question so machine noise falls on all of them alike. An arm changes one thing
in the recall path of the same client and puts it back afterwards:

- defaults: the code as it stands.
- uncached-currency: the facts of the session read whole and currency derived on every call
  (what recall did before `recall/known_facts.py`); must give the same items as defaults.
- fp32-query: queries embedded with the fp32 model, as the documents are
  (`EmbeddingSettings(query_precision="fp32")`; the default is the int8 copy of the model).
- int8-query: queries embedded with the int8 export in ../shared/models (documents stay fp32):
  the same model file as the default's int8 copy, so it must give the same items.
- no-helper: recall's lexical work (BM25 searches, Redis reads, currency) on the caller
  before the query embedding, as if the helper thread were busy (what recall did in
  effect before the caller embedded the query itself); must give the same items.
- query-threads-2: the query embedded on two ONNX threads (`EmbeddingSettings.query_threads`,
  default 1); must give the same items.
- int8-all: documents (turns, windows, facts) and queries embedded with the int8 export
  (`EmbeddingSettings(model_path=...)`): a second memory, built the same way from the same
  conversations before any question is asked, and recalled in the same interleaved loop.
- text-windows: a memory whose window vectors are the turns embedded again as one text
  at embed time (`EmbeddingSettings(window_mode="text")`); mean-windows: the mean of their
  vectors, never refined (`"mean"`). The default (`"refined"`): the mean at embed time,
  the text by the window stage afterwards; every memory build waits for it.
- speaker-0.1 / -0.2: `weights.speaker`: a turn by a speaker the question names gains that.
- search-40: 40 hits per retriever instead of 20. neighbours-10: context around 10 hits.
- window-x: `weights.window` = x (default 1.0): each turn's context-window vector (the turn
  embedded after the turns before it, `EmbeddingSettings.window_turns`) searched too and
  averaged into its dense similarity with weight x. no-window: 0.
- speakers-in-query: `dense_without_speakers=False` (default True: the query is embedded
  without the names of the session's speakers it mentions; the speaker weight still
  favours their turns).
- lexical-0.6: the BM25 weight before (default 0.25). restates-1.0: `restates_threshold`
  1.0 (default 0.5: a fact at least that similar to a turn it came from stands for it).
- windows-of-candidates (-30, -40): `window_search=False`: no window search of its own, the
  window similarity of the candidates the other retrievers found only (one exact query over
  them); -30/-40: 30 or 40 hits per retriever to make up for the window-only hits.
- fused-search: the dense and window searches replaced by one ranking on the fused
  similarity (dense + w x window) / (1 + w), emulated exactly (both searched over the whole
  session; its latency means nothing); fused-and-dense: the dense search's hits as well.
- search-threads-0 / -2: a memory whose embedded engine searches with a pool of one
  thread per core (the engine's own default) / two threads
  (`VectorIndexSettings.search_threads`; default 1: on the thread that asks).
- previous-defaults: all four back as they were (the defaults before this work).
- no-answer / answer-0.15: `weights.answer` 0 / 0.15 (default 0.1): the turn right after a
  turn that asks something ('?') gains that x the question's relevance (its answer).

Per arm: R@1/5/10/20 overall and per category, latency p50/p95, and (for arms that must not
change results) how many questions got a different item list than defaults.
Saved to bench/results/locomo_arms.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: harness, suites

from harness import (
    RESULTS,
    SHARED,
    CpuMonitor,
    machine_facts,
    offline_model_env,
    summarize,
    wait_for_windows,
)
from suites.locomo import (
    _AGENT_ID,
    BIG_BUDGET,
    CATEGORIES,
    KS,
    git_state,
    item_dia_ids,
    load_dataset,
    recall_at_ks,
)

INT8 = SHARED / "models" / "all-MiniLM-L6-v2-onnx-int8"
SAME_AS_DEFAULTS = ("uncached-currency", "no-helper", "query-threads-2", "int8-query")
# Arms that recall from a memory of their own, built with these Settings overrides.
OWN_MEMORY: dict[str, dict[str, Any]] = {
    "int8-all": {"embedding": {"model_path": INT8}},
    "text-windows": {"embedding": {"window_mode": "text"}},
    "mean-windows": {"embedding": {"window_mode": "mean"}},
    "search-threads-0": {"qdrant": {"index": {"search_threads": 0}}},
    "search-threads-2": {"qdrant": {"index": {"search_threads": 2}}},
}

Arm = Callable[[Any], AbstractContextManager[None]]


@contextmanager
def defaults(client: Any) -> Iterator[None]:
    yield


@contextmanager
def uncached_currency(client: Any) -> Iterator[None]:
    from hivemem.recall.currency import CurrencyView
    from hivemem.recall.known_facts import KnownFacts, SessionFacts

    class ReadWhole(KnownFacts):
        def get(self, session_id: str) -> SessionFacts:
            return self._refresh(session_id, None)

    recaller = client._service.reads.recaller()  # a bench may reach in: it swaps one part and restores
    kept = recaller.currency
    view = CurrencyView(recaller.vectors, client.settings.reflection, size=0)
    view.known = ReadWhole(recaller.vectors)
    view.unreflected = kept.unreflected
    recaller.currency = view
    try:
        yield
    finally:
        recaller.currency = kept


@contextmanager
def no_helper(client: Any) -> Iterator[None]:
    recaller = client._service.reads.recaller()
    recaller._inflight += 1  # the helper counts as busy: recall does it all on the caller
    try:
        yield
    finally:
        recaller._inflight -= 1


def _swapped_query_embedder(make: Callable[[Any], Any]) -> Arm:
    """Recall's query embedder replaced by `make(client)` (built once) for the arm."""
    embedder: list[Any] = []

    @contextmanager
    def arm(client: Any) -> Iterator[None]:
        if not embedder:
            embedder.append(make(client))
        recaller = client._service.reads.recaller()
        kept = recaller.embedder
        recaller.embedder = embedder[0]
        try:
            yield
        finally:
            recaller.embedder = kept

    return arm


def _query_embedder(**update: Any) -> Arm:
    """Recall's query embedder built with these `EmbeddingSettings` changes, swapped in."""
    from hivemem.providers.embedders import build_embedder

    return _swapped_query_embedder(lambda client: build_embedder(
        client.settings.embedding.model_copy(update=update), for_queries=True))


def _int8_query() -> Arm:
    from hivemem.config import EmbeddingSettings
    from hivemem.providers.embedders import build_embedder

    return _swapped_query_embedder(lambda _client: build_embedder(
        EmbeddingSettings(model_path=INT8), for_queries=True))


def _policy(update: dict[str, Any], weights: dict[str, Any] | None = None) -> Arm:
    """The default preset with some fields changed (what `recall()` without a preset uses)."""

    @contextmanager
    def arm(client: Any) -> Iterator[None]:
        from hivemem.domain.recall import policy

        kept = policy.PRESETS["balanced"]
        changed = dict(update)
        if weights:
            changed["weights"] = kept.weights.model_copy(update=weights)
        policy.PRESETS["balanced"] = kept.model_copy(update=changed)
        try:
            yield
        finally:
            policy.PRESETS["balanced"] = kept

    return arm


def _fused_search(extra_dense: bool = False) -> Arm:
    """Recall's dense and window searches replaced by one ranking on the fused similarity
    (dense + w * window) / (1 + w), what scoring ranks on: the top `search_limit` of it, each
    with its dense and window similarity (emulated exactly: both searches over the whole
    session, as a fused vector's single search would find them). `extra_dense`: the dense
    search's own top hits as well."""

    @contextmanager
    def arm(client: Any) -> Iterator[None]:
        from hivemem.domain.recall.policy import PRESETS
        from hivemem.store.vectors.base import TurnHit

        vectors = client._service.reads.recaller().vectors
        both = vectors.search_turns_and_windows

        def fused(sessions: Any, vector: Any, limit: int, scope: Any = None) -> Any:
            w = PRESETS["balanced"].weights.window
            dense, window = both(sessions, vector, 100_000, scope)
            win = {(h.session_id, h.turn_id): h.score for h in window}

            def score(h: Any) -> float:
                s = win.get((h.session_id, h.turn_id))
                return h.score if s is None else (h.score + w * s) / (1 + w)

            top = sorted(dense, key=score, reverse=True)[:limit]
            ids = {(h.session_id, h.turn_id) for h in top}
            own = vectors.search_turns(sessions, vector, limit, scope) if extra_dense else []
            hits = [*top, *(h for h in own if (h.session_id, h.turn_id) not in ids)]
            return hits, [TurnHit(h.payload, win[(h.session_id, h.turn_id)], h.vector)
                          for h in top if (h.session_id, h.turn_id) in win]

        vectors.search_turns_and_windows = fused  # type: ignore[method-assign]
        try:
            yield
        finally:
            del vectors.search_turns_and_windows

    return arm


ARMS: dict[str, Arm] = {
    "defaults": defaults,
    "uncached-currency": uncached_currency,
    "no-helper": no_helper,
    "query-threads-2": _query_embedder(query_threads=2),
    "int8-query": _int8_query(),
    "fp32-query": _query_embedder(query_precision="fp32"),
    "int8-all": defaults,  # its own memory (OWN_MEMORY), the code as it stands
    "text-windows": defaults,  # its own memory: window vectors embedded as text
    "mean-windows": defaults,  # its own memory: window vectors the mean, never refined
    "search-threads-0": defaults,  # its own memory: the engine's search pool, one per core
    "search-threads-2": defaults,  # its own memory: a search pool of two threads
    "speaker-0.1": _policy({}, {"speaker": 0.1}),
    "speaker-0.2": _policy({}, {"speaker": 0.2}),
    "search-40": _policy({"search_limit": 40}),
    "neighbours-10": _policy({"neighbours": 10}),
    "window-0.3": _policy({}, {"window": 0.3}),
    "window-0.5": _policy({}, {"window": 0.5}),
    "window-1.0": _policy({}, {"window": 1.0}),
    "window-1.5": _policy({}, {"window": 1.5}),
    "window-2.0": _policy({}, {"window": 2.0}),
    "lexical-0.15": _policy({}, {"lexical": 0.15}),
    "lexical-0.4": _policy({}, {"lexical": 0.4}),
    # The defaults before window vectors (issue 18's quality work), and each of its four
    # changes taken back alone from the current defaults.
    "previous-defaults": _policy({"dense_without_speakers": False, "restates_threshold": 1.0},
                                 {"window": 0.0, "lexical": 0.6}),
    "no-window": _policy({}, {"window": 0.0}),
    "no-answer": _policy({}, {"answer": 0.0}),
    "answer-0.15": _policy({}, {"answer": 0.15}),
    "speakers-in-query": _policy({"dense_without_speakers": False}),
    "lexical-0.6": _policy({}, {"lexical": 0.6}),
    "restates-1.0": _policy({"restates_threshold": 1.0}),
    # No window search of its own: the candidates' window similarities only (one exact
    # query over them); with 30 or 40 dense hits to make up for the window-only ones.
    "windows-of-candidates": _policy({"window_search": False}),
    "fused-search": _fused_search(),
    "fused-and-dense": _fused_search(extra_dense=True),
    "windows-of-candidates-30": _policy({"window_search": False, "search_limit": 30}),
    "windows-of-candidates-40": _policy({"window_search": False, "search_limit": 40}),
}


def build_memory(tmp: Path, convs: list[dict[str, Any]], log: Callable[[str], None],
                 overrides: dict[str, Any] | None = None) -> Any:
    from hivemem import MemoryClient
    from hivemem.config import Settings

    settings = Settings.model_validate(overrides) if overrides else Settings()
    client = MemoryClient.local(tmp / "memory", settings)
    for conv in convs:
        session = f"locomo-{conv['name']}"
        payload = [
            {"session_id": session, "role": t["role"], "content": t["content"],
             "agent_id": t["speaker"] if _AGENT_ID.match(t["speaker"]) else None,
             "timestamp": datetime.fromisoformat(t["timestamp"]), "turn_id": t["dia_id"]}
            for t in conv["turns"]
        ]
        t0 = time.perf_counter()
        client.ingest_many(payload)
        client.wait_until_processed(session, timeout=900)
        client.wait_until_processed(session, timeout=300, stage="boundary")
        client.wait_until_reflected(session, timeout=600)
        refined = wait_for_windows(client, timeout=900)
        log(f"  {session}: {len(payload)} turns, {len(client.facts(session, include_history=True))}"
            f" facts, ready in {time.perf_counter() - t0:.1f} s"
            + (f" (windows refined {refined:.1f} s after)" if refined is not None else ""))
    return client


def run(arms: list[str], convs: list[dict[str, Any]], log: Callable[[str], None]
        ) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="hivemem-arms-"))
    rows: dict[str, dict[str, list[float]]] = {a: {} for a in arms}
    lat: dict[str, list[float]] = {a: [] for a in arms}
    items_of: dict[str, dict[str, list[tuple[str, str, float]]]] = {a: {} for a in arms}
    try:
        client = build_memory(tmp, convs, log)
        clients = {arm: client for arm in arms}
        try:
            for arm in arms:
                if arm in OWN_MEMORY:
                    log(f"  memory of arm {arm}: {OWN_MEMORY[arm]}")
                    clients[arm] = build_memory(tmp / f"arm-{arm}", convs, log,
                                                OWN_MEMORY[arm])
            for arm in arms:  # warm-up, not timed: loads models, fills caches
                with ARMS[arm](clients[arm]):
                    clients[arm].recall(f"locomo-{convs[0]['name']}", "warm up", limit=5)
            with CpuMonitor() as cpu:
                for n, (conv, q) in enumerate((c, q) for c in convs for q in c["questions"]):
                    session = f"locomo-{conv['name']}"
                    order = arms[n % len(arms):] + arms[: n % len(arms)]
                    for arm in order:
                        with ARMS[arm](clients[arm]):
                            t0 = time.perf_counter()
                            items = clients[arm].recall(session, q["question"], BIG_BUDGET,
                                                  limit=max(KS))
                            lat[arm].append((time.perf_counter() - t0) * 1000)
                        rows[arm][q["qid"]] = recall_at_ks(
                            q["evidence"], [item_dia_ids(it) for it in items])
                        items_of[arm][q["qid"]] = [
                            (it.source_type, it.source_id, round(it.score, 6)) for it in items]
        finally:
            for each in {id(c): c for c in clients.values()}.values():
                each.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    cat_of = {q["qid"]: q["category"] for c in convs for q in c["questions"]}
    out: dict[str, Any] = {"arms": {}, "cpu": cpu.result}
    for arm in arms:
        res: dict[str, Any] = {}
        groups: dict[str, list[list[float]]] = {"overall": list(rows[arm].values())}
        for qid, row in rows[arm].items():
            groups.setdefault(CATEGORIES[cat_of[qid]], []).append(row)
        for g, vals in groups.items():
            res[g] = {"n": len(vals), **{f"R@{k}": round(statistics.fmean(v[i] for v in vals), 4)
                                         for i, k in enumerate(KS)}}
        res["latency_ms"] = summarize(lat[arm])
        if "defaults" in arms and arm != "defaults":
            res["questions_with_other_items_than_defaults"] = sum(
                items_of[arm][qid] != items_of["defaults"][qid] for qid in items_of[arm])
        out["arms"][arm] = res
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arms", nargs="*", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--conversations", nargs="*", help="names, e.g. 26 30 (default: all)")
    ap.add_argument("--out", default=str(RESULTS / "locomo_arms.json"))
    args = ap.parse_args()
    offline_model_env()
    started = time.perf_counter()

    def log(msg: str) -> None:
        print(msg, flush=True)

    arms = list(dict.fromkeys(["defaults", *args.arms]))
    convs, notes = load_dataset(args.conversations)
    log(f"LoCoMo dev: {len(convs)} conversations, {notes['questions_scored']} questions;"
        f" arms: {', '.join(arms)}")
    result = run(arms, convs, log)
    log(f"\n{'arm':22s} " + " ".join(f"{'R@' + str(k):>6s}" for k in KS)
        + "   p50 ms   p95 ms  differs")
    for arm, res in result["arms"].items():
        o = res["overall"]
        log(f"{arm:22s} " + " ".join(f"{o['R@' + str(k)]:6.3f}" for k in KS)
            + f" {res['latency_ms']['p50']:8.1f} {res['latency_ms']['p95']:8.1f}"
            + f"  {res.get('questions_with_other_items_than_defaults', '-')}")
    for cat in CATEGORIES.values():
        log(f"  {cat:14s} " + "  ".join(
            f"{arm}: R@5 {res[cat]['R@5']:.3f} R@10 {res[cat]['R@10']:.3f}"
            for arm, res in result["arms"].items() if cat in res))
    result.update({
        "benchmark": "locomo-arms", "conversations": [c["name"] for c in convs],
        "questions": notes["questions_scored"], "same_as_defaults": list(SAME_AS_DEFAULTS),
        "machine": machine_facts(), "git": git_state(),
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "wall_s": round(time.perf_counter() - started, 1),
    })
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2), encoding="utf-8")
    log(f"saved {args.out} ({result['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
