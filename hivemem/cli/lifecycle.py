"""Memory-lifecycle commands: `hivemem compact`, `timeline`, `audit`, `session`, `export`,
`import`, `backup`, `restore`.

They run where the workspace commands run (a workspace, `--local`, or a deployment: see
`hivemem.cli.target`) and take the session as every command does (`--session/-s`, see
`hivemem.cli.session_args`). Every command takes `--json`; bad input exits with code 2
before anything is written, an unknown session or fact with code 1.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import click
from rich.table import Table
from rich.text import Text

from hivemem.cli.fact_ids import resolve_fact_id, short
from hivemem.cli.output import cells, emit_json, id_param, plain, progress_bar, stdout
from hivemem.cli.session_args import (
    legacy_sessions,
    pick_session,
    pick_sessions,
    require_session,
    session_option,
    sessions_option,
)
from hivemem.cli.target import Target, opened, with_target
from hivemem.errors import ValidationError
from hivemem.transfer.manifest import validate_file

IMPORT_MODES = ("append", "replace", "skip_existing", "overwrite")


# -- compact --------------------------------------------------------------------------------


@click.command()
@session_option()
@legacy_sessions()
@click.option("--preview", is_flag=True, help="Show the diff without changing anything.")
@click.option("--max-active", type=click.IntRange(1), default=None,
              help="Cap on active facts (default: compaction.max_active_facts).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@with_target
def compact(target: Target, session: str | None, legacy: str | None, preview: bool,
            max_active: int | None, as_json: bool) -> None:
    """Merge duplicates, archive stale facts, enforce the cap, move facts between layers."""
    session_id = target.default_session(pick_session("compact", legacy, session))
    policy = target.settings.compaction.policy()
    if max_active is not None:
        policy = policy.model_copy(update={"max_active_facts": max_active})
    with opened(target, read_only=preview) as client:
        require_session(client, session_id)
        diff = (client.admin.preview_compaction(session_id, policy=policy) if preview
                else client.admin.compact(session_id, policy=policy))
    if as_json:
        emit_json({"preview": preview, **diff.model_dump(mode="json")})
        return
    console = stdout()
    verb = "would change" if preview else "changed"
    console.print(plain(f"{session_id}: {diff.active_before} -> {diff.active_after} active"
                        f" facts; {verb} {diff.changes} (run {diff.run_id})"))
    table = Table(expand=True)
    for column in ("action", "fact", "layer", "why", "content"):
        table.add_column(column, ratio=3 if column in ("why", "content") else None)
    sections = (("merged", diff.merged), ("archived", diff.archived),
                ("promoted", diff.promoted), ("demoted", diff.demoted))
    for action, entries in sections:
        for e in entries:
            why = e.reason + (f" -> {e.into}" if e.into else "")
            table.add_row(*cells(action, short(e.fact_id), f"{e.from_layer} -> {e.to_layer}",
                                 why, e.content))
    if table.row_count:
        console.print(table)
    console.print(f"kept {len(diff.kept)} (--json lists each with its reason)")


# -- audit ----------------------------------------------------------------------------------


@click.command()
@click.argument("fact_id", callback=id_param("fact_id", "FACT_ID"))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@with_target
def audit(target: Target, fact_id: str, as_json: bool) -> None:
    """Why a fact (its id, or the 12-character prefix `facts`, `recent` and `recall` print)
    has its status: every change to it, who made it, when and why."""
    with opened(target, read_only=True) as client:
        fact_id = resolve_fact_id(client, fact_id)
        # Only the fact's own events: another fact's event that names it (merged into
        # it, its rival) is that fact's story, listed by its own audit.
        events = [e for e in client.admin.audit(fact_id) if e.fact_id == fact_id]
        fact = client.admin.get_fact(fact_id)
    if as_json:
        emit_json({"fact": fact.model_dump(mode="json") if fact else None,
                   "events": [e.model_dump(mode="json") for e in events]})
        return
    console = stdout()
    if fact is not None:
        console.print(plain(f"{fact_id} ({fact.kind.value}, session {fact.session_id}):"
                            f" {fact.status.value}, layer {fact.layer}"
                            + (f" - {fact.reason}" if fact.reason else "")))
        console.print(Text(fact.content))
    table = Table(title="audit log", expand=True)
    for column in ("#", "when", "action", "change", "by", "why"):
        table.add_column(column, ratio=3 if column == "why" else None)
    for e in events:
        change = (f"{e.from_status or 'new'} -> {e.to_status}" if e.from_status != e.to_status
                  else f"{e.from_layer} -> {e.to_layer}")
        table.add_row(*cells(e.seq, f"{e.at:%Y-%m-%d %H:%M:%S}", e.action, change,
                             f"{e.actor} ({e.cause})", e.reason + (
                                 f" [{', '.join(short(r) for r in e.related)}]"
                                 if e.related else "")))
    console.print(table if events else "no audit events for this fact")


# -- sessions and timelines -----------------------------------------------------------------


@click.command()
@session_option()
@legacy_sessions()
@click.option("--title", default=None, help="Set the session's title.")
@click.option("--agent", default=None, help="Set the session's agent.")
@click.option("--related", type=click.IntRange(0, 100), default=5, show_default=True,
              help="How many related sessions to list.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@with_target
def session(target: Target, session: str | None, legacy: str | None, title: str | None,
            agent: str | None, related: int, as_json: bool) -> None:
    """Show (or, with --title/--agent, set) a session's metadata and its related sessions."""
    session_id = target.default_session(pick_session("session", legacy, session))
    setting = title is not None or agent is not None
    with opened(target, read_only=not setting) as client:
        if setting:
            info = client.admin.set_session_info(session_id, title=title, agent_id=agent)
        else:
            info = client.admin.session_info(session_id)
        others = (client.admin.related_sessions(session_id, limit=related)
                  if related else [])
    if as_json:
        emit_json({**info.model_dump(mode="json"),
                   "related": [r.model_dump(mode="json") for r in others]})
        return
    console = stdout()
    console.print(Text(info.header()))
    console.print(f"{info.turns} turns, {info.episodes} episodes, {info.facts_active} active"
                  " facts")
    if others:
        table = Table(title="related sessions")
        for column in ("session", "score", "similarity", "shared subjects"):
            table.add_column(column)
        for r in others:
            table.add_row(*cells(r.session_id, f"{r.score:.3f}", f"{r.similarity:.3f}",
                                 ", ".join(r.shared_subjects)))
        console.print(table)


