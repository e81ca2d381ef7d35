"""The CLI prints stored text verbatim (no rich markup: ``a[i] = b[i] * 2`` keeps its
brackets, a stored ``[/]`` crashes nothing), takes fact ids in the short form its tables
print, and `audit` shows only the asked fact's events."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from rich.text import Text
from support.cli_env import isolate

from hivemem import MemoryClient, Settings
from hivemem.cli.main import cli
from hivemem.cli.output import cells
from hivemem.domain.audit import AuditEvent
from hivemem.domain.fact import Fact, FactKind
from hivemem.providers.embedders import HashingEmbedder
from hivemem.store.audit import AuditLog

CODE = "a[i] = b[i] * 2"
CLOSER = "the tag [/] closes nothing, [bold]nor[/bold] this"
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
# Two facts sharing their first 12 characters, and one more.
F_ONE = "abcdef012345" + "0" * 19 + "1"
F_TWO = "abcdef012345" + "0" * 19 + "2"
F_CODE = "0123456789ab" + "c" * 20
ENV = {"HIVEMEM_EMBEDDING__PROVIDER": "hashing", "HIVEMEM_EMBEDDING__DIM": "256",
       "HIVEMEM_WORKER__BLOCK_MS": "50"}


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    isolate(monkeypatch, tmp_path, ENV)
    folder = tmp_path / "store"
    client = MemoryClient.local(folder, Settings(), embedder=HashingEmbedder(256))
    try:
        for i, text in enumerate((CODE, CLOSER, "[red]not red[/red] at all")):
            client.ingest("s1", "user", text, turn_id=f"t{i}",
                          timestamp=T0 + timedelta(minutes=i))
        client.wait_until_processed("s1", 20)
        facts = [
            Fact(fact_id=F_CODE, session_id="s1", content=CODE, subject="opts[i]",
                 kind=FactKind.DECISION, source_turn_ids=["t0"], created_at=T0,
                 valid_from=T0, reason="[/] stored reason"),
            Fact(fact_id=F_ONE, session_id="s1", content="first of the pair", subject="pair",
                 source_turn_ids=["t1"], created_at=T0, valid_from=T0),
            Fact(fact_id=F_TWO, session_id="s1", content="second of the pair",
                 subject="pair", source_turn_ids=["t1"], created_at=T0, valid_from=T0),
        ]
        client.vector_store().upsert_facts(
            facts, HashingEmbedder(256).embed_documents([f.content for f in facts]))
        AuditLog(client._redis, client.keys).append([
            AuditEvent(at=T0, session_id="s1", fact_id=F_CODE, action="created",
                       actor="reflection", cause="episode e1", reason="stated as [b]x[/b]"),
            # Another fact's event naming F_CODE: F_ONE's story, not F_CODE's.
            AuditEvent(at=T0, session_id="s1", fact_id=F_ONE, action="merged",
                       actor="compaction", cause="compaction r1",
                       reason="absorbed by the code fact", related=[F_CODE]),
        ])
    finally:
        client.close()
    yield folder


def run(store: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--local", str(store), *args], catch_exceptions=False)


def test_cells_are_never_markup() -> None:
    made = cells("[/]", 3, None, Text("kept"))
    assert [c.plain for c in made] == ["[/]", "3", "", "kept"]


def test_recall_prints_stored_text_verbatim(store: Path) -> None:
    result = run(store, "recall", "a[i] [/] closes", "-s", "s1", "--explain", "--limit", "1")
    assert result.exit_code == 0, result.output
    assert "a[i] [/] closes" in result.stdout  # the query in the title, verbatim too
    assert CODE in result.stdout or CLOSER in result.stdout
    every = run(store, "recall", "tag closes bold red", "-s", "s1", "--budget", "2000")
    assert every.exit_code == 0, every.output
    assert CLOSER in every.stdout and "[red]not red[/red]" in every.stdout


def test_facts_timeline_and_episodes_print_verbatim(store: Path) -> None:
    facts = run(store, "facts", "-s", "s1", "--history")
    assert facts.exit_code == 0, facts.output
    assert CODE in facts.stdout and "opts[i]" in facts.stdout
    timeline = run(store, "timeline", "-s", "s1")
    assert timeline.exit_code == 0, timeline.output
    assert CODE in timeline.stdout and "[bold]nor[/bold]" in timeline.stdout
    for command in ("stats", "episodes"):
        assert run(store, command, "-s", "s1").exit_code == 0


def test_audit_takes_the_short_id_and_shows_only_that_facts_events(store: Path) -> None:
    shown = run(store, "audit", F_CODE[:12])
    assert shown.exit_code == 0, shown.output
    assert F_CODE in shown.stdout and CODE in shown.stdout
    assert "stated as [b]x[/b]" in shown.stdout and "[/] stored reason" in shown.stdout
    assert "absorbed by the code fact" not in shown.stdout
    data = json.loads(run(store, "audit", F_CODE[:8], "--json").stdout)
    assert data["fact"]["fact_id"] == F_CODE
    assert [e["fact_id"] for e in data["events"]] == [F_CODE]
    full = json.loads(run(store, "audit", F_ONE, "--json").stdout)
    assert [e["action"] for e in full["events"]] == ["merged"]


def test_an_unknown_or_ambiguous_short_id_is_not_found(store: Path) -> None:
    unknown = run(store, "audit", "fedcba987654")
    assert unknown.exit_code == 1 and "no fact id starts with 'fedcba987654'" in unknown.output
    ambiguous = run(store, "audit", F_ONE[:12])
    assert ambiguous.exit_code == 1
    assert "ambiguous: 2 facts start with it" in ambiguous.output
    assert "give more characters" in ambiguous.output
    short = run(store, "audit", "abc")
    assert short.exit_code == 1 and "too short" in short.output


def test_apikey_names_print_verbatim(store: Path) -> None:
    created = run(store, "apikey", "create", "team-a", "--name", "[/] bot[i]")
    assert created.exit_code == 0, created.output
    listed = run(store, "apikey", "list")
    assert listed.exit_code == 0, listed.output
    assert "[/] bot[i]" in listed.stdout
