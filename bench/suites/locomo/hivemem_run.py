"""LoCoMo through hivemem: the embedded pipeline, recall per question, policy variants."""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from adapters.reference import hivemem_estimate_tokens as estimate_tokens
from harness import (
    CpuMonitor,
    PausedBackground,
    wait_for_windows,
)

from suites.locomo.data import (
    _AGENT_ID,
    BIG_BUDGET,
    BUDGETS,
    CATEGORIES,
    KS,
    Scores,
    item_dia_ids,
    recall_at_ks,
)

# -- hivemem ----------------------------------------------------------------------------------


def run_hivemem(
    convs: list[dict[str, Any]], scores: Scores, log: Callable[[str], None], *,
    variants: bool = True, pause_niced: bool = False,
) -> dict[str, Any]:
    """`pause_niced`: other work's niced processes stopped while the recalls are timed
    (`PausedBackground`; the count is in the result)."""
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
                payload = _payload(conv, session)
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
            with PausedBackground(pause_niced) as paused, CpuMonitor() as cpu:
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
            info["paused_niced_processes"] = paused.paused
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


def _payload(conv: dict[str, Any], session: str) -> list[dict[str, Any]]:
    """The conversation's turns as `ingest_many` takes them (see the module docstring)."""
    return [
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


# -- right after wait_until_processed ---------------------------------------------------------


@dataclass(frozen=True)
class _NoActions:
    """A reflection result with nothing in it (the fields reflection reads)."""

    actions: tuple[()] = ()
    dropped: tuple[()] = ()
    raw_output: None = None
    model: None = None


class WritesNothing:
    """A reflector (the protocol `MemoryClient.local` takes) that writes no fact: episodes
    are reflected, and the memory stays as `wait_until_processed` left it."""

    name = "writes-nothing"

    def reflect(self, request: Any) -> _NoActions:
        return _NoActions()


def run_right_after(convs: list[dict[str, Any]], log: Callable[[str], None]) -> dict[str, Any]:
    """Recall asked right after `wait_until_processed` (embed and boundary stages): every
    turn embedded and assigned to episodes, before reflection has written a fact and before
    the window stage has refined a window. On a store of its own, so no race decides what
    is asked: reflection by `WritesNothing`, and `window_mode: mean` (the window vectors a
    `refined` store has until the window stage reaches them). Still not bit for bit: six
    runs on two trees (2026-12-06) differed on 1-3 of the 760 questions (R@10 0.776-0.778).
    R@k per question, overall and per category; not timed."""
    from hivemem import MemoryClient
    from hivemem.config import Settings

    base = Settings()
    settings = base.model_copy(update={
        "embedding": base.embedding.model_copy(update={"window_mode": "mean"})})
    tmp = Path(tempfile.mkdtemp(prefix="hivemem-locomo-after-"))
    rows: dict[str, list[float]] = {}
    cats: dict[str, list[list[float]]] = {}
    facts = 0
    try:
        with MemoryClient.local(tmp / "memory", settings, reflector=WritesNothing()) as client:
            for conv in convs:
                session = f"locomo-{conv['name']}"
                client.ingest_many(_payload(conv, session))
                client.wait_until_processed(session, timeout=900)
                client.wait_until_processed(session, timeout=300, stage="boundary")
            for conv in convs:
                session = f"locomo-{conv['name']}"
                for q in conv["questions"]:
                    items = client.recall(session, q["question"], BIG_BUDGET, limit=max(KS))
                    row = recall_at_ks(q["evidence"], [item_dia_ids(it) for it in items])
                    rows[q["qid"]] = row
                    cats.setdefault(f"cat{q['category']}", []).append(row)
                facts += len(client.facts(session, include_history=True))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    def mean(vals: list[list[float]]) -> dict[str, Any]:
        return {"n": len(vals), **{f"R@{k}": round(sum(v[i] for v in vals) / len(vals), 4)
                                   for i, k in enumerate(KS)}}

    out = {"overall": mean(list(rows.values())),
           **{c: mean(cats[c]) for c in (f"cat{n}" for n in CATEGORIES) if c in cats},
           "facts_written": facts, "window_mode": "mean", "questions": rows}
    log("  hivemem right after wait_until_processed (no facts, windows unrefined): "
        + " ".join(f"R@{k} {out['overall'][f'R@{k}']:.3f}" for k in KS)
        + f" ({facts} facts written)")
    return out
