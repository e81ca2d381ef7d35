#!/usr/bin/env python
"""Idle recall on a history-heavy session, kept on disk: built once, then timed, profiled and
compared between source trees from the same bytes.

    python bench/probes/idle_recall.py build --folder /tmp/ir-turns --turns 20000
    python bench/probes/idle_recall.py build --folder /tmp/ir-facts --shape facts --turns 12000
    python bench/probes/idle_recall.py run --folder /tmp/ir-turns --profile /tmp/ir.prof
    python bench/probes/idle_recall.py ab --folder /tmp/ir-turns --baseline /tmp/base --rounds 3

`build` fills one session through the public pipeline (bench/suites/recall_load.py's
shapes: `turns`, a quarter of the turns changing one of ten slots, so its facts have long
version chains; `facts`, nearly every turn a fact on a slot of its own), waits until it is
reflected and closes the store. `run` opens a copy of the folder (so every run starts from
the same bytes), warms up, times `--recalls` recalls (`limit=20`) over a fixed, seeded set
of queries (current-state, past and topic questions), and records each query's returned
items (source ids in order, scores); `--profile` adds a cProfile of the timed recalls and a
breakdown per component (ms per recall). `ab` runs `run` in alternating subprocesses for
the baseline tree and this one (PYTHONPATH and working directory of each), so both see the
same machine, then checks that both returned the same items in the same order for every
query. Saved to bench/results/latest/idle_recall[-facts].json.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # bench/: harness, suites

from harness import LATEST, machine_facts, summarize  # noqa: E402
from suites.recall_load import SLOTS, WORDS, Turns, _fill, settings  # noqa: E402

import hivemem  # noqa: E402
from hivemem import MemoryClient  # noqa: E402

SESSION = "s0"

# Components of a recall, as cProfile names the functions (file suffix, function name):
# cumulative ms per recall of each. They overlap where one calls another (noted).
COMPONENTS: dict[str, tuple[str, str]] = {
    "client.recall (total)": ("producer/client.py", "recall"),
    "Recaller._recall": ("recall/recaller.py", "_recall"),
    "query embedding": ("providers/embedders.py", "embed_query"),
    "service before recall (scope check)": ("service/access.py", "require"),
    "lexical + Redis reads + currency (_lexical)": ("recall/recaller.py", "_lexical"),
    "  known facts (KnownFacts.get)": ("recall/known_facts.py", "get"),
    "    count_facts": ("", "count_facts"),
    "    facts_written_after": ("", "facts_written_after"),
    "  currency (CurrencyView.__call__)": ("recall/currency.py", "__call__"),
    "  recent turns + progress (Redis)": ("", "send_recent_turns_and_progress"),
    "  slot table view (Redis)": ("store/currency.py", "send_view"),
    "  lexical turn search": ("", "search_turns_lexical"),
    "  lexical fact search": ("", "search_facts_lexical"),
    "dense turn (+window) search": ("recall/recaller.py", "_dense_hits"),
    "facts: dense search + pool (_add_facts)": ("recall/recaller.py", "_add_facts"),
    "  dense fact search": ("", "search_facts"),
    "recent turns to pool (_add_recent)": ("recall/recaller.py", "_add_recent"),
    "neighbours (_add_neighbours)": ("recall/recaller.py", "_add_neighbours"),
    "successors (_add_successors)": ("recall/recaller.py", "_add_successors"),
    "gone values (_with_gone_values)": ("recall/recaller.py", "_with_gone_values"),
    "currency lens: replaced per key": ("domain/recall/fact_index.py", "replaced"),
    "currency lens: owner per key": ("domain/recall/fact_index.py", "owner"),
    "currency lens: owners (all)": ("domain/recall/fact_index.py", "owners"),
    "slot table chains": ("recall/currency.py", "chain"),
    "scoring (score_table)": ("domain/recall/score_table.py", "score_table"),
    "facts restate turns": ("recall/recaller.py", "_facts_stand_for_their_turns"),
    "select + packing (_select_current)": ("recall/recaller.py", "_select_current"),
    "result items (context_item)": ("recall/items.py", "context_item"),
}


def queries(n: int) -> list[str]:
    """A fixed mix: what holds now, what was before, topic words (seeded)."""
    rng = random.Random(40)
    out = []
    for i in range(n):
        slot = rng.choice(SLOTS)
        out.append([f"what is the {slot} now?", f"what was the {slot} before?",
                    f"which {slot} did we pick?",
                    " ".join(rng.choice(WORDS) for _ in range(6))][i % 4])
    return out


def build(args: argparse.Namespace) -> None:
    folder = Path(args.folder)
    if folder.exists():
        raise SystemExit(f"{folder} exists")
    texts = (Turns(seed=5, fact_share=0.25) if args.shape == "turns"
             else Turns(seed=5, fact_share=0.95, distinct=True))
    with MemoryClient.local(str(folder), settings()) as client:
        t0 = time.perf_counter()
        out: dict[str, Any] = {"fill": _fill(client, SESSION, args.turns, texts)}
        client.wait_until_reflected(SESSION, timeout=7200)
        out["reflected_s"] = round(time.perf_counter() - t0, 1)
        info = client.admin.session_info(SESSION)
        out.update(shape=args.shape, episodes=info.episodes, facts_active=info.facts_active,
                   facts_with_history=len(client.facts(SESSION, include_history=True)))
    (folder / "probe.json").write_text(json.dumps(out))
    print(out)


def settle(client: MemoryClient, asked: list[str], every_s: float, most_s: float = 600.0
           ) -> float:
    """Seconds until two passes over `asked`, `every_s` apart, return the same items."""
    started = time.perf_counter()
    before = None
    while time.perf_counter() - started < most_s:
        now = {q: [i for i, _s in _signature(client.recall(SESSION, q, limit=20))]
               for q in asked}
        if now == before:
            break
        before = now
        time.sleep(every_s)
    return round(time.perf_counter() - started, 1)


def settle_in_place(args: argparse.Namespace) -> None:
    """Open the built folder itself and wait until it settles, so copies start settled."""
    with MemoryClient.local(args.folder, settings()) as client:
        print(f"settled after {settle(client, queries(12), args.settle_s)} s")


def _signature(result: Any) -> list[list[Any]]:
    return [[i.source_id, i.score] for i in result.items]


def run(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="hivemem-idle-recall-"))
    copy = work / "store"
    shutil.copytree(args.folder, copy, ignore=shutil.ignore_patterns("*.sock", "*.pid",
                                                                      "*.lock"))
    asked = queries(args.queries)
    out: dict[str, Any] = {"tree": str(Path(hivemem.__file__).parent.parent),
                           **json.loads((Path(args.folder) / "probe.json").read_text())}
    try:
        with MemoryClient.local(str(copy), settings()) as client:
            # A store just opened may answer differently for a while: the pipeline
            # finishes the turns' window vectors left at close (measured on the 20k-turn
            # session: ~2,400 vector updates over ~15 s quiet, longer under load). Compare
            # and time only once two passes `--settle-s` apart return the same items.
            out["settled_s"] = settle(client, asked[:12], args.settle_s)
            for q in asked[:8]:  # warm: caches, the query model, the engine's pages
                client.recall(SESSION, q, limit=20)
            items = {q: _signature(client.recall(SESSION, q, limit=20)) for q in asked}
            # `--cpu`: this thread's CPU time, so a stall (the process stopped, or waiting
            # for a core on a loaded machine) does not count; round trips then count little.
            profile = (cProfile.Profile(time.thread_time) if args.cpu else cProfile.Profile()
                       ) if args.profile else None
            # Wall time, and this thread's CPU time (the hashing embedder keeps recall on
            # the caller's thread): on a loaded machine the CPU time moves far less.
            ms: list[float] = []
            cpu: list[float] = []
            for i in range(args.recalls):
                q = asked[i % len(asked)]
                if profile is not None:
                    profile.enable()
                s, c = time.perf_counter(), time.thread_time()
                client.recall(SESSION, q, limit=20)
                ms.append((time.perf_counter() - s) * 1000)
                cpu.append((time.thread_time() - c) * 1000)
                if profile is not None:
                    profile.disable()
            again = {q: _signature(client.recall(SESSION, q, limit=20)) for q in asked}
            out.update(recall_ms=summarize(ms), ms=ms, cpu_ms=summarize(cpu), cpu=cpu,
                       items=items, stable_items=f"{_same(items, again)}/{len(items)}",
                       load1=round(os.getloadavg()[0], 2))
            if profile is not None:
                profile.dump_stats(args.profile)
                out["breakdown_ms"] = breakdown(args.profile, args.recalls)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out))
    else:
        print(json.dumps({k: v for k, v in out.items() if k not in ("ms", "cpu", "items")},
                         indent=1))
    return out


def breakdown(path: str, recalls: int) -> dict[str, float]:
    """Cumulative ms per recall of each of `COMPONENTS` (summed over same-named functions
    in matching files; a function called recursively counts once)."""
    stats = pstats.Stats(path).stats  # type: ignore[attr-defined]
    out: dict[str, float] = {}
    for name, (suffix, func) in COMPONENTS.items():
        total = sum(ct for (file, _line, fn), (_cc, _nc, _tt, ct, _callers) in stats.items()
                    if fn == func and file.endswith(suffix) and "hivemem" in file)
        out[name] = round(total * 1000 / recalls, 3)
    return out


def ab(args: argparse.Namespace) -> None:
    this = HERE.parent.parent
    trees = {"baseline": Path(args.baseline).resolve(), "this": this}
    runs: dict[str, list[dict[str, Any]]] = {"baseline": [], "this": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for arm in (("baseline", "this") if r % 2 == 0 else ("this", "baseline")):
                doc = Path(tmp) / f"{arm}-{r}.json"
                cmd = [sys.executable, str(HERE / "idle_recall.py"), "run", "--settle-s",
                       str(args.settle_s),
                       "--folder", str(Path(args.folder).resolve()), "--recalls",
                       str(args.recalls), "--queries", str(args.queries), "--json", str(doc)]
                subprocess.run(cmd, env={**os.environ, "PYTHONPATH": str(trees[arm])},
                               cwd=trees[arm], check=True)
                got = json.loads(doc.read_text())
                runs[arm].append(got)
                print(f"round {r} {arm}: p50/p95 {got['recall_ms']['p50']:.1f}/"
                      f"{got['recall_ms']['p95']:.1f} ms, cpu {got['cpu_ms']['p50']:.1f}/"
                      f"{got['cpu_ms']['p95']:.1f} ms (load {got['load1']}), items held"
                      f" {got['stable_items']}", flush=True)
    # Item by item: each run of this tree against the baseline's first, and the
    # baseline's runs against each other (what differs there is not this tree's doing).
    base = runs["baseline"][0]["items"]
    same = min(_same(base, d["items"]) for d in runs["this"])
    base_same = min((_same(base, d["items"]) for d in runs["baseline"][1:]), default=len(base))
    drift = max((abs(a[1] - b[1]) for d in runs["this"] for q in base
                 for a, b in zip(base[q], d["items"][q], strict=False)), default=0.0)
    out: dict[str, Any] = {
        **{k: v for k, v in runs["this"][0].items() if k not in (
            "ms", "cpu", "items", "tree", "recall_ms", "cpu_ms", "load1", "breakdown_ms",
            "stable_items")},
        "items_held_through_each_run": [d["stable_items"] for docs in runs.values()
                                        for d in docs],
        "rounds": args.rounds, "recalls_per_round": args.recalls,
        "baseline_ms": summarize([m for d in runs["baseline"] for m in d["ms"]]),
        "this_ms": summarize([m for d in runs["this"] for m in d["ms"]]),
        "baseline_cpu_ms": summarize([m for d in runs["baseline"] for m in d["cpu"]]),
        "this_cpu_ms": summarize([m for d in runs["this"] for m in d["cpu"]]),
        "per_round": {arm: [d["recall_ms"] for d in docs] for arm, docs in runs.items()},
        "load1": [d["load1"] for docs in runs.values() for d in docs],
        "identical_items": f"{same}/{len(base)}", "max_score_drift": drift,
        "baseline_identical_to_itself": f"{base_same}/{len(base)}",
        "differing": {q: {arm: [d["items"][q] for d in docs] for arm, docs in runs.items()}
                      for q in base if any([i for i, _s in d["items"][q]] != [
                          i for i, _s in base[q]] for docs in runs.values() for d in docs)},
        "machine": machine_facts(),
    }
    name = "idle_recall.json" if out.get("shape") == "turns" else "idle_recall-facts.json"
    Path(args.out or LATEST / name).write_text(json.dumps(out, indent=1))
    print(f"baseline p50/p95 {out['baseline_ms']['p50']:.1f}/{out['baseline_ms']['p95']:.1f}"
          f" ms (cpu {out['baseline_cpu_ms']['p50']:.1f}/{out['baseline_cpu_ms']['p95']:.1f}),"
          f" this {out['this_ms']['p50']:.1f}/{out['this_ms']['p95']:.1f} ms"
          f" (cpu {out['this_cpu_ms']['p50']:.1f}/{out['this_cpu_ms']['p95']:.1f}),"
          f" identical items {out['identical_items']} (baseline runs to each other"
          f" {out['baseline_identical_to_itself']}), max score drift {drift:.2e}")
    if same < base_same:
        raise SystemExit("this tree returned other items than the baseline")


def _same(a: dict[str, list[list[Any]]], b: dict[str, list[list[Any]]]) -> int:
    """Queries whose returned items (source ids, in order) are the same in both runs."""
    return sum([i for i, _s in a[q]] == [i for i, _s in b[q]] for q in a)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="fill one session, reflect, close")
    b.add_argument("--folder", required=True)
    b.add_argument("--turns", type=int, default=20_000)
    b.add_argument("--shape", choices=["turns", "facts"], default="turns")
    st = sub.add_parser("settle", help="open the folder itself until its answers hold")
    st.add_argument("--folder", required=True)
    st.add_argument("--settle-s", type=float, default=10.0)
    for name, helptext in (("run", "time (and profile) idle recall in one tree"),
                           ("ab", "run, baseline tree and this one alternating")):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("--folder", required=True)
        p.add_argument("--recalls", type=int, default=200)
        p.add_argument("--queries", type=int, default=40)
        if name == "run":
            p.add_argument("--profile", default=None, help="cProfile output file")
            p.add_argument("--json", default=None, help="write the whole result here")
            p.add_argument("--settle-s", type=float, default=10.0,
                           help="seconds between the passes that must agree first")
            p.add_argument("--cpu", action="store_true",
                           help="profile this thread's CPU time, not wall time")
        else:
            p.add_argument("--baseline", required=True)
            p.add_argument("--settle-s", type=float, default=10.0)
            p.add_argument("--rounds", type=int, default=4)
            p.add_argument("--out", default=None)
    args = ap.parse_args()
    {"build": build, "settle": settle_in_place, "run": run, "ab": ab}[args.cmd](args)


if __name__ == "__main__":
    main()
