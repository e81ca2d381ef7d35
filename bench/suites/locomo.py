#!/usr/bin/env python
"""LoCoMo evidence recall: hivemem vs lexical/dense baselines vs two reference systems.

    python bench/quality.py                # full run: 5 conversations, all systems
    python bench/quality.py --quick        # one conversation, no reference systems

(this module is the LoCoMo part of bench/quality.py; public hivemem API only)

No LLM anywhere: retrieval is scored against LoCoMo's evidence annotations
(../shared/data/locomo-dev, conversations 26, 30, 41, 42, 43; questions of categories 1-4).

Data, the same for every system:
- One hivemem session per conversation. Each turn is "Speaker: text"; an image turn gets its
  BLIP caption appended as " [shares a photo: <caption>]". turn_id = the dia_id ("D3:12").
  timestamp = the session's date_time ("1:56 pm on 8 May, 2023", read as UTC) + i seconds for
  the i-th turn of the session (i from 0). Role: the conversation's speaker_a is "user",
  speaker_b "assistant"; agent_id = the speaker's name.
- Evidence: each entry is split on ";" (one entry holds "D8:6; D9:17"), and an id written
  "D:11:26" is read as "D11:26" (regex D:?<session>:<turn>). Ids that are still not a turn of the
  conversation ("D10:19" in 42, a bare "D") are dropped and counted. A question left with no
  evidence (two category-3 questions of 26 have none) is left out of every average and counted.

Metrics, per question, averaged over questions (overall and per category):
- recall@k (k = 1, 5, 10, 20): the share of the question's evidence turns among the turns that
  the first k items stand for. A turn item stands for its own dia_id; any other item (e.g. a
  future "fact") for the dia_ids listed in its metadata (`item_dia_ids`).
- recall within a token budget B (500, 1000, 2000): the same share over everything returned for
  budget B. hivemem: `recall(session, q, token_budget=B)` (no limit). Baselines: their ranking
  packed greedily (an item that does not fit is skipped, smaller later ones may still go in, as
  hivemem packs) with hivemem's token estimate (bench/adapters/reference.py's copy:
  the function itself is internal). gleanr is given that estimate as
  its token counter; mneno's order is packed by this script (see bench/adapters/mneno.py).
- latency: p50/p95 of one ranking call per question (hivemem: `recall(limit=20)`, query
  embedding included; dense: query embedding + matrix product + sort; BM25: tokenise + score +
  sort; RRF: both; gleanr: `recall()`; mneno: `build_context()`). gleanr and mneno run at the
  same time, one core each (--reference-jobs 1 runs them one after the other).

Systems:
- hivemem: `MemoryClient.local(tmp, Settings())` with default settings, the real pipeline
  (ingest_many -> embed workers (dense vectors + BM25 sparse vectors) -> Qdrant Edge; boundary
  worker for episodes; reflection into facts with the default heuristic reflector, no LLM),
  recall after `wait_until_processed` (embed and boundary stages), `wait_until_reflected` and
  the window stage's refinement (`harness.wait_for_windows`),
  with the default `balanced` preset (hybrid dense + window vectors + BM25 fused by weight, facts,
  neighbours).
  All five conversations share one store, so BM25's IDF is over all of their turns. The same
  memory is then ranked under other policies ("hivemem under other recall policies"). Then one more untimed
  `recall(limit=200)` per question for diagnostics (score components of evidence turns).
- bm25: Okapi BM25 (rank_bm25.BM25Okapi, k1=1.5, b=0.75, or an identical fallback if rank_bm25
  is missing) over the same texts, lower-cased word tokens minus English stopwords.
- dense: fastembed sentence-transformers/all-MiniLM-L6-v2 (hivemem's model), cosine, numpy.
- rrf: reciprocal rank fusion of bm25 and dense, k = 60.
- gleanr 0.5.0 and mneno 0.4.0: each in its own venv, driven through its public API by
  bench/adapters/gleanr.py and bench/adapters/mneno.py (read their docstrings for exactly how; no
  LLM: gleanr without a reflector and with reflection disabled). "mneno-nofreq" is mneno with
  `MemoryPolicy(access_weight=0.0)`: by default every recall raises the access count of what it
  returned, and that count feeds mneno's score for every later question.
  Set up with:
      python3 -m venv /work/venv-gleanr && /work/venv-gleanr/bin/pip install gleanr==0.5.0 fastembed==0.9.1
      python3 -m venv /work/venv-mneno && /work/venv-mneno/bin/pip install mneno==0.4.0 fastembed==0.9.1
  (override with --gleanr-python / --mneno-python; a missing venv is skipped with a note).

Results: printed, and saved to bench/results/latest/locomo.{json,md,png} (--quick: bench/results/quick/).
The PNG needs matplotlib in /work/venv (`pip install matplotlib`); without it it is skipped.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from adapters.reference import hivemem_estimate_tokens as estimate_tokens
from harness import (
    CpuMonitor,
    exit_unless_references_run,
    git_state,
    locomo_conversations,
    machine_facts,
    model_cache,
    offline_model_env,
    results_dir,
    summarize,
    wait_for_windows,
    write_result,
)

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
KS = (1, 5, 10, 20)
BUDGETS = (500, 1000, 2000)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
BIG_BUDGET = 1_000_000
QUICK_TURNS = 80
RRF_K = 60
ADAPTERS = Path(__file__).resolve().parents[1] / "adapters"
SYSTEM_ORDER = ("hivemem", "bm25", "dense", "rrf", "gleanr", "mneno", "mneno-nofreq")

# -- data -------------------------------------------------------------------------------------

_SESSION = re.compile(r"session_(\d+)")
_EVIDENCE_ID = re.compile(r"^D:?(\d+):(\d+)$")
_AGENT_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def parse_date_time(value: str) -> datetime:
    """LoCoMo's "1:56 pm on 8 May, 2023", as UTC."""
    return datetime.strptime(value.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def turn_text(turn: dict[str, Any]) -> str:
    text = f"{turn['speaker']}: {turn['text']}"
    caption = turn.get("blip_caption")
    if caption:
        text += f" [shares a photo: {caption}]"
    return text


def conversation_turns(data: dict[str, Any]) -> list[dict[str, Any]]:
    sessions = sorted(
        (int(m.group(1)), v)
        for k, v in data.items()
        if (m := _SESSION.fullmatch(k)) and isinstance(v, list)
    )
    out = []
    for number, turns in sessions:
        start = parse_date_time(data[f"session_{number}_date_time"])
        for i, t in enumerate(turns):
            out.append(
                {
                    "dia_id": t["dia_id"],
                    "session": number,
                    "speaker": t["speaker"],
                    "role": "user" if t["speaker"] == data["speaker_a"] else "assistant",
                    "content": turn_text(t),
                    "timestamp": (start + timedelta(seconds=i)).isoformat(),
                }
            )
    return out


def parse_evidence(raw: Iterable[str], known: set[str]) -> tuple[list[str], list[str], list[str]]:
    """(valid dia_ids, dropped ids, ids repaired from "D:s:i")."""
    valid: list[str] = []
    dropped: list[str] = []
    repaired: list[str] = []
    for entry in raw:
        for piece in entry.split(";"):
            part = piece.strip()
            if not part:
                continue
            m = _EVIDENCE_ID.match(part)
            dia = f"D{m.group(1)}:{m.group(2)}" if m else part
            if dia not in known:
                dropped.append(part)
                continue
            if dia != part:
                repaired.append(part)
            if dia not in valid:
                valid.append(dia)
    return valid, dropped, repaired


def load_dataset(only: list[str] | None, max_turns: int | None = None
                 ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The conversations (`only` these names); `max_turns` keeps each conversation's first
    turns and only the questions whose evidence lies wholly inside them (--quick)."""
    convs = []
    notes: dict[str, Any] = {
        "split_entries": 0,
        "repaired_ids": [],
        "dropped_ids": [],
        "questions_without_evidence": [],
        "questions_cat_1_4": 0,
    }
    for conv in locomo_conversations():
        name = conv["name"]
        if only and name not in only:
            continue
        data = conv["data"]
        turns = conversation_turns(data)
        known = {t["dia_id"] for t in turns}
        assert len(known) == len(turns), f"duplicate dia_ids in {name}"
        if max_turns is not None:
            turns = turns[:max_turns]
        kept = {t["dia_id"] for t in turns}
        questions = []
        for index, q in enumerate(data["qa"]):
            cat = q.get("category")
            if cat not in CATEGORIES:
                continue
            notes["questions_cat_1_4"] += 1
            qid = f"{name}-q{index}"
            notes["split_entries"] += sum(1 for e in q["evidence"] if ";" in e)
            evidence, dropped, repaired = parse_evidence(q["evidence"], known)
            notes["repaired_ids"].extend([qid, r] for r in repaired)
            notes["dropped_ids"].extend([qid, d] for d in dropped)
            if not evidence:
                notes["questions_without_evidence"].append(qid)
                continue
            if max_turns is not None and not set(evidence) <= kept:
                continue
            questions.append(
                {"qid": qid, "question": q["question"], "category": cat, "evidence": evidence}
            )
        convs.append({"name": name, "speakers": [data["speaker_a"], data["speaker_b"]],
                      "turns": turns, "questions": questions})
    notes["questions_scored"] = sum(len(c["questions"]) for c in convs)
    notes["turns"] = sum(len(c["turns"]) for c in convs)
    notes["image_turns_with_caption"] = sum(
        1 for c in convs for t in c["turns"] if "[shares a photo:" in t["content"]
    )
    return convs, notes


# -- scoring ----------------------------------------------------------------------------------

_PROVENANCE_KEYS = ("dia_ids", "turn_ids", "source_turn_ids", "source_ids", "evidence")


def item_dia_ids(item: Any) -> list[str]:
    """The turns (dia_ids) a recalled hivemem item stands for.

    A turn is itself. Anything else (e.g. a "fact" distilled from turns) stands for the turn ids
    in its metadata: any of `_PROVENANCE_KEYS`, or `provenance` holding such a list or a mapping
    with one of those keys. Items with no provenance stand for nothing.
    """
    if getattr(item, "source_type", None) == "turn":
        return [item.source_id]
    md = getattr(item, "metadata", None) or {}
    found: list[str] = []

    def take(value: Any) -> None:
        if isinstance(value, str):
            found.append(value)
        elif isinstance(value, list | tuple):
            for v in value:
                if isinstance(v, str):
                    found.append(v)
                elif isinstance(v, dict):
                    take(v.get("turn_id") or v.get("dia_id") or v.get("source_id"))

    prov = md.get("provenance")
    if isinstance(prov, dict):
        for key in (*_PROVENANCE_KEYS, "turn_id"):
            take(prov.get(key))
    else:
        take(prov)
    for key in _PROVENANCE_KEYS:
        take(md.get(key))
    return list(dict.fromkeys(found))


def share(evidence: Sequence[str], covered: Iterable[str]) -> float:
    got = set(covered)
    return sum(1 for e in evidence if e in got) / len(evidence)


def recall_at_ks(evidence: Sequence[str], ranked: Sequence[Sequence[str]]) -> list[float]:
    """`ranked`: per item, the dia_ids it stands for."""
    out = []
    for k in KS:
        covered = [d for ids in ranked[:k] for d in ids]
        out.append(share(evidence, covered))
    return out


def pack_greedy(ranked: Sequence[str], tokens: dict[str, int], budget: int) -> list[str]:
    """hivemem's packing rule: in rank order, take what fits, skip what does not, go on."""
    chosen, used = [], 0
    for dia in ranked:
        t = tokens.get(dia)
        if t is None:
            continue
        if used + t <= budget:
            chosen.append(dia)
            used += t
    return chosen


class Scores:
    """Per system: per question the metric vector [r@1, r@5, r@10, r@20, b500, b1000, b2000]."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, list[float]]] = {}
        self.tokens: dict[str, dict[int, list[int]]] = {}
        self.latency_ms: dict[str, list[float]] = {}
        self.budget_latency_ms: dict[str, list[float]] = {}
        self.ranked: dict[str, dict[str, list[list[str]]]] = {}

    def add(
        self,
        system: str,
        q: dict[str, Any],
        ranked: Sequence[Sequence[str]],
        budget_sets: dict[int, Sequence[str]],
        budget_tokens: dict[int, int] | None = None,
    ) -> None:
        row = recall_at_ks(q["evidence"], ranked)
        row += [share(q["evidence"], budget_sets[b]) for b in BUDGETS]
        self.rows.setdefault(system, {})[q["qid"]] = row
        self.ranked.setdefault(system, {})[q["qid"]] = [list(ids) for ids in ranked[: max(KS)]]
        if budget_tokens:
            for b, t in budget_tokens.items():
                self.tokens.setdefault(system, {}).setdefault(b, []).append(t)


# -- hivemem ----------------------------------------------------------------------------------


def run_hivemem(
    convs: list[dict[str, Any]], scores: Scores, log: Callable[[str], None], *,
    variants: bool = True,
) -> dict[str, Any]:
    from hivemem import MemoryClient
    from hivemem.config import Settings

    info: dict[str, Any] = {"ingest": {}, "cpu": {}}
    tmp = Path(tempfile.mkdtemp(prefix="hivemem-locomo-"))
    try:
        t0 = time.perf_counter()
        client = MemoryClient.local(tmp / "memory", Settings())
        info["open_s"] = round(time.perf_counter() - t0, 2)
        try:
            for conv in convs:
                session = f"locomo-{conv['name']}"
                payload = [
                    {
                        "session_id": session,
                        "role": t["role"],
                        "content": t["content"],
                        "agent_id": t["speaker"] if _AGENT_ID.match(t["speaker"]) else None,
                        "timestamp": datetime.fromisoformat(t["timestamp"]),
                        "turn_id": t["dia_id"],
                    }
                    for t in conv["turns"]
                ]
                t0 = time.perf_counter()
                client.ingest_many(payload)
                t_enq = time.perf_counter() - t0
                client.wait_until_processed(session, timeout=900)
                t_emb = time.perf_counter() - t0
                stats = client.wait_until_processed(session, timeout=300, stage="boundary")
                t_all = time.perf_counter() - t0
                # Reflection (facts, heuristic reflector without an LLM) runs after episodes
                # close; wait for it so every run sees the same facts.
                facts = facts_all = None
                if hasattr(client, "wait_until_reflected"):
                    client.wait_until_reflected(session, timeout=600)
                    facts = len(client.facts(session))
                    facts_all = len(client.facts(session, include_history=True))
                t_refl = time.perf_counter() - t0
                # Window vectors refined by the window stage (the default `refined` mode)
                # once the rest is done: recall sees the memory as it settles.
                refined = wait_for_windows(client)
                t_win = time.perf_counter() - t0
                info["ingest"][conv["name"]] = {
                    "turns": len(payload),
                    "enqueue_s": round(t_enq, 3),
                    "embedded_s": round(t_emb, 2),
                    "episodes_assigned_s": round(t_all, 2),
                    "turns_per_s": round(len(payload) / t_emb, 1),
                    "reflected_s": round(t_refl, 2),
                    "windows_refined_s": None if refined is None else round(t_win, 2),
                    "episodes": stats.episodes,
                    "open_episode_turns": stats.open_episode_turns,
                    "facts_current": facts,
                    "facts_with_history": facts_all,
                }
                log(
                    f"  hivemem {conv['name']}: {len(payload)} turns embedded in {t_emb:.1f} s"
                    f" ({len(payload) / t_emb:.0f}/s), {stats.episodes} episodes"
                    + (f", {facts} current facts ({facts_all} with history),"
                       f" reflected at {t_refl:.1f} s" if facts is not None else "")
                    + (f", windows refined at {t_win:.1f} s" if refined is not None else "")
                )
            dead = client.admin.dead_letters()
            if dead:
                log(f"  WARNING: {len(dead)} dead-lettered turns")
            info["dead_letters"] = len(dead)
            # Warm-up (not timed): first recall builds the recaller.
            client.recall(f"locomo-{convs[0]['name']}", "warm up", limit=5)
            lat: list[float] = []
            blat: list[float] = []
            estimate_checked = estimate_mismatched = 0
            with CpuMonitor() as cpu:
                for conv in convs:
                    session = f"locomo-{conv['name']}"
                    for q in conv["questions"]:
                        t0 = time.perf_counter()
                        items = client.recall(session, q["question"], BIG_BUDGET, limit=max(KS))
                        lat.append((time.perf_counter() - t0) * 1000)
                        ranked = [item_dia_ids(it) for it in items]
                        for it in items:  # the copy of the estimate vs hivemem's own counts
                            if it.source_type == "turn":
                                estimate_checked += 1
                                estimate_mismatched += estimate_tokens(it.content) != it.token_count
                        sets: dict[int, list[str]] = {}
                        toks: dict[int, int] = {}
                        for b in BUDGETS:
                            t0 = time.perf_counter()
                            got = client.recall(session, q["question"], b)
                            blat.append((time.perf_counter() - t0) * 1000)
                            sets[b] = [d for it in got for d in item_dia_ids(it)]
                            toks[b] = sum(it.token_count for it in got)
                        scores.add("hivemem", q, ranked, sets, toks)
            info["cpu"]["queries"] = cpu.result
            # The baselines and the references count tokens with a copy of hivemem's
            # estimate (the function is internal): checked here against recall's own counts.
            info["token_estimate_copy"] = {"turn_items_checked": estimate_checked,
                                           "mismatched": estimate_mismatched}
            if estimate_mismatched:
                log(f"  WARNING: the token estimate copy differs from hivemem's on"
                    f" {estimate_mismatched}/{estimate_checked} turn items")
            scores.latency_ms["hivemem"] = lat
            scores.budget_latency_ms["hivemem"] = blat
            if variants:
                info["policy_variants"] = policy_variants(client, convs, log)
            info["diagnostics"] = hivemem_diagnostics(client, convs, scores, log)
        finally:
            client.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return info


def policy_variants(
    client: Any, convs: list[dict[str, Any]], log: Callable[[str], None]
) -> dict[str, Any]:
    """hivemem's ranking (recall@k) under other policies: which fusion, and what each part of
    the balanced preset adds. Same memory, same questions; not timed against the others."""
    from hivemem import PRESETS

    balanced = PRESETS["balanced"]
    w = balanced.weights
    no_boosts = w.model_copy(update={"recency": 0, "marker": 0, "episode": 0, "session": 0,
                                     "confidence": 0})
    variants = {
        "balanced (weighted fusion)": balanced,
        "fusion=rrf (k=10)": balanced.model_copy(update={"fusion": "rrf"}),
        "no lexical (dense only)": balanced.model_copy(update={"lexical": False}),
        "no neighbours": balanced.model_copy(update={"neighbours": 0,
                                                     "weights": w.model_copy(
                                                         update={"neighbour": 0})}),
        "no facts": balanced.model_copy(update={"fact_limit": 0}),
        "no boosts": balanced.model_copy(update={"weights": no_boosts}),
        "preset cheap": PRESETS["cheap"],
        "preset high_recall": PRESETS["high_recall"],
        "preset agent_state": PRESETS["agent_state"],
    }
    out: dict[str, Any] = {}
    for name, policy in variants.items():
        per_k: list[list[float]] = [[] for _ in KS]
        lat: list[float] = []
        for conv in convs:
            session = f"locomo-{conv['name']}"
            for q in conv["questions"]:
                t0 = time.perf_counter()
                items = client.recall(session, q["question"], BIG_BUDGET, preset=policy,
                                      limit=max(KS))
                lat.append((time.perf_counter() - t0) * 1000)
                for i, v in enumerate(recall_at_ks(q["evidence"], [item_dia_ids(it)
                                                                    for it in items])):
                    per_k[i].append(v)
        row = {f"R@{k}": round(sum(v) / len(v), 4) for k, v in zip(KS, per_k, strict=True)}
        row["p50_ms"] = round(statistics.median(lat), 1)
        out[name] = row
        log(f"  variant {name:28s} " + " ".join(f"{k} {v:.3f}" for k, v in row.items()
                                                   if k.startswith("R@"))
            + f"  p50 {row['p50_ms']} ms")
    return out


def hivemem_diagnostics(
    client: Any, convs: list[dict[str, Any]], scores: Scores, log: Callable[[str], None]
) -> dict[str, Any]:
    """Why evidence turns rank where they do in hivemem (not timed, recall writes nothing).

    One more `recall(limit=200)` per question; for each evidence turn in it, which score
    components it carries (stale penalty, boosts), and how many of the first 20 items are facts.
    """
    t0 = time.perf_counter()
    evidence = in200 = stale = stale_out20 = facts20 = items20 = 0
    boosts: dict[str, int] = {"marker": 0, "episode": 0, "recency>=0.05": 0}
    for conv in convs:
        session = f"locomo-{conv['name']}"
        for q in conv["questions"]:
            items = client.recall(session, q["question"], BIG_BUDGET, limit=200)
            top = items[: max(KS)]
            items20 += len(top)
            facts20 += sum(1 for it in top if it.source_type != "turn")
            covered = {d for it in top for d in item_dia_ids(it)}
            by_turn = {it.source_id: it for it in items if it.source_type == "turn"}
            for e in q["evidence"]:
                evidence += 1
                it = by_turn.get(e)
                if it is None:
                    continue
                in200 += 1
                if getattr(it.components, "stale", 0.0):
                    stale += 1
                    stale_out20 += e not in covered
            for it in top:
                c = it.components
                boosts["marker"] += bool(c.marker)
                boosts["episode"] += bool(c.episode)
                boosts["recency>=0.05"] += c.recency >= 0.05
    out = {
        "evidence_turns": evidence,
        "evidence_turns_in_first_200_turn_items": in200,
        "evidence_turns_with_stale_penalty": stale,
        "of_which_outside_the_first_20_items": stale_out20,
        "fact_share_of_first_20_items": round(facts20 / max(1, items20), 4),
        "first_20_items_with_boost": {k: round(v / max(1, items20), 4) for k, v in boosts.items()},
        "seconds": round(time.perf_counter() - t0, 1),
    }
    log(f"  hivemem diagnostics: {stale}/{evidence} evidence turns carry the stale penalty"
        f" ({stale_out20} of them fall outside the first 20 items); facts are"
        f" {out['fact_share_of_first_20_items']:.0%} of the first 20 items")
    return out


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


# -- reference systems ------------------------------------------------------------------------


def run_references(
    systems: list[tuple[str, str]],
    job_path: Path,
    convs: list[dict[str, Any]],
    scores: Scores,
    log: Callable[[str], None],
    timeout_s: float,
    parallel: bool,
    out_dir: Path,
) -> dict[str, Any]:
    """Run the drivers (both at once when `parallel`: each is single-threaded Python, one core
    each on a 2-core machine), then score their outputs."""
    infos: dict[str, Any] = {}
    procs: list[tuple[str, subprocess.Popen[str], Path, float]] = []
    finished: list[Path] = []
    reused_cpu: dict[str, Any] = {}

    job_text = job_path.read_bytes()

    def start(system: str, python: str) -> None:
        driver = ADAPTERS / f"{system}.py"
        digest = hashlib.sha256(
            job_text + driver.read_bytes() + (ADAPTERS / "reference.py").read_bytes()
        ).hexdigest()[:12]
        out_path = out_dir / f"{system}-{digest}.json"
        if out_path.exists():
            log(f"  {system}: reusing {out_path} (same job and driver)")
            meta_path = out_path.with_suffix(".meta.json")
            meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
            infos[system] = score_reference(system, out_path, convs, scores,
                                            meta.get("wall_s", float("nan")))
            infos[system]["reused"] = str(out_path)
            reused_cpu[system] = meta.get("cpu")
            return
        if not Path(python).exists():
            log(f"  {system}: {python} not found, skipped (see this script's docstring)")
            infos[system] = {"skipped": f"{python} not found"}
            return
        log(f"  {system}: {python} {driver.name}")
        proc = subprocess.Popen(  # progress lines go straight to our stderr
            [python, str(driver), "locomo", str(job_path), str(out_path)], text=True,
            stdout=subprocess.DEVNULL,
        )
        procs.append((system, proc, out_path, time.perf_counter()))

    def finish(system: str, proc: subprocess.Popen[str], out_path: Path, t0: float) -> None:
        try:
            code = proc.wait(timeout=max(1.0, timeout_s - (time.perf_counter() - t0)))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = -9
        wall = time.perf_counter() - t0
        log(f"  {system}: finished in {wall:.0f} s (exit {code})")
        if code != 0 or not out_path.exists():
            infos[system] = {"skipped": f"driver exit {code}"}
            return
        infos[system] = score_reference(system, out_path, convs, scores, wall)
        finished.append(out_path)

    children0 = os.times()
    with CpuMonitor() as cpu:
        if parallel:
            for system, python in systems:
                start(system, python)
            for system, proc, out_path, t0 in list(procs):
                finish(system, proc, out_path, t0)
        else:
            for system, python in systems:
                start(system, python)
                if procs:
                    system_, proc, out_path, t0 = procs.pop()
                    finish(system_, proc, out_path, t0)
    children1 = os.times()
    res = dict(cpu.result)
    kids = (children1.children_user + children1.children_system
            - children0.children_user - children0.children_system)
    if res.get("wall_s"):
        # CpuMonitor counts this process only; the drivers are children.
        res["driver_cores"] = round(kids / res["wall_s"], 2)
        if "foreign_cores" in res:
            res["foreign_cores"] = round(max(0.0, res["foreign_cores"] - res["driver_cores"]), 2)
    if finished:
        for out_path in finished:  # what the run was like, for whoever reuses the output
            system = out_path.name.split("-")[0]
            out_path.with_suffix(".meta.json").write_text(json.dumps(
                {"wall_s": infos[system]["wall_s"], "cpu": res, "parallel": parallel}))
    elif reused_cpu:
        # Nothing ran now: report the conditions of the run that made the reused outputs.
        first = next(iter(reused_cpu.values()))
        res = dict(first) if first else {}
        res["reused"] = True
    infos["cpu"] = res
    infos["parallel"] = parallel
    return infos


def score_reference(
    system: str,
    out_path: Path,
    convs: list[dict[str, Any]],
    scores: Scores,
    wall: float,
) -> dict[str, Any]:
    out = json.loads(out_path.read_text(encoding="utf-8"))
    info: dict[str, Any] = {
        "version": out.get("version"),
        "wall_s": round(wall, 1),
        "ingest_s": round(out.get("ingest_s", 0.0), 2),
        "systems": [r["system"] for r in out["runs"]],
        "unmapped_items": 0,
        "stats": {n: c.get("stats") for n, c in out["runs"][0]["conversations"].items()},
    }
    if "warm_s" in out:
        info["embed_cache_warm_s"] = round(out["warm_s"], 2)
    if "returned_tokens_check" in out:
        bad = [c for c, t in out["returned_tokens_check"] if estimate_tokens(c) != t]
        info["token_counter_matches_hivemem"] = not bad
    for run in out["runs"]:
        name = run["system"]
        for conv in convs:
            got = run["conversations"][conv["name"]]
            tokens = {t["dia_id"]: estimate_tokens(t["content"]) for t in conv["turns"]}
            for q in conv["questions"]:
                ranked_ids = got["ranked"][q["qid"]]
                info["unmapped_items"] += sum(1 for d in ranked_ids if d not in tokens)
                if "budget" in got:  # native budgets (gleanr)
                    sets = {b: got["budget"][str(b)][q["qid"]] for b in BUDGETS}
                else:  # mneno: its context order, packed with hivemem's estimate
                    order = [d for d, _words in got["context_order"][q["qid"]]]
                    sets = {b: pack_greedy(order, tokens, b) for b in BUDGETS}
                    # Did the order hold enough for the largest budget? (If not, mneno had
                    # nothing more to give: it ran out of candidates, not of budget.)
                    short = sum(tokens.get(d, 0) for d in order) < max(BUDGETS)
                    key = f"{name}_orders_shorter_than_max_budget"
                    info[key] = info.get(key, 0) + short
                toks = {b: sum(tokens.get(d, 0) for d in sets[b]) for b in BUDGETS}
                scores.add(name, q, [[d] for d in ranked_ids], sets, toks)
        scores.latency_ms[name] = run["latency_ms"]["rank"]
        if run["latency_ms"].get("budget"):
            scores.budget_latency_ms[name] = run["latency_ms"]["budget"]
    return info


# -- report -----------------------------------------------------------------------------------

COLUMNS = [f"R@{k}" for k in KS] + [f"B{b}" for b in BUDGETS]


def aggregate(scores: Scores, convs: list[dict[str, Any]]) -> dict[str, Any]:
    cat_of = {q["qid"]: q["category"] for c in convs for q in c["questions"]}
    out: dict[str, Any] = {}
    for system, rows in scores.rows.items():
        groups: dict[str, list[list[float]]] = {"overall": list(rows.values())}
        for qid, row in rows.items():
            groups.setdefault(f"cat{cat_of[qid]}", []).append(row)
        res: dict[str, Any] = {}
        for g, vals in groups.items():
            n = len(vals)
            res[g] = {"n": n, **{col: round(sum(v[i] for v in vals) / n, 4)
                                 for i, col in enumerate(COLUMNS)}}
        lat = scores.latency_ms.get(system, [])
        res["latency_ms"] = summarize(lat) if lat else None
        blat = scores.budget_latency_ms.get(system, [])
        res["budget_call_latency_ms"] = summarize(blat) if blat else None
        toks = scores.tokens.get(system, {})
        res["mean_tokens_returned"] = {
            str(b): round(sum(v) / len(v), 1) for b, v in toks.items() if v
        }
        res["max_tokens_returned"] = {str(b): max(v) for b, v in toks.items() if v}
        out[system] = res
    return out


def table_rows(agg: dict[str, Any], group: str, *, latency: bool) -> list[list[str]]:
    """Per system that has `group`: its name, the recall columns and (optionally) latency."""
    rows = []
    for system in [s for s in SYSTEM_ORDER if s in agg]:
        r = agg[system].get(group)
        if r is None:
            continue
        cells = [system] + [f"{r[c]:.3f}" for c in COLUMNS]
        if latency:
            lat = agg[system]["latency_ms"]
            cells += [f"{lat['p50']:.1f}", f"{lat['p95']:.1f}"] if lat else ["-", "-"]
        rows.append(cells)
    return rows


def table(agg: dict[str, Any], group: str, *, latency: bool) -> list[str]:
    head = ["system", *COLUMNS] + (["p50 ms", "p95 ms"] if latency else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cells) + " |" for cells in table_rows(agg, group, latency=latency)]
    return lines


def text_table(agg: dict[str, Any], group: str, *, latency: bool) -> str:
    head = ["system", *COLUMNS] + (["p50ms", "p95ms"] if latency else [])
    rows = [head, *table_rows(agg, group, latency=latency)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join(
        "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                  for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        for r in rows
    )


def analysis(scores: Scores, convs: list[dict[str, Any]]) -> dict[str, Any]:
    """Diagnostics that explain the numbers (no tuning: nothing here feeds back into a system)."""
    out: dict[str, Any] = {}
    rows = scores.rows
    qs = [q for c in convs for q in c["questions"]]
    if "bm25" in rows and "dense" in rows:
        # How complementary are lexical and dense? Share of evidence in either top-10.
        both = [max(rows["bm25"][q["qid"]][2], rows["dense"][q["qid"]][2]) for q in qs]
        out["oracle_max_bm25_dense_R@10_per_question"] = round(sum(both) / len(both), 4)
    if "hivemem" in rows and "dense" in rows:
        for i, col in enumerate(COLUMNS):
            if col not in ("R@1", "R@20", "B2000"):
                continue
            diff = [rows["hivemem"][q["qid"]][i] - rows["dense"][q["qid"]][i] for q in qs]
            out[f"hivemem_vs_dense_{col}_questions"] = {
                "better": sum(1 for d in diff if d > 1e-9),
                "worse": sum(1 for d in diff if d < -1e-9),
                "same": sum(1 for d in diff if abs(d) <= 1e-9),
            }
    last: dict[str, int] = {}
    for c in convs:
        final = max(t["session"] for t in c["turns"])
        for q in c["questions"]:
            last[q["qid"]] = final

    def from_last(system: str, k: int) -> float:
        hits = total = 0
        for qid, ranked in scores.ranked[system].items():
            for ids in ranked[:k]:
                total += 1
                hits += any(d.startswith(f"D{last[qid]}:") for d in ids)
        return round(hits / total, 4) if total else 0.0

    out["share_of_top_k_items_from_the_last_session"] = {
        s: {"top1": from_last(s, 1), "top20": from_last(s, 20)}
        for s in SYSTEM_ORDER if s in scores.ranked
    }
    out["last_session_share_of_turns"] = round(
        sum(sum(1 for t in c["turns"] if t["session"] == max(x["session"] for x in c["turns"]))
            for c in convs) / sum(len(c["turns"]) for c in convs), 4)
    out["missed_evidence_next_to_a_top20_turn"] = {
        s: neighbour_diagnostic(scores.ranked[s], convs) for s in SYSTEM_ORDER if s in scores.ranked
    }
    return out


def neighbour_diagnostic(
    scores_ranked: dict[str, list[list[str]]], convs: list[dict[str, Any]]
) -> dict[str, Any]:
    """Of the evidence turns missing from a system's top 20, how many sit right next to (+-1 in
    the same session) a turn that is in it: what "add neighbouring turns" could recover."""
    missed = adjacent = 0
    for conv in convs:
        for q in conv["questions"]:
            top = {d for ids in scores_ranked.get(q["qid"], []) for d in ids}
            near = set()
            for d in top:
                m = re.fullmatch(r"D(\d+):(\d+)", d)
                if m:
                    s, i = int(m.group(1)), int(m.group(2))
                    near |= {f"D{s}:{i - 1}", f"D{s}:{i + 1}"}
            for e in q["evidence"]:
                if e not in top:
                    missed += 1
                    adjacent += e in near
    return {"missed": missed, "adjacent_to_top20": adjacent,
            "share": round(adjacent / missed, 4) if missed else 0.0}


def write_png(agg: dict[str, Any], path: Path, log: Callable[[str], None]) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib is not installed in this venv: PNG skipped")
        return False
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for system in [s for s in SYSTEM_ORDER if s in agg]:
        r = agg[system]["overall"]
        style = {"linewidth": 2.6} if system == "hivemem" else {"linewidth": 1.4}
        ax1.plot(KS, [r[f"R@{k}"] for k in KS], marker="o", label=system, **style)
        ax2.plot(BUDGETS, [r[f"B{b}"] for b in BUDGETS], marker="o", label=system, **style)
    ax1.set_xlabel("k (items)")
    ax1.set_ylabel("evidence recall")
    ax1.set_title("LoCoMo dev (cat. 1-4): evidence recall@k")
    ax1.set_xticks(KS)
    ax2.set_xlabel("token budget (hivemem's estimate)")
    ax2.set_title("evidence recall within a token budget")
    ax2.set_xticks(BUDGETS)
    for ax in (ax1, ax2):
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write_md(result: dict[str, Any], path: Path) -> None:
    agg = result["systems"]
    d = result["dataset"]
    lines = [
        "# LoCoMo evidence recall (dev split)",
        "",
        f"Conversations {', '.join(result['conversations'])}: {d['turns']} turns,"
        f" {d['questions_scored']} questions of categories 1-4 scored"
        f" ({len(d['questions_without_evidence'])} without valid evidence left out)."
        " Made by `bench/locomo.py`; no LLM anywhere.",
        "",
        "R@k: share of a question's evidence turns among the first k items. B<n>: share among"
        " everything returned within a budget of n tokens (hivemem's estimate for every system)."
        " Latency: one ranking call per question (hivemem: `recall(limit=20)`, query embedding"
        " included).",
        "",
        "## Overall",
        "",
        *table(agg, "overall", latency=True),
        "",
    ]
    for c, name in CATEGORIES.items():
        n = next((agg[s][f"cat{c}"]["n"] for s in agg if f"cat{c}" in agg[s]), 0)
        lines += [f"## Category {c}: {name} ({n} questions)", "",
                  *table(agg, f"cat{c}", latency=False), ""]
    lines += ["## Latency and tokens", "",
              "| system | rank p50 ms | rank p95 ms | budget-call p50 ms | mean tokens at"
              " B500 / B1000 / B2000 |", "|---|---|---|---|---|"]
    for s in [s for s in SYSTEM_ORDER if s in agg]:
        lat = agg[s]["latency_ms"] or {}
        blat = agg[s]["budget_call_latency_ms"]
        toks = agg[s]["mean_tokens_returned"]
        cells = [s, f"{lat.get('p50', float('nan')):.1f}", f"{lat.get('p95', float('nan')):.1f}",
                 f"{blat['p50']:.1f}" if blat else "-",
                 " / ".join(str(toks.get(str(b), "-")) for b in BUDGETS)]
        lines.append("| " + " | ".join(cells) + " |")
    contention = result.get("contention", {})
    if contention:
        lines += ["", "Other processes on the machine while timing (average cores they used; the"
                  " machine has 2): " + ", ".join(f"{k} {v}" for k, v in contention.items())
                  + ". Latencies measured under contention are inflated."]
    reused = [s for s in ("gleanr", "mneno") if result["run_info"].get(s, {}).get("reused")]
    if reused:
        note = result["run_info"].get("reference_run", {}).get("cpu", {}).get("note", "")
        lines += ["", f"{' and '.join(reused)}: driver outputs reused from an earlier run of the"
                  " same job and driver code (`--reference-outputs`)"
                  + (f"; that run: {note}" if note else "") + "."]
    variants = result["run_info"].get("hivemem", {}).get("policy_variants")
    if variants:
        lines += ["", "## hivemem under other recall policies", "",
                  "Same memory and questions; ranking only (`recall(limit=20, preset=...)`)."
                  " Weighted fusion is the default because it ranked best here.", "",
                  "| policy | " + " | ".join(f"R@{k}" for k in KS) + " | p50 ms |",
                  "|---|" + "---|" * (len(KS) + 1)]
        for name, row in variants.items():
            lines.append(f"| {name} | " + " | ".join(f"{row[f'R@{k}']:.3f}" for k in KS)
                         + f" | {row['p50_ms']} |")
    lines += ["", "## How it was run", ""]
    lines += [f"- {n}" for n in result["method"]]
    if result.get("analysis"):
        lines += ["", "## Diagnostics", "", "```json",
                  json.dumps(result["analysis"], indent=2), "```"]
    m = result["machine"]
    lines += ["", f"Machine: {m.get('cpu')}, {m.get('nproc')} cores; python {m.get('python')},"
              f" fastembed {m.get('fastembed')}; run took {result['wall_s']:.0f} s.", ""]
    path.write_text("\n".join(lines), encoding="utf-8")


# -- main -------------------------------------------------------------------------------------


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The LoCoMo options of bench/quality.py."""
    ap.add_argument("--conversations", nargs="*", help="LoCoMo names, e.g. 26 30 (default: all)")
    ap.add_argument("--gleanr-python", default="/work/venv-gleanr/bin/python")
    ap.add_argument("--mneno-python", default="/work/venv-mneno/bin/python")
    ap.add_argument("--skip-reference", action="store_true")
    ap.add_argument("--max-turns", type=int, default=None, metavar="N",
                    help="each conversation's first N turns and the questions they answer"
                         " (saved to results/quick/, like --quick)")
    ap.add_argument("--reference-timeout", type=float, default=5400.0,
                    help="seconds per adapter (mneno alone needs ~10 min on a quiet 2-core box)")
    ap.add_argument("--reference-outputs", metavar="DIR",
                    help="keep the adapters' raw outputs here; an output made from the same job"
                         " and adapter code is reused instead of running the adapter again")
    ap.add_argument("--reference-jobs", type=int, choices=(1, 2), default=2,
                    help="2 (default): run gleanr and mneno at the same time, one core each")


def run(args: argparse.Namespace, log: Callable[[str], None] = print) -> dict[str, Any]:
    """The whole LoCoMo run (hivemem, baselines, references unless --quick/--skip-reference),
    saved as latest/locomo.* (--quick: bench/results/quick/); the result."""
    offline_model_env()
    started = time.perf_counter()

    only = args.conversations
    if args.quick and not only:
        only = [locomo_conversations()[0]["name"]]
    # --quick: the first 80 turns of one conversation and the questions they answer.
    convs, data_notes = load_dataset(only, QUICK_TURNS if args.quick else args.max_turns)
    log(f"LoCoMo dev: {len(convs)} conversation(s), {data_notes['turns']} turns,"
        f" {data_notes['questions_scored']} questions scored"
        f" (dropped evidence ids: {len(data_notes['dropped_ids'])},"
        f" repaired: {len(data_notes['repaired_ids'])},"
        f" questions without evidence: {len(data_notes['questions_without_evidence'])})")

    references = [("gleanr", args.gleanr_python), ("mneno", args.mneno_python)]
    if not (args.quick or args.skip_reference):
        exit_unless_references_run(references)  # or pass --skip-reference

    scores = Scores()
    info: dict[str, Any] = {}
    log("hivemem (embedded mode, default settings):")
    info["hivemem"] = run_hivemem(convs, scores, log, variants=not args.quick)
    log("baselines (bm25, dense, rrf):")
    info["baselines"] = run_baselines(convs, scores, log)

    if not (args.quick or args.skip_reference):
        with tempfile.TemporaryDirectory(prefix="locomo-ref-") as tmp:
            job_path = Path(tmp) / "job.json"
            out_dir = Path(args.reference_outputs) if args.reference_outputs else Path(tmp)
            out_dir.mkdir(parents=True, exist_ok=True)
            job = {
                "model": MODEL,
                "model_cache": str(model_cache()),
                "k_max": max(KS),
                "budgets": list(BUDGETS),
                "conversations": [
                    {"name": c["name"],
                     "turns": [{k: t[k] for k in ("dia_id", "speaker", "role", "content",
                                                  "timestamp")} for t in c["turns"]],
                     "questions": [{"qid": q["qid"], "question": q["question"]}
                                   for q in c["questions"]]}
                    for c in convs
                ],
            }
            job_path.write_text(json.dumps(job), encoding="utf-8")
            log("reference systems (own venvs, public API"
                + (", both at once):" if args.reference_jobs > 1 else "):"))
            refs = run_references(
                references,
                job_path, convs, scores, log, args.reference_timeout,
                parallel=args.reference_jobs > 1, out_dir=out_dir,
            )
            info["reference_run"] = {"cpu": refs.pop("cpu"), "parallel": refs.pop("parallel")}
            info.update(refs)

    agg = aggregate(scores, convs)
    result: dict[str, Any] = {
        "benchmark": "locomo-evidence-recall",
        "quick": args.quick,
        "max_turns": QUICK_TURNS if args.quick else args.max_turns,
        "conversations": [c["name"] for c in convs],
        "dataset": data_notes,
        "ks": list(KS),
        "budgets": list(BUDGETS),
        "systems": agg,
        "run_info": info,
        "method": METHOD_NOTES,
        "machine": machine_facts(),
        "git": git_state(),
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    result["analysis"] = analysis(scores, convs)
    if info.get("hivemem", {}).get("diagnostics"):
        result["analysis"]["hivemem"] = info["hivemem"]["diagnostics"]
    contention = {}
    for key, part in (("hivemem queries", info.get("hivemem", {})),
                      ("baseline queries", info.get("baselines", {}))):
        fc = part.get("cpu", {}).get("queries", {}).get("foreign_cores")
        if fc is not None:
            contention[key] = fc
    fc = info.get("reference_run", {}).get("cpu", {}).get("foreign_cores")
    if fc is not None:
        contention["reference systems"] = fc
    result["contention"] = contention
    result["wall_s"] = round(time.perf_counter() - started, 1)

    # A cut-down run (--quick, --max-turns) is a smoke test: results/quick/, not latest/.
    partial = args.quick or args.max_turns is not None
    stem, folder = "locomo", results_dir(partial)
    with tempfile.TemporaryDirectory() as tmp:
        write_md(result, Path(tmp) / "locomo.md")
        write_result(stem, result, (Path(tmp) / "locomo.md").read_text(encoding="utf-8"),
                     quick=partial)
    (folder / f"{stem}.questions.json").write_text(
        json.dumps({"columns": COLUMNS,
                    "rows": {system: {qid: [round(v, 4) for v in row] for qid, row in rows.items()}
                             for system, rows in scores.rows.items()}}),
        encoding="utf-8")
    png = write_png(agg, folder / f"{stem}.png", log)

    log("")
    log(f"LoCoMo evidence recall, {data_notes['questions_scored']} questions (categories 1-4),"
        f" conversations {', '.join(c['name'] for c in convs)}")
    log("overall (R@k: first k items; B<n>: within n tokens; latency of one ranking call):")
    log(text_table(agg, "overall", latency=True))
    for c, name in CATEGORIES.items():
        if any(f"cat{c}" in agg[s] for s in agg):
            n = next(agg[s][f"cat{c}"]["n"] for s in agg if f"cat{c}" in agg[s])
            log(f"\ncategory {c} ({name}, {n} questions):")
            log(text_table(agg, f"cat{c}", latency=False))
    log("")
    log("diagnostics: " + json.dumps(result["analysis"]))
    log(f"\nsaved {folder / (stem + '.json')}, {stem}.md" + (f", {stem}.png" if png else "")
        + f" ({result['wall_s']:.0f} s)")
    return result


METHOD_NOTES = [
    "Turns ingested as 'Speaker: text'; image turns get ' [shares a photo: <BLIP caption>]'."
    " hivemem turn_id = dia_id; timestamp = session date_time (UTC) + i s for the session's"
    " i-th turn; speaker_a -> role user, speaker_b -> assistant.",
    "Evidence: entries split on ';'; 'D:11:26' read as 'D11:26'; ids that are not turns of the"
    " conversation dropped; questions with no valid evidence left out.",
    "hivemem: MemoryClient.local with default Settings (embedded: fakeredis + Qdrant Edge +"
    " worker threads; reflection with the default heuristic reflector, no LLM), recall after"
    " wait_until_processed (embed and boundary) and wait_until_reflected. Ranking ="
    " recall(token_budget=1e6, limit=20); budgets = recall(token_budget=B). A fact item counts"
    " for the turns in its metadata source_turn_ids.",
    "bm25: Okapi BM25 (k1 1.5, b 0.75) over lower-cased word tokens minus English stopwords."
    " dense: all-MiniLM-L6-v2 via fastembed, cosine. rrf: reciprocal rank fusion (k=60) of the"
    " two full rankings. Budgets: rankings packed greedily with hivemem's estimate_tokens.",
    "gleanr 0.5.0: public API, InMemoryBackend, fastembed Embedder (same model), hivemem's"
    " token estimate as TokenCounter, no reflector and ReflectionConfig(enabled=False) (no"
    " LLM, so no facts); ranking = recall(token_budget=1e6) in gleanr's order; budgets native.",
    "mneno 0.4.0: public API (MemoryClient with a fastembed EmbeddingProvider memoised by text,"
    " defaults otherwise); one build_context(budget=2000) per question: its first 20 items give"
    " R@k, its order packed with hivemem's estimate gives the budgets (mneno counts whitespace"
    " words and has no hook for another counter). Its calls record accesses, which feed its"
    " frequency score; mneno-nofreq is a second pass over the same store with"
    " MemoryPolicy(access_weight=0).",
    "gleanr and mneno run at the same time (one core each) unless --reference-jobs 1.",
]

