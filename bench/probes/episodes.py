#!/usr/bin/env python
"""Episode boundaries on LoCoMo, through the real pipeline in embedded mode.

    /work/venv/bin/python bench/probes/episodes.py            # ~5-10 min on 2 cores

Each conversation of ../shared/data/locomo-dev/*.json becomes one hivemem session: its turns
are ingested as "Speaker: text" with the timestamp of their LoCoMo session
(`session_N_date_time`, e.g. "1:56 pm on 8 May, 2023", read as UTC) plus TURN_STEP_S seconds per
turn index inside the session, so turns keep a realistic order and spacing (LoCoMo gives one
time per session; its longest session here, 43 turns, then spans ~21 min, under the 30 min gap).
The speakers map to roles user (speaker_a) and assistant (speaker_b); there are no tool turns.
Then `close_session`, `wait_until_processed(stage="boundary")`, and `episodes()` are read back.

Every configuration runs on a fresh `MemoryClient.local(tmpdir, settings)` (fakeredis, Qdrant
Edge, embed + boundary worker threads) with the real all-MiniLM-L6-v2 model, offline from
../shared/models/fastembed_cache. The model's vectors are memoized by text across
configurations (the `CachedEmbedder` below): the pipeline is the real one each time, only the
repeated model computation is skipped, and the vectors are the same in every configuration.
Embedded mode also runs its reflection thread (heuristic reflector), which embeds the facts it
extracts with the same embedder; it does not touch the boundaries, only the wall time.

Reported:
(a) time-gap rule only (max_turns huge, topic shift off with threshold -1, min_episode_turns=1):
    agreement of episode boundaries with LoCoMo's session boundaries: precision, recall and F1
    of boundary positions (a position is "a new episode / session starts at turn i"), and how
    many LoCoMo sessions are exactly one episode.
(b) all rules at their defaults: episodes per conversation, the close reasons, mean episode
    length in turns.
(c) a sweep of topic_shift_threshold with max_turns very high and the time gap on (other
    settings at defaults): how many topic-shift boundaries fire per conversation, and the
    mean episode length, to help pick a default.
(b) and (c) also count episodes whose turns span two LoCoMo sessions (days apart): a one-turn
    episode cut by a time gap is shorter than min_episode_turns, so it carries forward across
    the gap into the next session's first episode.

Results: printed, and saved as JSON to bench/results/episodes.json.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: harness, suites

from harness import (
    RESULTS,
    locomo_conversations,
    machine_facts,
    offline_model_env,
)

offline_model_env()  # before anything can load fastembed

import numpy as np  # noqa: E402
import numpy.typing as npt  # noqa: E402

from hivemem.config import EmbeddingSettings, EpisodeSettings, Settings  # noqa: E402
from hivemem.domain.episode import Episode  # noqa: E402
from hivemem.producer.client import MemoryClient  # noqa: E402
from hivemem.providers.embedders import Embedder, build_embedder  # noqa: E402

TURN_STEP_S = 30
SWEEP = (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4)
HUGE = 1_000_000
_SESSION_KEY = re.compile(r"session_(\d+)")
_DATE_FORMAT = "%I:%M %p on %d %B, %Y"


class CachedEmbedder:
    """The real model, memoized by text (configurations re-ingest the same turns)."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.dim = inner.dim
        self.name = inner.name
        self.cache: dict[str, npt.NDArray[np.float32]] = {}
        self.computed = 0
        self._lock = threading.Lock()  # the embed and the reflection threads share it

    def embed_documents(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        with self._lock:
            missing = list(dict.fromkeys(t for t in texts if t not in self.cache))
            if missing:
                rows = self.inner.embed_documents(missing)
                self.computed += len(missing)
                for text, row in zip(missing, rows, strict=True):
                    self.cache[text] = row
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self.cache[t] for t in texts]).astype(np.float32)

    def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        return self.inner.embed_query(text)


# -- data ---------------------------------------------------------------------------------


