"""Value-level staleness (issue 34): a turn that carries several values, one of them
replaced, is history only for a question about the replaced one."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import cast

from hivemem import MemoryClient
from hivemem.config import ReflectionSettings
from hivemem.domain import lineage
from hivemem.domain.lineage import Lineage
from hivemem.domain.models import Turn
from hivemem.domain.names import SessionName
from hivemem.domain.slot_table import Replacement, SlotView
from hivemem.domain.value_clauses import Question, ValueParts, clause_words
from hivemem.pipeline.messages import EmbeddedTurn
from hivemem.pipeline.topology import Keys
from hivemem.providers.embedders import HashingEmbedder
from hivemem.recall.currency import Currency, CurrencyView, with_table
from hivemem.store.currency import SlotTableStore
from hivemem.store.head import SEQ_FIELD
from hivemem.store.vectors.base import VectorStore
from hivemem.testing import connect_fake, fake_server
from hivemem.workers.currency import CurrencyKeeper

Pipeline = tuple[MemoryClient, Callable[[], None]]
T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
EMB = HashingEmbedder(64)

SHOP = "For the bakery website we use Shopify for the storefront and Mailchimp for the newsletter."
SWITCH = "Change of plan: we switch the newsletter from Mailchimp to Buttondown."
GARDEN = "Garden club plan: the plant swap is at 10:00 and the committee meeting at 14:30."
LATER = "Update: the plant swap now starts at 11:00 instead of 10:00."


def _play(*texts: str) -> Lineage:
    ledger = Lineage()
    for index, text in enumerate(texts, 1):
        ledger = lineage.step(ledger, f"t{index}", text).lineage
    return ledger


def _kept_table(*texts: str) -> SlotView:
    client = connect_fake(fake_server())
    store = SlotTableStore(client, Keys(partitions=4))
    keeper = CurrencyKeeper(store, ReflectionSettings())
    name = SessionName("s")
    # The session's counter as ingest leaves it: the keeper writes no seq it was not given.
    client.hset(store.keys.session_turn_ids(name), SEQ_FIELD, len(texts))
    for index, text in enumerate(texts, 1):
        said = Turn(turn_id=f"t{index}", session_id="s", agent_id="dana", role="user",
                    content=text, timestamp=T0 + timedelta(minutes=index), seq=index,
                    token_count=len(text.split()))
        keeper.apply(name, [EmbeddedTurn.of(said, EMB.embed_documents([text])[0])])
    return store.view(name)


def test_each_value_gets_the_words_of_its_own_clause() -> None:
    got = clause_words("Lunch is at 12:30, the bus leaves at 17:15; dinner at 19:00",
                       ["time=12:30", "time=17:15", "time=19:00"])
    assert got["time=12:30"] == {"lunch"}
    assert got["time=17:15"] == {"bus", "leav"}
    assert got["time=19:00"] == {"dinner"}
    # A heading is of every value after it: it tells none of them apart.
    assert clause_words("Times for the trip:\nbus 17:15", ["time=17:15"])["time=17:15"] == {"bus"}


def test_the_lineage_says_which_values_of_a_turn_went_and_which_it_keeps() -> None:
    ledger = _play(SHOP, SWITCH, "Lunch order today is pizza from the corner place.")
    gone, kept = lineage.parts(ledger, "t1", by=["t2"])
    assert set(gone) == {"name=mailchimp"}
    assert "newsletter" in gone["name=mailchimp"] and "buttondown" in gone["name=mailchimp"]
    assert set(kept) == {"name=shopify"} and "storefront" in kept["name=shopify"]
    # The turn that moved on carries the successor: nothing of it went.
    assert lineage.parts(ledger, "t2") == ({}, {})
    # Replaced by a turn that does not talk about the gone value's thing: which value the
    # change was about is not read with confidence, nothing is kept.
    assert lineage.parts(ledger, "t1", by=["t3"]) == (gone, {})


def test_a_value_said_in_the_gone_values_clause_is_not_kept() -> None:
    ledger = _play("The office party is at Rosa's Cantina with Mariachi Sol playing.",
                   "Update: the office party moves from Rosa's Cantina to Blue Door.")
    gone, kept = lineage.parts(ledger, "t1", by=["t2"])
    assert gone and not kept  # one clause, one thing: history as a whole


def test_a_value_the_replacing_turn_talks_about_is_not_kept() -> None:
    """The change may be to that value, read wrongly off the values: not kept."""
    trip = "Field trip plan: the bus leaves at 8:15 and the museum tour starts at 10:30."
    bus = "Update: the bus now leaves at 7:45 instead of 8:15, the driver asked for it."
    ledger = _play(trip, bus, "The museum tour guide is someone new this year.")
    gone, kept = lineage.parts(ledger, "t1", by=["t2"])
    assert set(gone) == {"time=8:15"} and set(kept) == {"time=10:30"}
    assert lineage.parts(ledger, "t1", by=["t2", "t3"]) == (gone, {})


def test_a_slot_change_replaces_the_value_on_its_clause_not_every_value_of_its_kind() -> None:
    table = _kept_table(GARDEN, LATER)
    entry = table.replaced["t1"]
    assert entry.rule == "superseded" and entry.by == ("t2",)
    assert set(entry.gone) == {"time=10:00"} and set(entry.kept) == {"time=14:30"}
    assert entry.partial


def test_a_turn_wholly_replaced_is_not_partial() -> None:
    table = _kept_table("Let's use PostgreSQL for the database.",
                        "Change of plan: MySQL instead, ops only supports it")
    assert not table.replaced["t1"].partial


def test_an_entry_written_before_value_staleness_still_decodes_as_whole() -> None:
    old = Replacement.model_validate_json(
        '{"by": ["t4"], "rule": "superseded", "slot": "value", "seq": 4}')
    assert old.gone == {} and old.kept == {} and not old.partial


def test_a_question_is_about_the_gone_value_only_when_it_says_so() -> None:
    parts = ValueParts.of({"time=10:00": ("plant", "swap")}, {"time=14:30": ("committee", "meet")})
    assert parts.asked_by(Question.of("When does the plant swap start?"))
    assert not parts.asked_by(Question.of("What time is the committee meeting?"))
    named = ValueParts.of({"name=mailchimp": ("newsletter", "buttondown")},
                          {"name=shopify": ("storefront",)})
    assert named.asked_by(Question.of("Are we still on Mailchimp?"))
    assert named.asked_by(Question.of("Do we send it with Buttondown?"))  # its successor
    assert not named.asked_by(Question.of("What runs the storefront?"))
    # A question that tells neither is about the gone value (never a stale value alone).
    assert named.asked_by(Question.of("What tools do we have?"))
    # ... unless it asks for a kind of value only a kept one is.
    kinds = ValueParts.of({"name=ferry": ()}, {"time=7:45": ()})
    assert not kinds.asked_by(Question.of("What time do we leave?"))
    # A question on a kept value's thing that asks for a kind a gone one is: the gone one.
    both = ValueParts.of({"time=9:00": ("ferry",)}, {"name=harbour": ("meet", "point")})
    assert both.asked_by(Question.of("When do we meet at the point?"))


def test_recall_reads_a_turns_parts_once_per_table_view() -> None:
    currency = CurrencyView(cast(VectorStore, None), ReflectionSettings())
    try:
        table = _kept_table(GARDEN, LATER)
        got = with_table(Currency({}, {}), "s", lambda _f: None, table, None,
                         chains=currency.chains("s", table))
        assert got.parts is not None
        parts = got.parts("turn:s:t1")
        assert parts is not None and parts.gone == {"time=10:00"}
        assert got.parts("turn:s:t1") is parts  # kept for the view
        assert got.parts("turn:s:t2") is None and got.parts("fact:x") is None
    finally:
        currency.close()


def test_a_turn_replaced_in_part_is_handed_over_for_what_it_still_says(
    pipeline: Pipeline,
) -> None:
    client, drain = pipeline
    for text in (GARDEN, "Remember to bring labels for the seedlings.", LATER):
        client.ingest("g", "user", text, agent_id="dana")
    drain()
    client.wait_until_processed("g", timeout=5)
    meeting = [i.content for i in client.recall(
        "g", "What time is the committee meeting?", token_budget=300)]
    assert GARDEN in meeting
    swap = [i.content for i in client.recall(
        "g", "When does the plant swap start?", token_budget=300)]
    assert LATER in swap and GARDEN not in swap