@click.command()
@sessions_option("A session (repeatable; default: the workspace's default session, else"
                 " `default`).")
@legacy_sessions(nargs=-1)
@click.option("--kind", "kinds", multiple=True, type=click.Choice(["turn", "episode", "fact"]),
              help="Only these kinds of event (repeatable).")
@click.option("--limit", type=click.IntRange(1), default=None, help="Only the newest N events.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@with_target
def timeline(target: Target, sessions: tuple[str, ...], legacy: tuple[str, ...],
             kinds: tuple[str, ...], limit: int | None, as_json: bool) -> None:
    """Turns, episode closes and fact changes of the sessions, in time order (a fact's
    event shows its id for `hivemem audit`)."""
    session_ids = pick_sessions("timeline", legacy, sessions) or [target.default_session()]
    with opened(target, read_only=True) as client:
        require_session(client, *session_ids)
        events = client.admin.timeline(session_ids, kinds=list(kinds) or None,
                                             limit=limit)
    if as_json:
        emit_json([e.model_dump(mode="json") for e in events])
        return
    table = Table(title=plain(f"timeline of {', '.join(session_ids)}"), expand=True)
    for column in ("when", "session", "seq", "kind", "id", "who", "what"):
        table.add_column(column, ratio=4 if column == "what" else None,
                         no_wrap=column == "id")
    for e in events:
        ref = short(e.ref_id) if e.kind == "fact" and e.ref_id else ""
        table.add_row(*cells(f"{e.at:%Y-%m-%d %H:%M:%S}", e.session_id, e.seq, e.kind, ref,
                             e.actor, e.summary))
    stdout().print(table)


# -- export / import / backup / restore -----------------------------------------------------


def _export(target: Target, path: Path, sessions: list[str] | None, vectors: bool,
            as_json: bool) -> None:
    with opened(target, read_only=True) as client:
        if sessions:
            require_session(client, *sessions)
        total = client.admin.count_export_records(sessions) if not as_json else None
        with progress_bar(f"exporting to {path.name}", total, as_json) as advance:
            summary = client.admin.export(path, sessions, vectors=vectors, progress=advance)
    if as_json:
        emit_json(summary.model_dump(mode="json"))
        return
    stdout().print(plain(f"exported {len(summary.sessions)} session(s) to {summary.path}:"
                         f" {_counts(summary.counts)} ({summary.bytes / 1e6:.1f} MB"
                         f"{', with vectors' if summary.vectors else ''})"))


def _import(target: Target, path: Path, mode: str, as_json: bool, verb: str) -> None:
    try:
        # Checked before any store is opened: a bad file changes nothing.
        manifest = validate_file(path)
    except ValidationError as exc:
        raise click.ClickException(f"{path}: {exc}") from None
    with opened(target) as client:
        try:
            with progress_bar(f"{verb} {path.name}", manifest.records, as_json) as advance:
                summary = client.admin.import_file(path, mode=mode, progress=advance)
        except ValidationError as exc:
            raise click.ClickException(f"{path}: {exc}") from None
    if as_json:
        emit_json(summary.model_dump(mode="json"))
        return
    renamed = {k: v for k, v in summary.sessions.items() if k != v}
    stdout().print(plain(f"{verb} {len(summary.sessions)} session(s) ({summary.mode}):"
                         f" {_counts(summary.written)}"
                         + (f"; skipped {_counts(summary.skipped)}" if summary.skipped else "")
                         + (f"; renamed {renamed}" if renamed else "")))


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {kind}s" for kind, n in counts.items() if n) or "nothing"


@click.command("export")
@sessions_option("A session to export (repeatable; default: every session).")
@legacy_sessions(nargs=-1)
@click.option("--out", "-o", "path", type=click.Path(dir_okay=False, path_type=Path),
              required=True, help="File to write (.jsonl, or .jsonl.gz compressed).")
@click.option("--vectors", is_flag=True, help="Include the vectors (no re-embedding on import).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@with_target
def export_cmd(target: Target, sessions: tuple[str, ...], legacy: tuple[str, ...], path: Path,
               vectors: bool, as_json: bool) -> None:
    """Export the sessions (default: every session) as versioned JSON Lines."""
    ids = pick_sessions("export", legacy, sessions) or None
    _export(target, path, ids, vectors, as_json)


@click.command("import")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--mode", type=click.Choice(IMPORT_MODES), default="append", show_default=True,
              help="append: add (renaming taken sessions); replace: the file's version of each"
                   " session wins entirely; skip_existing / overwrite: record by record.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@with_target
def import_cmd(target: Target, path: Path, mode: str, as_json: bool) -> None:
    """Import an export file (validated whole before anything is written)."""
    _import(target, path, mode, as_json, "imported")


@click.command()
@click.argument("path", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@with_target
def backup(target: Target, path: Path | None, as_json: bool) -> None:
    """Every session with its vectors, to PATH (default: hivemem-backup-<UTC time>.jsonl.gz)."""
    path = path or Path(f"hivemem-backup-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.jsonl.gz")
    _export(target, path, None, True, as_json)


@click.command()
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--mode", type=click.Choice(IMPORT_MODES), default="replace", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@with_target
def restore(target: Target, path: Path, mode: str, as_json: bool) -> None:
    """Restore a backup: each of its sessions replaces the store's version."""
    _import(target, path, mode, as_json, "restored")


COMMANDS: tuple[click.Command, ...] = (
    compact, audit, session, timeline, export_cmd, import_cmd, backup, restore,
)

