"""Bad-input fuzzing in benchmark mode: the property tests of tests/unit/test_fuzz.py with
many examples each (default 10000), counting what every call came back with.

    python bench/fuzz.py [--examples 10000] [--only EXPR] [--out bench/results/fuzz.json]

`--only` picks properties by pytest ``-k`` expression (e.g. ``held`` for the store property:
accepted turns written to both vector stores, read back, and read back after edge reopens).

Writes the counts per outcome (accepted, refused per field, HTTP status per endpoint), the
examples run per property, failures (must be 0) and the wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--examples", type=int, default=10_000, help="examples per property")
    ap.add_argument("--only", default=None, help="pytest -k expression: these properties only")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "fuzz.json")
    args = ap.parse_args()
    os.environ["HIVEMEM_FUZZ_EXAMPLES"] = str(args.examples)
    os.chdir(REPO)
    sys.path.insert(0, str(REPO))
    import pytest

    class Collect:
        def __init__(self) -> None:
            self.results: dict[str, str] = {}

        def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
            if report.when == "call" or report.outcome != "passed":
                self.results[report.nodeid.split("::")[-1]] = report.outcome

    collect = Collect()
    started = time.perf_counter()
    select = ["-k", args.only] if args.only else []
    code = pytest.main(["tests/unit/test_fuzz.py", "-q", "-p", "no:logging", "-p",
                        "no:cacheprovider", "--timeout=0", *select], plugins=[collect])
    wall = time.perf_counter() - started
    module = next(m for name, m in sys.modules.items() if name.endswith("test_fuzz"))
    outcomes = dict(sorted(module.OUTCOMES.items()))
    report = {
        "examples_per_property": args.examples,
        "only": args.only,
        "properties": collect.results,
        "failed": sum(1 for v in collect.results.values() if v != "passed"),
        "calls": sum(outcomes.values()),
        "outcomes": outcomes,
        "http_5xx": sum(v for k, v in outcomes.items() if k.startswith("api.")
                        and k.rsplit(".", 1)[1].startswith("5")),
        "wall_s": round(wall, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "outcomes"}, indent=2))
    return int(code)


if __name__ == "__main__":
    raise SystemExit(main())
