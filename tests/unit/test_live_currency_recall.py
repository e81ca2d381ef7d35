"""Recall mid-conversation (issue 34): the slot table the boundary stage keeps decides what
is current before any episode closes, and the packer never hands over a stale value alone."""

from __future__ import annotations

from collections.abc import Callable

from hivemem import MemoryClient

Pipeline = tuple[MemoryClient, Callable[[], None]]


def test_the_change_just_said_is_current_before_any_close(pipeline: Pipeline) -> None:
    client, drain = pipeline
    client.ingest("s1", "user", "Let's use PostgreSQL for the database.", agent_id="dana")
    for i in range(6):
        client.ingest("s1", "assistant", f"filler about the office plants, number {i}")
    client.ingest("s1", "user", "Change of plan: MySQL instead, ops only supports it",
                  agent_id="dana")
    drain()
    client.wait_until_processed("s1", timeout=5)
    for budget in (40, 300):
        items = client.recall("s1", "which database are we using now?", token_budget=budget)
        texts = [i.content for i in items]
        assert texts and "MySQL" in texts[0], (budget, texts)
        assert not any("PostgreSQL" in t for t in texts), (budget, texts)
    # Where the change itself does not fit, the old value is not handed over alone either.
    tiny = client.recall("s1", "which database are we using now?", token_budget=15)
    assert not any("PostgreSQL" in i.content for i in tiny)
    # Asked about the past, the old value is the answer.
    before = client.recall("s1", "which database did we use before?", token_budget=300,
                           explain=True)
    assert any("PostgreSQL" in i.content for i in before)


def test_explain_says_the_stale_statement_was_replaced(pipeline: Pipeline) -> None:
    client, drain = pipeline
    client.ingest("s2", "user", "The weekly production deploy is on Tuesday.", agent_id="dana")
    client.ingest("s2", "user", "The weekly production deploy is on Thursday.", agent_id="dana")
    drain()
    client.wait_until_processed("s2", timeout=5)
    result = client.recall("s2", "which day is the weekly production deploy?",
                           token_budget=300, explain=True)
    assert "Thursday" in result[0].content
    reasons = {x.content: x.reason for x in result.excluded}
    assert reasons.get("The weekly production deploy is on Tuesday.") == "superseded"
