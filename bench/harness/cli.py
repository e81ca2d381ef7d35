"""The command line every goal script shares: `--quick`, `--only SECTION ...`, and one summary
line per section at the end."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

Section = Callable[[argparse.Namespace], dict[str, Any]]


def goal_parser(doc: str, sections: Sequence[str]) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=doc.split("\n\n", maxsplit=1)[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=doc.split("\n\n", 1)[1] if "\n\n" in doc else None)
    ap.add_argument("--quick", action="store_true",
                    help="tiny data, every section's whole path, well under a minute;"
                         " results go to bench/results/quick/")
    ap.add_argument("--only", nargs="+", choices=list(sections), default=None, metavar="SECTION",
                    help=f"run these sections only ({', '.join(sections)})")
    return ap


def run_sections(args: argparse.Namespace, sections: dict[str, Section],
                 summary: Callable[[str, dict[str, Any]], str]) -> int:
    """Run the chosen sections in order; print one line per section; exit code 0."""
    lines = []
    for name, section in sections.items():
        if args.only and name not in args.only:
            continue
        t0 = time.perf_counter()
        print(f"== {name}", flush=True)
        result = section(args)
        lines.append(f"{name}: {summary(name, result)} ({time.perf_counter() - t0:.0f} s)")
    print("\n".join(["", *lines]), flush=True)
    sys.stdout.flush()
    return 0
