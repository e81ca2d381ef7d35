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
  With --right-after, the same questions are also asked of a second store right after
  `wait_until_processed` (embed and boundary stages): reflection by a reflector that writes
  no fact and `window_mode: mean` (the windows a refined store has before the window stage
  reaches them), so no race with reflection or the window stage decides the state asked
  (`run_right_after`; runs still differ on 1-3 questions); its R@k are in
  run_info.hivemem.right_after, per question too.
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
import json
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from adapters.reference import hivemem_estimate_tokens as estimate_tokens
from harness import (
    exit_unless_references_run,
    git_state,
    locomo_conversations,
    machine_facts,
    model_cache,
    offline_model_env,
    results_dir,
    write_result,
)

from suites.locomo.baselines import (
    STOPWORDS,
    OkapiBM25,
    bm25_tokens,
    make_bm25,
    rrf,
    run_baselines,
)
from suites.locomo.data import (
    _AGENT_ID,
    ADAPTERS,
    BIG_BUDGET,
    BUDGETS,
    CATEGORIES,
    COLUMNS,
    KS,
    MODEL,
    QUICK_TURNS,
    RRF_K,
    SYSTEM_ORDER,
    Scores,
    conversation_turns,
    item_dia_ids,
    load_dataset,
    pack_greedy,
    parse_date_time,
    parse_evidence,
    recall_at_ks,
    share,
    turn_text,
)
from suites.locomo.hivemem_run import (
    hivemem_diagnostics,
    policy_variants,
    run_hivemem,
    run_right_after,
)
from suites.locomo.references import (
    run_references,
    score_reference,
)
from suites.locomo.report import (
    METHOD_NOTES,
    aggregate,
    analysis,
    neighbour_diagnostic,
    table,
    table_rows,
    text_table,
    write_md,
    write_png,
)

__all__ = [
    "ADAPTERS",
    "BIG_BUDGET",
    "BUDGETS",
    "CATEGORIES",
    "COLUMNS",
    "KS",
    "METHOD_NOTES",
    "MODEL",
    "QUICK_TURNS",
    "RRF_K",
    "STOPWORDS",
    "SYSTEM_ORDER",
    "_AGENT_ID",
    "OkapiBM25",
    "Scores",
    "add_arguments",
    "aggregate",
    "analysis",
    "bm25_tokens",
    "conversation_turns",
    "estimate_tokens",
    "git_state",
    "hivemem_diagnostics",
    "item_dia_ids",
    "load_dataset",
    "locomo_conversations",
    "make_bm25",
    "neighbour_diagnostic",
    "pack_greedy",
    "parse_date_time",
    "parse_evidence",
    "policy_variants",
    "recall_at_ks",
    "rrf",
    "run",
    "run_baselines",
    "run_hivemem",
    "run_references",
    "run_right_after",
    "score_reference",
    "share",
    "table",
    "table_rows",
    "text_table",
    "turn_text",
    "write_md",
    "write_png",
]


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
    ap.add_argument("--right-after", action="store_true",
                    help="also hivemem's recall right after wait_until_processed, on a store"
                         " of its own (no facts, windows unrefined), R@k next to the settled"
                         " numbers")


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
    if getattr(args, "right_after", False):
        info["hivemem"]["right_after"] = run_right_after(convs, log)
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
