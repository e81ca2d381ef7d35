"""LoCoMo report: aggregates, tables, analysis, the markdown and the plot."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import (
    summarize,
)

from suites.locomo.data import (
    BUDGETS,
    CATEGORIES,
    COLUMNS,
    KS,
    SYSTEM_ORDER,
    Scores,
)

# -- report -----------------------------------------------------------------------------------



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