def conversation_turns(conv: dict[str, Any]) -> list[dict[str, Any]]:
    """[{"session": N, "speaker", "content", "timestamp"}] in order."""
    data = conv["data"]
    numbers = sorted(
        int(m.group(1))
        for key, value in data.items()
        if (m := _SESSION_KEY.fullmatch(key)) and isinstance(value, list) and value
    )
    out: list[dict[str, Any]] = []
    for n in numbers:
        start = datetime.strptime(data[f"session_{n}_date_time"], _DATE_FORMAT).replace(
            tzinfo=UTC
        )
        for i, turn in enumerate(data[f"session_{n}"]):
            out.append({
                "session": n,
                "role": "user" if turn["speaker"] == data["speaker_a"] else "assistant",
                "content": f"{turn['speaker']}: {turn['text']}",
                "timestamp": start + timedelta(seconds=TURN_STEP_S * i),
            })
    return out


# -- one configuration --------------------------------------------------------------------


def run_config(
    label: str,
    episodes: EpisodeSettings,
    convs: list[tuple[str, list[dict[str, Any]]]],
    embedder: CachedEmbedder,
) -> dict[str, list[Episode]]:
    """Ingest every conversation through the embedded pipeline; its closed episodes by name."""
    settings = Settings(
        embedding=EmbeddingSettings(provider="fastembed"),
        episodes=episodes,
    )
    out: dict[str, list[Episode]] = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hivemem-bench-episodes-") as tmp:
        client = MemoryClient.local(tmp, settings, embedder=embedder)
        try:
            for name, turns in convs:
                sid = f"locomo-{name}"
                t0 = time.perf_counter()
                client.ingest_many(
                    {"session_id": sid, "role": t["role"], "content": t["content"],
                     "timestamp": t["timestamp"], "turn_id": f"{sid}-{k}"}
                    for k, t in enumerate(turns)
                )
                client.close_session(sid)
                client.wait_until_processed(sid, timeout=600, stage="boundary")
                out[name] = client.episodes(sid)
                print(f"  [{label}] {name}: {len(turns)} turns -> {len(out[name])} episodes"
                      f" ({time.perf_counter() - t0:.1f}s)", flush=True)
        finally:
            client.close()
    print(f"  [{label}] done in {time.perf_counter() - started:.1f}s", flush=True)
    return out


def boundaries_from_episodes(episodes: list[Episode], turn_ids: list[str]) -> set[int]:
    """Turn indexes (> 0) where an episode starts."""
    position = {tid: i for i, tid in enumerate(turn_ids)}
    flat = [t for e in episodes for t in e.turn_ids]
    if flat != turn_ids:
        raise SystemExit("the episodes do not partition the conversation's turns in order")
    return {position[e.turn_ids[0]] for e in episodes} - {0}


def spans(episodes: list[Episode], turn_ids: list[str]) -> set[tuple[int, int]]:
    position = {tid: i for i, tid in enumerate(turn_ids)}
    return {(position[e.turn_ids[0]], position[e.turn_ids[-1]]) for e in episodes}


def session_spans(turns: list[dict[str, Any]]) -> set[tuple[int, int]]:
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for i, t in enumerate(turns):
        first.setdefault(t["session"], i)
        last[t["session"]] = i
    return {(first[n], last[n]) for n in first}


def prf(predicted: set[int], truth: set[int]) -> dict[str, float]:
    tp = len(predicted & truth)
    precision = tp / len(predicted) if predicted else 0.0
    recall = tp / len(truth) if truth else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": round(precision, 4), "recall": round(recall, 4), "f1": round(f1, 4),
            "tp": tp, "predicted": len(predicted), "truth": len(truth)}


def mean(values: Sequence[float]) -> float:
    return round(sum(values) / len(values), 2) if values else float("nan")


# -- main ---------------------------------------------------------------------------------


Convs = list[tuple[str, list[dict[str, Any]]]]


def spanning(episodes: list[Episode], turn_ids: list[str], turns: list[dict[str, Any]]) -> int:
    """Episodes whose turns come from more than one LoCoMo session (days apart)."""
    position = {tid: i for i, tid in enumerate(turn_ids)}
    return sum(
        1 for e in episodes if len({turns[position[t]]["session"] for t in e.turn_ids}) > 1
    )


