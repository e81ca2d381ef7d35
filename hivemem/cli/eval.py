"""`hivemem eval`: run the scenario suites on a fresh embedded memory and report."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from hivemem import __version__
from hivemem.cli.output import plain, stderr, stdout
from hivemem.cli.target import local_settings
from hivemem.config import Settings
from hivemem.errors import HivememError
from hivemem.evaluation.change import (
    CATEGORIES,
    MODES,
    PARTS,
    ChangeConversation,
    ChangeProbeResult,
    markdown_table,
    run_record,
    score,
)
from hivemem.evaluation.change_parts import load_part, part_shipped
from hivemem.evaluation.change_runner import DEFAULT_BUDGET as CHANGE_BUDGET
from hivemem.evaluation.change_runner import run_change_suite
from hivemem.evaluation.report import EvalReport, build_report, markdown
from hivemem.evaluation.runner import ProbeResult, run_suite
from hivemem.evaluation.scenarios import SCENARIOS, Conversation, Suite, build_suite
from hivemem.logs import configure_logging
from hivemem.producer.client import MemoryClient

DEFAULT_TURNS = "10,20,40,80"


def parse_turns(raw: str) -> list[int]:
    try:
        turns = [int(x) for x in raw.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter("a comma-separated list of even numbers, e.g. 10,20,40",
                                 param_hint="--turns") from None
    if not turns or any(n < 10 or n % 2 for n in turns):
        raise click.BadParameter("every turn count must be even and at least 10",
                                 param_hint="--turns")
    return turns


def reflector_name(settings: Settings) -> str:
    llm = settings.llm
    return f"llm:{llm.provider}:{llm.model}" if llm else "heuristic"


def _hit_table(report: EvalReport) -> Table:
    summary = report.summaries[0]
    table = Table(title=f"hit rate (budget {report.token_budget} tokens, "
                        f"reflector {summary.reflector})")
    table.add_column("scenario")
    for n in report.turn_counts:
        table.add_column(f"{n} turns", justify="right")
    for scenario in report.scenarios:
        row = []
        for n in report.turn_counts:
            rate = summary.cells.get(scenario, {}).get(str(n))
            row.append("-" if rate is None or rate.rate is None
                       else f"{100 * rate.rate:.0f}% ({rate.hits}/{rate.probes})")
        table.add_row(scenario, *row)
    return table


def _latency_table(report: EvalReport) -> Table:
    table = Table(title="latency (ms)")
    for column in ("stage", "p50", "p95", "n"):
        table.add_column(column, justify="right" if column != "stage" else "left")
    for stage, p in report.summaries[0].latency_ms.items():
        table.add_row(stage, str(p["p50"]), str(p["p95"]), str(int(p["n"] or 0)))
    return table


@click.command("eval")
@click.option("--suite", type=click.Choice(["scenarios", "change"]), default="scenarios",
              show_default=True,
              help="scenarios: planted values in generated conversations; change: the "
                   "hand-written conversations where something changes (memory that stays "
                   "current), judged strict and ranked per change rule.")
@click.option("--mode", type=click.Choice([*MODES, "both"]), default="both", show_default=True,
              help="change suite: reflected (close, wait for reflection, ask at the end), "
                   "live (ask each probe at its turn, no close), or both.")
@click.option("--part", type=click.Choice([*PARTS, "all"]), default="all", show_default=True,
              help="change suite: tuning, heldout (a third held out, scores only), legacy "
                   "(the v1 conversations), or all the parts shipped.")
@click.option("--scenario", "scenarios", multiple=True,
              help="Scenario to run (repeatable or comma-separated; default: all).")
@click.option("--turns", default=DEFAULT_TURNS, show_default=True,
              help="Conversation lengths, comma-separated.")
@click.option("--iterations", type=click.IntRange(1, 1000), default=3, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--budget", type=click.IntRange(min=1), default=None,
              help="Token budget of each probe's recall (default: 200 for scenarios, 300 for "
                   "change).")
@click.option("--quick", is_flag=True, help="Sanity check: 10 turns, 1 iteration.")
@click.option("--list-scenarios", is_flag=True, help="List the scenarios and exit.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write eval.json and eval.md into this folder.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--timeout", type=float, default=120.0, show_default=True,
              help="Seconds to wait for the pipeline per conversation.")
@click.pass_context
def eval_cmd(
    ctx: click.Context, suite: str, mode: str, part: str, scenarios: tuple[str, ...],
    turns: str, iterations: int,
    seed: int, budget: int | None, quick: bool, list_scenarios: bool, out: Path | None,
    as_json: bool, timeout: float,
) -> None:
    """Plant information in generated conversations, probe recall for it later, report.

    Runs on a fresh embedded memory in a temporary folder, with the configured embedder
    (the workspace's, in a workspace) and reflector (the heuristic one unless HIVEMEM_LLM__*
    configures an LLM).
    """
    settings: Settings = local_settings(ctx.obj["settings"])
    if suite == "change":
        if ctx.obj.get("log_level") is None:
            configure_logging("warning", settings.log_json)
        modes = list(MODES) if mode == "both" else [mode]
        parts = [p for p in PARTS if part_shipped(p)] if part == "all" else [part]
        _change(settings, budget or CHANGE_BUDGET, timeout, out, as_json, modes, parts)
        return
    budget = budget or 200
    if list_scenarios:
        if as_json:
            click.echo(json.dumps({n: s.description for n, s in SCENARIOS.items()}, indent=2))
        else:
            for name, spec in SCENARIOS.items():
                stdout().print(f"[bold]{name}[/]  {spec.description}")
        return
    names = [n.strip() for raw in scenarios for n in raw.split(",") if n.strip()]
    names = names or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise click.BadParameter(f"unknown {', '.join(unknown)}; known: "
                                 f"{', '.join(SCENARIOS)}", param_hint="--scenario")
    turn_counts = [10] if quick else parse_turns(turns)
    generated = build_suite(names, turn_counts, 1 if quick else iterations, seed)
    if ctx.obj.get("log_level") is None:
        configure_logging("warning", settings.log_json)
    report = _run(settings, generated, budget, timeout)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "eval.json").write_text(report.model_dump_json(indent=2) + "\n",
                                       encoding="utf-8")
        (out / "eval.md").write_text(markdown(report), encoding="utf-8")
    if as_json:
        click.echo(report.model_dump_json(indent=2))
        return
    console = stdout()
    console.print(_hit_table(report))
    console.print(_latency_table(report))
    overall = report.summaries[0].overall
    console.print(plain(f"overall {overall.hits}/{overall.probes} probes hit"
                        + (f"; wrote {out / 'eval.json'} and {out / 'eval.md'}" if out else "")))


def _progress() -> Progress:
    """A bar per conversation on stderr (stdout stays the report)."""
    return Progress(
        TextColumn("[progress.description]{task.description}"), BarColumn(),
        MofNCompleteColumn(), TimeElapsedColumn(), console=stderr(), transient=True,
    )


def _run(settings: Settings, suite: Suite, budget: int, timeout: float) -> EvalReport:
    folder = Path(tempfile.mkdtemp(prefix="hivemem-eval-"))
    progress = _progress()
    try:
        with progress:
            task = progress.add_task("loading the embedder...", total=len(suite.conversations))
            try:
                client = MemoryClient.local(folder, settings)
            except HivememError as exc:
                raise click.ClickException(str(exc)) from None

            def done(conversation: Conversation, results: list[ProbeResult]) -> None:
                progress.update(task, advance=1, description=(
                    f"{conversation.scenario} {conversation.turns_target} turns"))

            progress.update(task, description="running")
            try:
                run = run_suite(client, suite, budget, reflector=reflector_name(settings),
                                version=__version__, on_done=done, timeout=timeout)
            except HivememError as exc:
                raise click.ClickException(str(exc)) from None
            finally:
                client.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return build_report(suite, budget, [run])


def _change(settings: Settings, budget: int, timeout: float, out: Path | None,
            as_json: bool, modes: list[str], parts: list[str]) -> None:
    """The change suite on a fresh embedded memory per part and mode: strict and ranked per
    change rule."""
    try:
        suites = {p: load_part(p) for p in parts}
    except FileNotFoundError as exc:
        raise click.ClickException(str(exc)) from None
    runs = []
    progress = _progress()
    with progress:
        total = sum(len(s.conversations) for s in suites.values()) * len(modes)
        task = progress.add_task("loading the embedder...", total=total)

        def done(conversation: ChangeConversation, _results: list[ChangeProbeResult]) -> None:
            progress.update(task, advance=1, description=conversation.id)

        for part, suite in suites.items():
            for mode in modes:
                try:
                    runs.append(run_change_suite(
                        settings, token_budget=budget, suite=suite,
                        reflector_name=reflector_name(settings), on_done=done,
                        timeout=timeout, mode=mode, part=part))
                except HivememError as exc:
                    raise click.ClickException(str(exc)) from None
    results = [score(run) for run in runs]
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "change.json").write_text(
            json.dumps({"scores": [r.model_dump() for r in results],
                        "runs": [run_record(run) for run in runs]}, indent=2) + "\n",
            encoding="utf-8")
        (out / "change.md").write_text(markdown_table(results) + "\n", encoding="utf-8")
    if as_json:
        click.echo(json.dumps([r.model_dump() for r in results], indent=2))
        return
    table = Table(title=f"change suite (budget {budget} tokens, reflector "
                        f"{reflector_name(settings)}; strict/ranked of probes)")
    table.add_column("category")
    for result in results:
        table.add_column(f"{result.mode} {result.part}", justify="right")
    categories = [c for c in CATEGORIES if any(c in r.categories for r in results)]
    for name in [*categories, "overall"]:
        cells = [r.overall if name == "overall" else r.categories.get(name) for r in results]
        table.add_row(name, *("-" if c is None else f"{c.strict}/{c.ranked} of {c.probes}"
                              for c in cells))
    stdout().print(table)
    for result in results:
        strict = result.overall.strict_rate or 0.0
        ranked = result.overall.ranked_rate or 0.0
        stdout().print(plain(f"{result.mode} {result.part}: overall strict {100 * strict:.0f}%,"
                             f" ranked {100 * ranked:.0f}%"))
    if out:
        stdout().print(plain(f"wrote {out / 'change.json'} and {out / 'change.md'}"))
