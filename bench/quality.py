#!/usr/bin/env python
"""Quality: does recall return what the question needs?

    python bench/quality.py            # LoCoMo (5 conversations, all systems), scenarios, change
    python bench/quality.py --quick    # one LoCoMo conversation, two scenarios; no references
    python bench/quality.py --only locomo --skip-reference

Sections (each saves bench/results/latest/<name>.json + .md; --quick: results/quick/):
- locomo: LoCoMo evidence recall@k and within token budgets; hivemem vs BM25 / dense / RRF
  baselines and the reference systems (bench/suites/locomo.py; adapters in bench/adapters/).
- scenarios: the generated scenario eval (`hivemem.evaluation`), hivemem vs gleanr
  (bench/suites/scenarios.py) -> eval.json.
- change: the change suite, bench/change.py run as it is (full runs only; it has no quick mode
  yet). TODO(lead): fold bench/change.py into suites/ once its owner has merged.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import BENCH, LATEST, archive_latest, offline_model_env
from harness.cli import goal_parser, run_sections
from suites import locomo, scenarios


def change(args: argparse.Namespace) -> dict[str, Any]:
    if args.quick:
        print("change: skipped in --quick (bench/change.py has no quick mode yet)")
        return {"skipped": "quick"}
    if args.skip_reference:
        print("change: bench/change.py always runs the references; running it anyway")
    with tempfile.TemporaryDirectory(prefix="hivemem-change-") as tmp:
        code = subprocess.run([sys.executable, str(BENCH / "change.py"), "--out", tmp],
                              check=False).returncode
        if code == 0:  # only a finished run replaces latest/change.* (the old one archived)
            archive_latest("change")
            for path in Path(tmp).iterdir():
                shutil.copy2(path, LATEST / path.name)
    return {"exit": code}


def summary(name: str, result: dict[str, Any]) -> str:
    if name == "locomo":
        hm = result["systems"]["hivemem"]["overall"]
        r = hm.get("recall@k") or {k: v for k, v in hm.items() if k.startswith("R@")}
        after = result["run_info"].get("hivemem", {}).get("right_after")
        return (f"hivemem on {result['dataset']['questions_scored']} questions: "
                + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                            for k, v in list(r.items())[:4])
                + ("" if after is None else "; right after wait_until_processed: "
                   + ", ".join(f"{k} {v:.3f}" for k, v in after["overall"].items()
                               if k.startswith("R@"))))
    if name == "scenarios":
        return ", ".join(f"{s['system']} {s['overall']['hits']}/{s['overall']['probes']} probes hit"
                         for s in result["summaries"])
    return ", ".join(f"{k} {v}" for k, v in result.items())


def main() -> int:
    ap = goal_parser(__doc__, ["locomo", "scenarios", "change"])
    locomo.add_arguments(ap)  # also --skip-reference and the reference venvs' pythons
    scenarios.add_arguments(ap)
    args = ap.parse_args()
    offline_model_env()
    return run_sections(args, {"locomo": locomo.run, "scenarios": scenarios.run,
                               "change": change}, summary)


if __name__ == "__main__":
    raise SystemExit(main())