def section_a(convs: Convs, ids: dict[str, list[str]], embedder: CachedEmbedder) -> dict[str, Any]:
    print("(a) time-gap rule only", flush=True)
    gap_only = EpisodeSettings(max_turns=HUGE, topic_shift_threshold=-1.0, min_episode_turns=1)
    eps = run_config("a", gap_only, convs, embedder)
    per: dict[str, Any] = {}
    all_pred: set[tuple[str, int]] = set()
    all_truth: set[tuple[str, int]] = set()
    exact_total = 0
    for name, turns in convs:
        predicted = boundaries_from_episodes(eps[name], ids[name])
        truth = {lo for lo, _ in session_spans(turns)} - {0}
        exact = len(spans(eps[name], ids[name]) & session_spans(turns))
        exact_total += exact
        all_pred |= {(name, p) for p in predicted}
        all_truth |= {(name, p) for p in truth}
        per[name] = {**prf(predicted, truth), "exact_sessions": exact,
                     "sessions": len(session_spans(turns)), "episodes": len(eps[name]),
                     "close_reasons": dict(Counter(e.close_reason for e in eps[name]))}
    overall = {**prf(all_pred, all_truth), "exact_sessions": exact_total,
               "sessions": sum(len(session_spans(t)) for _, t in convs)}
    return {"settings": gap_only.model_dump(), "overall": overall, "per_conversation": per}


def section_b(convs: Convs, ids: dict[str, list[str]], embedder: CachedEmbedder) -> dict[str, Any]:
    print("(b) all rules at defaults", flush=True)
    defaults = EpisodeSettings()
    eps = run_config("b", defaults, convs, embedder)
    per = {
        name: {"episodes": len(eps[name]),
               "mean_turns": mean([e.turn_count for e in eps[name]]),
               "close_reasons": dict(Counter(e.close_reason for e in eps[name])),
               "carried": sum(1 for e in eps[name] if e.carried),
               "spanning_sessions": spanning(eps[name], ids[name], turns)}
        for name, turns in convs
    }
    every = [e for name, _ in convs for e in eps[name]]
    lengths = sorted(e.turn_count for e in every)
    overall = {"episodes": len(every), "mean_turns": mean(lengths),
               "median_turns": lengths[len(lengths) // 2],
               "close_reasons": dict(Counter(e.close_reason for e in every).most_common()),
               "length_histogram": dict(sorted(Counter(lengths).items())),
               "carried": sum(r["carried"] for r in per.values()),
               "spanning_sessions": sum(r["spanning_sessions"] for r in per.values())}
    return {"settings": defaults.model_dump(), "overall": overall, "per_conversation": per}


def section_c(convs: Convs, ids: dict[str, list[str]], embedder: CachedEmbedder) -> dict[str, Any]:
    print("(c) topic_shift_threshold sweep", flush=True)
    total = sum(len(t) for _, t in convs)
    sweep: dict[str, Any] = {}
    for threshold in SWEEP:
        cfg = EpisodeSettings(max_turns=HUGE, topic_shift_threshold=threshold)
        eps = run_config(f"c {threshold}", cfg, convs, embedder)
        per = {}
        for name, turns in convs:
            shifts = sum(1 for e in eps[name] if e.close_reason == "topic_shift")
            per[name] = {"topic_shift": shifts,
                         "per_100_turns": round(100 * shifts / len(turns), 2),
                         "episodes": len(eps[name]),
                         "mean_turns": mean([e.turn_count for e in eps[name]]),
                         "spanning_sessions": spanning(eps[name], ids[name], turns)}
        every = [e for name, _ in convs for e in eps[name]]
        shifts = sum(1 for e in every if e.close_reason == "topic_shift")
        sweep[str(threshold)] = {
            "topic_shift": shifts,
            "per_100_turns": round(100 * shifts / total, 2),
            "episodes": len(every),
            "mean_turns": mean([e.turn_count for e in every]),
            "spanning_sessions": sum(r["spanning_sessions"] for r in per.values()),
            "close_reasons": dict(Counter(e.close_reason for e in every).most_common()),
            "per_conversation": per,
        }
    return {
        "settings": EpisodeSettings(max_turns=HUGE).model_dump(exclude={"topic_shift_threshold"}),
        "thresholds": sweep,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(RESULTS / "episodes.json"))
    args = parser.parse_args()

    convs = [(c["name"], conversation_turns(c)) for c in locomo_conversations()]
    ids = {name: [f"locomo-{name}-{k}" for k in range(len(turns))] for name, turns in convs}
    total = sum(len(t) for _, t in convs)
    print(f"LoCoMo dev: {len(convs)} conversations, {total} turns, "
          f"{sum(len(session_spans(t)) for _, t in convs)} sessions", flush=True)
    started = time.perf_counter()
    embedder = CachedEmbedder(build_embedder(EmbeddingSettings(provider="fastembed")))
    results: dict[str, Any] = {"turn_step_s": TURN_STEP_S, "conversations": {
        name: {"turns": len(t), "sessions": len(session_spans(t))} for name, t in convs}}
    results["a_time_gap_only"] = section_a(convs, ids, embedder)
    results["b_defaults"] = section_b(convs, ids, embedder)
    results["c_topic_shift_sweep"] = section_c(convs, ids, embedder)
    results["model_texts_embedded"] = embedder.computed
    results["wall_s"] = round(time.perf_counter() - started, 1)
    results["machine"] = machine_facts()

    report(results, [name for name, _ in convs])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"\nsaved {out}")


