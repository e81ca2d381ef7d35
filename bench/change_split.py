#!/usr/bin/env python
"""Split the written change conversations into the suite's tuning and held-out parts.

    python bench/change_split.py [SOURCE.json ...] [--checker CHECK.py]
                                 [--out-dir hivemem/evaluation/data]
    -> change_live.json (tuning) + change_heldout.json (held out)

Sources default to bench/data/change/suite_{a,b,c,d}.json, one file per writer, each written
blind from the brief in bench/data/change/SPEC.md (writers a and b on 2026-12-05, writers c
and d on 2026-12-07: their conversations' ids start with "c-" and "d-"). Each source must pass hivemem's
parser, and the writers' checker when one is given (its last line "OK"); then, in each source, the conversation at 0-based index i is held out when
i % 3 == 2 (`hivemem.evaluation.change_parts.is_heldout`) and the rest is tuning. Nothing is
written unless every source passes. Rerun it whenever the sources change: the rule is
positional and fixed, so the same sources always give the same parts.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from hivemem.evaluation.change import parse_suite
from hivemem.evaluation.change_parts import PART_FILES, part_document, split_heldout

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [ROOT / "bench" / "data" / "change" / f"suite_{w}.json" for w in "abcd"]


def check(source: Path, checker: Path) -> str | None:
    """None when the checker passes the file, else what it printed."""
    done = subprocess.run([sys.executable, str(checker), str(source)], capture_output=True,
                          text=True, check=False)
    lines = done.stdout.strip().splitlines()
    if done.returncode == 0 and lines and lines[-1] == "OK":
        return None
    return (done.stdout + done.stderr).strip() or f"exit {done.returncode}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sources", nargs="*", type=Path, default=SOURCES)
    ap.add_argument("--checker", type=Path, default=None)
    ap.add_argument("--out-dir", type=Path, default=ROOT / "hivemem" / "evaluation" / "data")
    args = ap.parse_args()
    missing = [str(s) for s in args.sources if not s.is_file()]
    if missing:
        print(f"not there (yet): {', '.join(missing)}; nothing written", file=sys.stderr)
        return 1
    if args.checker is not None and not args.checker.is_file():
        print(f"checker {args.checker} not found; nothing written", file=sys.stderr)
        return 1
    docs = []
    for source in args.sources:
        problem = None if args.checker is None else check(source, args.checker)
        if problem is not None:
            print(f"{source} does not pass {args.checker}; nothing written:\n{problem}",
                  file=sys.stderr)
            return 1
        docs.append(json.loads(source.read_text(encoding="utf-8")))
    tuning, heldout = split_heldout(docs)
    names = [s.name for s in args.sources]
    parts = {"tuning": part_document("tuning", tuning, names),
             "heldout": part_document("heldout", heldout, names)}
    # Both parts together must parse too (ids unique across the sources, hivemem's schema).
    try:
        parse_suite({"version": 2, "conversations": tuning + heldout})
    except ValueError as exc:
        print(f"hivemem's parser refuses the sources; nothing written:\n{exc}", file=sys.stderr)
        return 1
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for part, doc in parts.items():
        path = args.out_dir / PART_FILES[part]
        path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        probes = sum(len(c["probes"]) for c in doc["conversations"])
        print(f"{part}: {len(doc['conversations'])} conversations, {probes} probes -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
