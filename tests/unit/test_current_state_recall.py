"""Recall leads with the current state: a superseded statement never outranks its successor
and is left out when the successor is in the context, unless history is asked for."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from hivemem import MemoryClient, Settings
from hivemem.domain.fact import Fact, FactKind, FactStatus
from hivemem.domain.recall.currency import stale_statements
from hivemem.domain.recall.fact_index import CurrencyLens, FactIndex, LensMapping
from hivemem.domain.recall.intent import read_query
from hivemem.providers.embedders import HashingEmbedder

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def _three_adds(client: MemoryClient, session: str) -> None:
    client.ingest(session, "user", "We decided to use PostgreSQL for the database",
                  markers=["decision"], timestamp=T0, turn_id="pg")
    client.ingest(session, "user", "The API must stay under 200 ms p95",
                  markers=["constraint"], timestamp=T0 + timedelta(minutes=1), turn_id="api")
    client.ingest(session, "user",
                  "Change of plan: we switch the database to MySQL, ops only supports it",
                  timestamp=T0 + timedelta(minutes=2), turn_id="mysql")
    client.close_episode(session)
    client.wait_until_reflected(session, 30)


def test_which_database_now_puts_mysql_first_without_the_postgres_turn(
    tmp_path: Path, settings: Settings
) -> None:
    with MemoryClient.local(tmp_path / "m", settings, embedder=HashingEmbedder(1024)) as client:
        _three_adds(client, "s")
        result = client.recall("s", "which database are we using now?", token_budget=40,
                               explain=True)
        items = list(result)
        assert items and "MySQL" in items[0].content
        assert not any("PostgreSQL" in i.content for i in items)
        # History is still there when asked for, and for questions about the past.
        past = client.recall("s", "which database did we use before?", token_budget=80)
        assert any("PostgreSQL" in i.content for i in past)
        with_history = client.recall("s", "which database are we using now?",
                                     token_budget=80, include_history=True)
        contents = [i.content for i in with_history]
        assert any("PostgreSQL" in c for c in contents)
        assert "MySQL" in contents[0]


_SAID = {"a": "We use PostgreSQL for the database.", "b": "The database moves to MySQL.",
         "c": "Switch the database to MariaDB.", "d": "The database runs on one node."}


def _fact(fid: str, status: FactStatus, turns: list[str], by: str | None = None) -> Fact:
    return Fact(fact_id=fid, session_id="s", content=_SAID[fid], kind=FactKind.DECISION,
                subject="database", source_turn_ids=turns, created_at=T0, valid_from=T0,
                status=status, superseded_by=by)


def test_stale_statements_follow_the_chain_and_spare_the_switch_turn() -> None:
    facts = [
        _fact("a", FactStatus.SUPERSEDED, ["t1"], by="b"),
        _fact("b", FactStatus.SUPERSEDED, ["t2", "t3"], by="c"),
        _fact("c", FactStatus.ACTIVE, ["t3"]),  # t3 made the switch and states the current
        _fact("d", FactStatus.ARCHIVED, ["t4"]),  # retracted: stale, no successor
    ]
    stale = stale_statements(facts)
    assert set(stale["turn:s:t1"]) == {"fact:c", "turn:s:t3"}
    assert "turn:s:t3" not in stale  # the switch statement is never stale
    assert set(stale["turn:s:t2"]) == {"fact:c", "turn:s:t3"}
    assert stale["turn:s:t4"] == ()
    assert "fact:c" not in stale and stale["fact:a"] == ("fact:c", "turn:s:t3")


def test_past_questions() -> None:
    assert read_query("what did we use before MySQL?").past
    assert read_query("which database did we originally pick?").past
    assert not read_query("which database are we using now?").past


def test_a_stale_statement_is_never_handed_over_beside_its_successor_after_the_refills() -> None:
    # Each round leaves out the stale statement it chose and fills the room it leaves with
    # the next best, stale too (a long session's old turns on one thing): what the last
    # round chooses is filtered the same way, not handed over.
    from hivemem.domain.recall.budget import Candidate
    from hivemem.domain.recall.policy import PRESETS
    from hivemem.domain.recall.scoring import Signals
    from hivemem.recall.items import PoolEntry
    from hivemem.recall.recaller import _REFILLS, _select_current

    def candidate(key: str, score: float, successors: tuple[str, ...] = ()) -> Candidate:
        entry = PoolEntry(signals=Signals(key=key, source="turn", session_id="s",
                                          successors=successors), vector=None)
        return Candidate(key=key, text=f"statement {key}", score=score, token_count=10,
                         payload={"entry": entry})

    stale = [candidate(f"old{i}", 0.9 - i / 100, ("new",)) for i in range(_REFILLS + 3)]
    chosen, excluded = _select_current([candidate("new", 1.0), *stale], 20,
                                       PRESETS["balanced"], keep_history=False,
                                       only_current=True)
    assert [c.key for c in chosen] == ["new"]
    assert {e.candidate.key for e in excluded if e.reason == "superseded"} == {
        f"old{i}" for i in range(_REFILLS + 1)}


def _picked(pool: list[tuple[str, float, tuple[str, ...], Fact | None]], budget: int
            ) -> tuple[list[str], dict[str, str]]:
    """`_select_current` over (key, score, successors, fact) candidates of 10 tokens each,
    for a question about now: the keys chosen, and the superseded ones with why."""
    from hivemem.domain.recall.budget import Candidate
    from hivemem.domain.recall.policy import PRESETS
    from hivemem.domain.recall.scoring import Signals
    from hivemem.recall.items import PoolEntry
    from hivemem.recall.recaller import _select_current

    candidates = [
        Candidate(key=key, text=f"statement {key}", score=score, token_count=10, payload={
            "entry": PoolEntry(signals=Signals(key=key, source="fact" if fact else "turn",
                                               session_id="s", successors=successors),
                               vector=None, fact=fact)})
        for key, score, successors, fact in pool]
    chosen, excluded = _select_current(candidates, budget, PRESETS["balanced"],
                                       keep_history=False, only_current=True)
    return [c.key for c in chosen], {e.candidate.key: e.detail for e in excluded
                                     if e.reason == "superseded"}


def test_a_successor_turn_told_by_its_fact_still_replaces_the_stale_statement() -> None:
    # Once reflected, the turn that replaced an old statement (t14) reaches the context as
    # a fact read off it (its turn dropped as restated), not as the turn: the old
    # statement's fact (read off t3, which t14 replaced) is left out all the same.
    new = _said("new", "Updated: insurance with Allsure, $500 deductible", "", ["t14"])
    old = _said("old", "Noted: Halden renewal, $1,284/year", "", ["t3"])
    chosen, superseded = _picked([
        ("fact:new", 1.0, (), new),
        ("fact:old", 0.9, ("turn:s:t14",), old),
        ("turn:s:t0", 0.8, (), None),
    ], 100)
    assert chosen == ["fact:new", "turn:s:t0"]
    assert superseded == {"fact:old": "replaced by fact:new"}
    # Its successor's fact competed but did not fit: never the stale one alone.
    chosen, superseded = _picked([
        ("fact:old", 1.0, ("turn:s:t14",), old),
        ("turn:s:t0", 0.95, (), None),
        ("fact:new", 0.9, (), new),
    ], 20)
    assert "fact:old" not in chosen
    assert superseded == {"fact:old": "replaced by fact:new (left out)"}


def test_a_fact_read_off_the_successor_turn_is_not_replaced_by_its_sibling_facts() -> None:
    # Two facts read off the turn that made the change (t7): one also cites an older turn
    # t7 replaced, so t7 is among its successors; it says what replaced it, and the other
    # fact of t7 does not make it history.
    change = _said("change", "So: invoicing on GCP, europe-west1, instead of AWS", "",
                   ["t1", "t7"])
    sibling = _said("sibling", "Postgres would then be Cloud SQL.", "", ["t7"])
    chosen, superseded = _picked([
        ("fact:change", 1.0, ("turn:s:t7",), change),
        ("fact:sibling", 0.5, (), sibling),
    ], 100)
    assert chosen == ["fact:change", "fact:sibling"]
    assert superseded == {}


def _said(fid: str, content: str, subject: str, turns: list[str], *,
          status: FactStatus = FactStatus.ACTIVE, by: str | None = None,
          considered: tuple[str, ...] = ()) -> Fact:
    return Fact(fact_id=fid, session_id="s", agent_id="Joanna", content=content,
                kind=FactKind.CONSTRAINT, subject=subject, source_turn_ids=turns,
                created_at=T0, valid_from=T0, status=status, superseded_by=by,
                considered_in=list(considered))


def test_a_link_by_resemblance_makes_no_statement_history() -> None:
    # As consolidation linked them in a chat (LoCoMo 42): two of a person's statements that
    # both still hold, read off keywords onto one slot; a greeting question linked to a
    # conflicted greeting; a question linked to a fact with no slot.
    facts = [
        _said("fur", "Joanna: I'm allergic to most reptiles and animals with fur.",
              "joanna's diet", ["D2:23"], status=FactStatus.SUPERSEDED, by="dairy"),
        _said("dairy", "Joanna: Yeah, since I'm lactose intolerant I'm trying out dairy-free"
              " options like coconut or almond milk instead.", "joanna's diet", ["D20:10"]),
        _said("hi", "Nate: Hey Joanna!", "", ["D1:1"], status=FactStatus.CONFLICTED,
              considered=("D7:1",)),
        _said("show", "I'll definitely let you know how it turns out.", "", ["D8:22"],
              considered=("D16:10",)),
    ]
    stale = stale_statements(facts)
    assert not {"turn:s:D2:23", "turn:s:D7:1", "turn:s:D16:10"} & set(stale)
    assert stale["fact:fur"] == ("fact:dairy", "turn:s:D20:10")  # history by its status
    index = FactIndex()
    for fact in facts:
        index.put(fact)
    lens = CurrencyLens()
    lens.add("s", index)
    replaced = LensMapping(lens)
    assert not any(k in replaced for k in ("turn:s:D2:23", "turn:s:D7:1", "turn:s:D16:10"))


def test_a_plain_replacement_and_a_settled_answer_still_make_history() -> None:
    facts = [
        _said("pg", "We use PostgreSQL for the database.", "database", ["t1"],
              status=FactStatus.SUPERSEDED, by="my"),
        _said("my", "Change of plan: we switch the database to MySQL.", "database", ["t2"],
              considered=("t3",)),
    ]
    stale = stale_statements(facts)
    assert stale["turn:s:t1"] == ("fact:my", "turn:s:t2")
    assert stale["turn:s:t3"] == ("fact:my", "turn:s:t2")
    # An amount moved on, on a chain consolidation made, with no slot word to show it.
    moved = [
        _said("640", "Gillian thinks I'll get about £640 back.", "refund", ["t4"],
              status=FactStatus.SUPERSEDED, by="215"),
        _said("215", "estimate is now £215 back", "refund", ["t5"]),
    ]
    assert stale_statements(moved)["turn:s:t4"] == ("fact:215", "turn:s:t5")


def test_a_question_about_someone_who_is_not_a_speaker_gets_the_current_value_live(
    tmp_path: Path, settings: Settings
) -> None:
    """No close, no reflection: the keeper's slot table alone. "Nia's first day" is about
    the new hire, not about a speaker, so it is a question about now: the dates moved on
    from stay out of its context."""
    said = [
        ("grace", "Onboarding for Nia Foster: start September 2."),
        ("grace", "ok Nia emailed, her notice period was longer. start is September 9"),
        ("bot", "Updated: start date September 9. IT laptop deadline moved to September 5."),
        ("grace", "she's fine with Monday September 8 then, I just called her"),
        ("bot", "Corrected: start date Monday September 8. Laptop still due September 5."),
    ]
    with MemoryClient.local(tmp_path / "m", settings, embedder=HashingEmbedder(1024)) as client:
        for i, (agent, text) in enumerate(said):
            client.ingest("s", "user" if agent == "grace" else "assistant", text,
                          agent_id=agent, turn_id=f"t{i}",
                          timestamp=T0 + timedelta(minutes=i))
        client.wait_until_processed("s", 30)
        items = [i.content for i in client.recall("s", "When is Nia's first day?", 300)]
    assert any("September 8" in c for c in items)
    assert not any(("September 9" in c or "September 2" in c) and "September 8" not in c
                   for c in items), items
