"""Current the moment it is said (issue 34): mid-conversation, before any episode closes,
recall leads with the value just changed and hands over no stale value beside it.

Embedded mode with the real fastembed model: ingest, `wait_until_processed` (the default
stage, which covers the slot table the boundary stage keeps per turn), no close, recall.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hivemem.config import Settings
from hivemem.producer.client import MemoryClient

pytestmark = [pytest.mark.integration, pytest.mark.model]

HOSTING = [
    ("user", "dana", "Let's host the service on AWS, in eu-west-1."),
    ("assistant", "bot", "Decision: AWS eu-west-1 it is."),
    ("user", "dana", "What should the health endpoint be called?"),
    ("assistant", "bot", "Use /healthz, it is the common convention."),
    ("user", "dana", "Actually we're moving the hosting to GCP, the AWS credits ran out."),
    ("assistant", "bot", "Understood, GCP from now on."),
]


def _settings() -> Settings:
    return Settings.model_validate({
        "embedding": {"provider": "fastembed"},
        "worker": {"block_ms": 50, "claim_idle_ms": 200, "claim_interval_s": 0.1},
    })


@pytest.fixture
def client(tmp_path: Path, fastembed_env: Path) -> MemoryClient:
    memory = MemoryClient.local(tmp_path / "memory", _settings())
    yield memory
    memory.close()


def test_a_change_in_the_open_episode_leads_and_the_old_value_leaves(
    client: MemoryClient,
) -> None:
    for role, who, text in HOSTING:
        client.ingest("s", role, text, agent_id=who)
    # No close: the episode that holds the change is still open (a topic shift may have
    # closed the one before it, and reflected it or not: either way).
    client.wait_until_processed("s", timeout=120)
    items = client.recall("s", "Where is the service hosted?", token_budget=300)
    assert "GCP" in items[0].content
    assert not [i.content for i in items if "AWS" in i.content and "GCP" not in i.content]
    # The past still has its answer.
    before = client.recall("s", "Where was the service hosted before?", token_budget=300)
    assert any("AWS" in i.content and "GCP" not in i.content for i in before)


def test_a_terse_change_of_plan_is_current_at_a_small_budget(client: MemoryClient) -> None:
    client.ingest("db", "user", "Let's use PostgreSQL for the database.", agent_id="dana")
    client.ingest("db", "user", "Change of plan: MySQL instead, ops only supports it",
                  agent_id="dana")
    client.wait_until_processed("db", timeout=120)
    items = client.recall("db", "which database are we using now?", token_budget=40)
    assert items and "MySQL" in items[0].content
    assert not any("PostgreSQL" in i.content for i in items)


GARDEN = [
    ("user", "dana", "Garden club plan: the plant swap is at 10:00 and the committee meeting"
                     " at 14:30."),
    ("assistant", "bot", "Noted, I'll put both on the club calendar."),
    ("user", "dana", "Update: the plant swap now starts at 11:00 instead of 10:00."),
]


def test_a_turn_with_one_of_two_values_replaced_stays_for_the_other(
    client: MemoryClient,
) -> None:
    for role, who, text in GARDEN:
        client.ingest("g", role, text, agent_id=who)
    client.wait_until_processed("g", timeout=120)
    plan = GARDEN[0][2]
    # Its meeting time is still current: the turn is handed over for it.
    meeting = [i.content for i in client.recall(
        "g", "What time is the committee meeting?", token_budget=300)]
    assert plan in meeting
    # Its swap time went: asked about the swap, only the update is handed over.
    swap = [i.content for i in client.recall(
        "g", "When does the plant swap start?", token_budget=300)]
    assert GARDEN[2][2] in swap and plan not in swap


CAPACITY = [
    ("user", "lee", "capacity planning for Q1. we're 6 engineers, 8 points per person per"
                    " sprint, so 48 per sprint"),
    ("assistant", "bot", "Q1 capacity: 6 engineers x 8 = 48 points per sprint, 6 sprints, 288"
                         " points total minus holidays."),
    ("user", "lee", "good news, two new hires start on the 3rd. count them at half speed the"
                    " first sprint"),
    ("assistant", "bot", "From the 3rd: 8 engineers. First sprint with them: 6x8 + 2x4 = 56"
                         " points, then 64 points per sprint at full speed."),
]


def test_a_later_answer_with_another_count_replaces_the_earlier(client: MemoryClient) -> None:
    # No change words the keeper pairs: the question names the slot, and the later statement
    # on it says another count of the same unit (engineers, points).
    for role, who, text in CAPACITY:
        client.ingest("cap", role, text, agent_id=who)
    client.wait_until_processed("cap", timeout=120)
    for question in ("What's the team size from the 3rd?",
                     "What's the per-sprint capacity at full speed with the new hires?"):
        result = client.recall("cap", question, token_budget=300, explain=True)
        texts = [i.content for i in result]
        assert any("64 points" in t for t in texts), texts
        assert not [t for t in texts if "48" in t and "64" not in t], (question, texts)
        assert "superseded" in {x.reason for x in result.excluded if "48" in x.content}
    # Asked about the past, the old figure is the answer.
    before = client.recall("cap", "What was the capacity per sprint before the new hires?",
                           token_budget=300)
    assert any("48" in i.content and "64" not in i.content for i in before)



TEST_ENVIRONMENT = [
    ("user", "mia", "fyi the test environment lives on cluster qa-west-1, namespace billing-qa."
                    " deploys go through argo"),
    ("assistant", "bot", "Got it: test environment on qa-west-1, namespace billing-qa, deployed"
                         " by Argo CD."),
    ("user", "mia", "why is my jest test timing out only in CI"),
    ("assistant", "bot", "Usually an unmocked network call or an open handle."),
    ("user", "mia", "it was an unmocked http call lol"),
    ("assistant", "bot", "Classic. Mock it so it is deterministic."),
    ("user", "mia", "ops moved us over the weekend: the test environment is on qa-west-3, "
                    "namespace bill-qa."),
]


def test_a_later_statement_on_the_same_thing_leads_however_it_is_worded(
    client: MemoryClient,
) -> None:
    """Values the keeper does not pair (a cluster and a namespace said as plain names): the
    later statement on the same thing ranks first for a question about now (`newer_first`;
    before it, the first statement or its confirmation led), and the earlier one still
    answers a question about the past."""
    for role, who, text in TEST_ENVIRONMENT:
        client.ingest("t", role, text, agent_id=who)
    client.wait_until_processed("t", timeout=120)
    for question in ("test environment namespace?",
                     "which cluster is the test environment on?"):
        items = client.recall("t", question, token_budget=300)
        assert "qa-west-3" in items[0].content, question
    before = client.recall("t", "which cluster was the test environment on originally?",
                           token_budget=300)
    assert any("qa-west-1" in i.content for i in before)
