"""Hit rates per scenario x turn count and latency percentiles, as JSON and Markdown."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from hivemem.evaluation.runner import SystemRun
from hivemem.evaluation.runs import RunInfo
from hivemem.evaluation.scenarios import SCENARIOS, Suite

HIT_DEFINITION = (
    "A probe is a hit when recall for its question, within the token budget, returns an "
    "item containing the planted value (whole words, case-insensitive); for progressive "
    "requirements the latest value must be there and no item that mentions only an older "
    "value may rank above it. Probes are never ingested."
)


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return round(ordered[min(rank, len(ordered)) - 1], 3)


class Rate(BaseModel):
    hits: int = 0
    probes: int = 0
    top1: int = 0
    top3: int = 0

    @property
    def rate(self) -> float | None:
        return self.hits / self.probes if self.probes else None


class SystemSummary(RunInfo):
    overall: Rate
    # scenario -> str(turns) -> Rate
    cells: dict[str, dict[str, Rate]] = Field(default_factory=dict)
    latency_ms: dict[str, dict[str, float | None]] = Field(default_factory=dict)
    facts_per_conversation: float | None = None


class EvalReport(BaseModel):
    format: str = "hivemem.eval"
    version: int = 1
    hit_definition: str = HIT_DEFINITION
    scenarios: list[str]
    turn_counts: list[int]
    iterations: int
    seed: int
    token_budget: int
    summaries: list[SystemSummary]
    runs: list[SystemRun]
    extra: dict[str, Any] = Field(default_factory=dict)


def _p(values: Sequence[float]) -> dict[str, float | None]:
    return {"p50": percentile(values, 50), "p95": percentile(values, 95),
            "n": float(len(values))}


def summarize(run: SystemRun) -> SystemSummary:
    cells: dict[str, dict[str, Rate]] = defaultdict(dict)
    overall = Rate()
    for p in run.probes:
        cell = cells[p.scenario].setdefault(str(p.turns), Rate())
        for rate in (cell, overall):
            rate.probes += 1
            rate.hits += p.hit
            rate.top1 += p.hit and p.rank == 1
            rate.top3 += p.hit and p.rank is not None and p.rank <= 3
    timings = run.conversations
    latency = {
        "ingest": _p([ms for c in timings for ms in c.ingest_ms]),
        "recall": _p([p.recall_ms for p in run.probes]),
        "embed_lag": _p([c.embed_lag_ms for c in timings if c.embed_lag_ms is not None]),
        "boundary_lag": _p([c.boundary_lag_ms for c in timings
                            if c.boundary_lag_ms is not None]),
        "reflect_lag": _p([c.reflect_lag_ms for c in timings if c.reflect_lag_ms is not None]),
    }
    facts = [c.facts for c in timings if c.facts is not None]
    return SystemSummary(
        **run.model_dump(include=set(RunInfo.model_fields)), overall=overall, cells=dict(cells),
        latency_ms={k: v for k, v in latency.items() if v["n"]},
        facts_per_conversation=round(sum(facts) / len(facts), 2) if facts else None,
    )


def build_report(suite: Suite, token_budget: int, runs: Sequence[SystemRun],
                 extra: dict[str, Any] | None = None) -> EvalReport:
    return EvalReport(
        scenarios=suite.scenarios, turn_counts=suite.turn_counts, iterations=suite.iterations,
        seed=suite.seed, token_budget=token_budget, summaries=[summarize(r) for r in runs],
        runs=list(runs), extra=extra or {},
    )


def _pct(rate: Rate | None) -> str:
    if rate is None or rate.rate is None:
        return "-"
    return f"{100 * rate.rate:.0f}%"


def markdown(report: EvalReport) -> str:
    systems = report.summaries
    names = " / ".join(s.system for s in systems)
    lines = [
        "# hivemem eval",
        "",
        f"Scenarios {', '.join(report.scenarios)}; turns {report.turn_counts}; "
        f"{report.iterations} iteration(s), seed {report.seed}; token budget "
        f"{report.token_budget}.",
        "",
        HIT_DEFINITION,
        "",
    ]
    for s in systems:
        lines.append(f"- **{s.system}** {s.version}, reflector: {s.reflector}"
                     + (f", {s.facts_per_conversation} facts per conversation"
                        if s.facts_per_conversation is not None else ""))
    lines += ["", f"## Hit rate ({names})", ""]
    header = "| scenario | " + " | ".join(f"{n} turns" for n in report.turn_counts) + " |"
    lines += [header, "|---|" + "---|" * len(report.turn_counts)]
    for scenario in report.scenarios:
        cells = [" / ".join(_pct(s.cells.get(scenario, {}).get(str(n))) for s in systems)
                 for n in report.turn_counts]
        lines.append(f"| {scenario} | " + " | ".join(cells) + " |")
    overall = " / ".join(f"{_pct(s.overall)} ({s.overall.hits}/{s.overall.probes})"
                         for s in systems)
    lines += [f"| **all** | {overall} |" + " |" * (len(report.turn_counts) - 1), ""]
    lines += ["Ranked first among the returned items (top-1): "
              + ", ".join(f"{s.system} {100 * s.overall.top1 / max(s.overall.probes, 1):.0f}%"
                          for s in systems)
              + "; within the top 3: "
              + ", ".join(f"{s.system} {100 * s.overall.top3 / max(s.overall.probes, 1):.0f}%"
                          for s in systems) + ".", ""]
    lines += ["## Latency (ms)", "", "| system | stage | p50 | p95 | n |", "|---|---|---|---|---|"]
    for s in systems:
        for stage, p in s.latency_ms.items():
            lines.append(f"| {s.system} | {stage} | {p['p50']} | {p['p95']} | {int(p['n'] or 0)} |")
    lines += ["", "ingest: per turn; recall: per probe; *_lag: from the last ingest of a "
              "conversation until every turn is embedded / assigned to an episode / every "
              "closed episode is reflected.", ""]
    descriptions = [f"- `{n}`: {SCENARIOS[n].description}" for n in report.scenarios
                    if n in SCENARIOS]
    return "\n".join([*lines, "## Scenarios", "", *descriptions, ""])