def report(results: dict[str, Any], names: list[str]) -> None:
    a = results["a_time_gap_only"]
    print("\n== (a) time-gap rule only vs LoCoMo session boundaries ==")
    o = a["overall"]
    print(f"overall: P={o['precision']:.3f} R={o['recall']:.3f} F1={o['f1']:.3f} "
          f"(tp {o['tp']}, predicted {o['predicted']}, truth {o['truth']}); "
          f"sessions that are exactly one episode: {o['exact_sessions']}/{o['sessions']}")
    for name in names:
        r = a["per_conversation"][name]
        print(f"  {name}: P={r['precision']:.3f} R={r['recall']:.3f} F1={r['f1']:.3f} "
              f"exact {r['exact_sessions']}/{r['sessions']} episodes={r['episodes']}")

    b = results["b_defaults"]
    print("\n== (b) all rules at defaults ==")
    o = b["overall"]
    print(f"episodes={o['episodes']} mean turns/episode={o['mean_turns']} "
          f"median={o['median_turns']} close reasons={o['close_reasons']}")
    print(f"length histogram: {o['length_histogram']}")
    print(f"episodes with a carried-forward short episode: {o['carried']}; episodes spanning"
          f" two LoCoMo sessions (days apart): {o['spanning_sessions']}")
    for name in names:
        r = b["per_conversation"][name]
        turns = results["conversations"][name]["turns"]
        print(f"  {name}: {turns} turns -> {r['episodes']} episodes, mean {r['mean_turns']}"
              f" turns, reasons {r['close_reasons']}, carried {r['carried']},"
              f" spanning sessions {r['spanning_sessions']}")

    c = results["c_topic_shift_sweep"]["thresholds"]
    print("\n== (c) topic_shift_threshold sweep (max_turns huge, time gap on) ==")
    print(f"{'threshold':>9} {'shifts':>6} {'/100 turns':>10} {'episodes':>8} {'mean len':>8}"
          f" {'spanning':>8}  "
          + " ".join(f"{n:>5}" for n in names))
    for threshold, r in c.items():
        per = " ".join(f"{r['per_conversation'][n]['topic_shift']:>5}" for n in names)
        print(f"{threshold:>9} {r['topic_shift']:>6} {r['per_100_turns']:>10} "
              f"{r['episodes']:>8} {r['mean_turns']:>8} {r['spanning_sessions']:>8}  {per}")
    print(f"\n(model ran on {results['model_texts_embedded']} distinct texts: the turns plus the"
          f" reflection thread's facts; wall {results['wall_s']}s)")


if __name__ == "__main__":
    main()
