"""The slot table kept per turn (issue 34): the keeper's rules, its idempotence and what
recall makes of it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import cast

import numpy as np
import pytest

from hivemem.config import ReflectionSettings
from hivemem.domain.fact import Fact, FactKind
from hivemem.domain.models import Turn
from hivemem.domain.names import SessionName
from hivemem.domain.scope import Scope
from hivemem.domain.slot_table import Replacement, SlotState, SlotView
from hivemem.pipeline.messages import EmbeddedTurn, EpisodeControl
from hivemem.pipeline.topology import Keys
from hivemem.pipeline.vectors import decode_vector
from hivemem.providers.embedders import HashingEmbedder
from hivemem.recall.currency import (
    NEAR_SUCCESSORS,
    Currency,
    CurrencyView,
    TableChains,
    with_table,
)
from hivemem.store.currency import FORGOTTEN, LOST_RACE, WRITTEN, SlotTableStore
from hivemem.store.head import SEQ_FIELD
from hivemem.store.redis import Redis
from hivemem.store.vectors.base import VectorStore
from hivemem.testing import connect_fake, fake_server
from hivemem.workers.currency import CurrencyKeeper, step

T0 = datetime(2026, 5, 4, 9, 0, tzinfo=UTC)
EMB = HashingEmbedder(64)


def turn(seq: int, text: str, role: str = "user", agent: str | None = "dana",
         visibility: str = "shared") -> Turn:
    return Turn(turn_id=f"t{seq}", session_id="s", agent_id=agent, role=role, content=text,
                timestamp=T0 + timedelta(minutes=seq), seq=seq, token_count=len(text.split()),
                visibility=visibility)


def items(*texts: str) -> list[EmbeddedTurn]:
    vectors = EMB.embed_documents(list(texts))
    return [EmbeddedTurn.of(turn(i + 1, t), vectors[i]) for i, t in enumerate(texts)]


def run(*texts: str) -> dict[str, Replacement]:
    state, out = SlotState(), {}
    for item in items(*texts):
        state, gone, _owners = step(state, item.turn, ReflectionSettings(), item.vec)
        out.update(gone)
    return out


@pytest.fixture
def fake() -> Redis:
    return connect_fake(fake_server())


@pytest.fixture
def store(fake: Redis) -> SlotTableStore:
    table = SlotTableStore(fake, Keys(partitions=4))
    given(fake, "s", 100)
    return table


def given(client: Redis, name: str, seqs: int) -> None:
    """The session's counter as ingest leaves it after `seqs` turns: the keeper writes no
    seq the session was not given."""
    client.hset(Keys(partitions=4).session_turn_ids(SessionName(name)), SEQ_FIELD, seqs)


def test_a_terse_change_of_plan_replaces_the_choice_it_names_instead() -> None:
    gone = run("Let's use PostgreSQL for the database.",
               "Change of plan: MySQL instead, ops only supports it")
    assert gone["t1"].by == ("t2",) and gone["t1"].rule == "superseded"


def test_a_statement_and_its_update_match_on_what_stays_the_same() -> None:
    gone = run("Let's host the service on AWS, in eu-west-1.",
               "What should the health endpoint be called?",
               "Actually we're moving the hosting to GCP.")
    assert gone["t1"].by == ("t3",)
    assert "t2" not in gone


def test_a_number_said_to_be_gone_names_what_it_replaces() -> None:
    gone = run("The CSV export should allow at most 200 rows per page.",
               "Rate limit for the public API: 250 requests per minute per key.",
               "Update from product: the export limit is now 1000 rows per page, not 200.")
    assert gone == {"t1": gone["t1"]} and gone["t1"].by == ("t3",)


def test_a_revert_and_a_retraction() -> None:
    gone = run("The repo uses Black as the formatter.",
               "Switch the formatter to autopep8, it's less intrusive.",
               "Let's return to Black and exclude the generated files.",
               "Let's add a dark mode toggle.",
               "Scrap that, no dark mode.")
    assert gone["t1"].by == ("t2",) and gone["t2"].by == ("t3",)
    assert gone["t4"].rule == "retracted" and gone["t4"].by == ("t5",)
    assert SlotView(replaced=gone).chain("t1") == ("t2", "t3")


def test_a_question_about_a_value_changes_nothing() -> None:
    gone = run("The services run on Python 3.11.", "Should we move the services to 3.13?")
    assert "t1" not in gone


def test_the_keeper_applies_each_entry_once(store: SlotTableStore) -> None:
    keeper = CurrencyKeeper(store, ReflectionSettings())
    entries = items("We decided to use PostgreSQL for the database.",
                    "Change of plan: we switch the database to MySQL.")
    control = EpisodeControl(session_id="s", seq=3, action="close_episode")
    keeper.apply("s", [*entries, control])
    first = store.view("s")
    assert first.applied == 3 and first.replaced["t1"].by == ("t2",)
    before = store.state("s")
    keeper.apply("s", [*entries, control])  # a replay after a crash before the commit
    assert store.view("s") == first and store.state("s") == before
    # A writer that read an older `applied` (its lease expired meanwhile) writes nothing.
    assert store.write("s", 1, SlotState(applied=2), {"t9": first.replaced["t1"]},
                       {}) == LOST_RACE
    assert "t9" not in store.view("s").replaced


def test_a_run_read_before_a_forget_purged_the_session_writes_nothing_back(
    store: SlotTableStore, fake: Redis,
) -> None:
    """A boundary worker reads a run, a forget purges the session (its counter and slot
    table go), then the worker's keeper applies the run: the forgotten turns' text must not
    come back in a fresh state, nor past the counter of a session started again."""
    keeper = CurrencyKeeper(store, ReflectionSettings())
    said = items("We decided the vault key is zq-secret-1.",
                 "Change of plan: the vault key is zq-secret-2.")
    keeper.apply("s", said[:1])
    assert store.view("s").applied == 1
    fake.delete(*store.keys.session_keys(SessionName("s")))  # what a forget purges
    keeper.apply("s", said[1:])
    assert store.state("s") == SlotState() and store.view("s").replaced == {}
    assert not [k for k in fake.keys("*") if b"slots" in k]
    given(fake, "s", 1)  # the session is used again: one turn so far
    assert store.write("s", 0, SlotState(applied=2), {}, {}) == FORGOTTEN
    assert store.write("s", 0, SlotState(applied=1), {}, {}) == WRITTEN


def _fact(fact_id: str, turns: list[str]) -> Fact:
    return Fact(fact_id=fact_id, session_id="s", content="We use PostgreSQL.",
                kind=FactKind.DECISION, subject="database", source_turn_ids=turns,
                created_at=T0, valid_from=T0)


def test_recall_reads_the_table_for_turns_and_the_facts_they_stated() -> None:
    table = SlotView(applied=3, replaced={
        "t1": Replacement(by=("t2",), rule="superseded"),
        "t2": Replacement(by=("t3",), rule="superseded"),
        "t5": Replacement(by=("t6",), rule="superseded", visibility="private",
                          agent_id="alice", namespace="default"),
    })
    reflected = _fact("f1", ["t1", "t1b"])  # a statement and its acknowledgement
    current = _fact("f2", ["t3"])
    facts = {f.fact_id: f for f in (reflected, current)}

    got = with_table(Currency({}, {}), "s", facts.get, table,
                     Scope(namespace="default", agent_id="bob"))
    assert got.replaced["turn:s:t1"] == ("turn:s:t2", "turn:s:t3")
    assert got.replaced["fact:f1"] == ("turn:s:t2", "turn:s:t3")
    assert "fact:f2" not in got.replaced and "turn:s:t3" not in got.replaced
    assert "turn:s:t5" not in got.replaced  # bob may not see what replaced it
    alice = with_table(Currency({}, {}), "s", lambda _f: None, table,
                       Scope(namespace="default", agent_id="alice"))
    assert alice.replaced["turn:s:t5"] == ("turn:s:t6",)


def test_a_long_chain_gives_its_nearest_successors_and_what_is_current() -> None:
    # One slot changed 3,000 times: each statement replaced by the next.
    n = 3000
    table = SlotView(applied=n, replaced={
        f"t{i}": Replacement(by=(f"t{i + 1}",), rule="superseded") for i in range(n)},
        personal={f"t{i}": "dana" for i in range(0, n, 2)})
    chains = TableChains(table)
    got = with_table(Currency({}, {}), "s", lambda _f: None, table, None, chains=chains)
    near = tuple(f"turn:s:t{i}" for i in range(1, NEAR_SUCCESSORS + 1))
    assert got.replaced["turn:s:t0"] == (*near, f"turn:s:t{n}")
    short = tuple(f"turn:s:t{i}" for i in range(n - 3, n + 1))
    assert got.replaced[f"turn:s:t{n - 4}"] == short  # as SlotView.chain when short
    assert tuple(f"turn:s:{t}" for t in table.chain(f"t{n - 4}")) == short
    assert f"turn:s:t{n}" not in got.replaced
    assert got.personal["turn:s:t2"] == "dana" and "turn:s:t3" not in got.personal
    assert got.personal.values() == {"dana"}
    # The chains' ends are kept for the view: asked again, nothing is walked again.
    assert chains.chain("t0") is chains.chain("t0")


def test_recall_reads_the_table_whole_only_when_it_changed(store: SlotTableStore) -> None:
    keeper = CurrencyKeeper(store, ReflectionSettings())
    keeper.apply("s", items("We decided to use PostgreSQL for the database.",
                            "Change of plan: we switch the database to MySQL."))
    first = store.view("s")
    assert store.view("s") is first  # unchanged: the view kept
    more = items("We decided to use PostgreSQL for the database.",
                 "Change of plan: we switch the database to MySQL.",
                 "Change of plan again: we switch the database to SQLite.")
    keeper.apply("s", more)
    again = store.view("s")
    assert again is not first and again.applied == 3 and "t2" in again.replaced
    store.reset("s")
    assert store.view("s").replaced == {}


def test_vectors_of_the_current_statements_travel_with_the_state() -> None:
    state = SlotState()
    sent = items("The build uses Node 18.", "The build uses Node 22.")
    for item in sent:
        state, _gone, _owners = step(state, item.turn, ReflectionSettings(), item.vec)
    assert set(state.vectors) == {t for f in state.current for t in f.source_turn_ids} == {"t2"}
    kept = decode_vector(state.vectors["t2"])
    assert float(kept @ sent[1].vector) == pytest.approx(float(np.linalg.norm(kept)) ** 2)


def test_a_turn_the_rules_fail_on_is_skipped_not_retried_forever(
    store: SlotTableStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hivemem.workers.currency as keeper_module

    real = keeper_module.step

    def fragile(state: SlotState, t: Turn, *args: object) -> object:
        if t.seq == 2:
            raise ValueError("boom")
        return real(state, t, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(keeper_module, "step", fragile)
    CurrencyKeeper(store, ReflectionSettings()).apply("s", items(
        "We decided to use PostgreSQL for the database.", "this one breaks the rules",
        "Change of plan: we switch the database to MySQL."))
    view = store.view("s")
    assert view.applied == 3 and view.replaced["t1"].by == ("t3",)


def test_a_day_is_a_value_the_keeper_reads_though_reflection_keeps_no_fact_of_it() -> None:
    gone = run("The weekly production deploy is on Tuesday.",
               "The weekly production deploy is on Thursday.")
    assert gone["t1"].by == ("t2",)


def test_the_table_publishes_the_values_moved_on_from_and_a_revert_takes_them_back(
    store: SlotTableStore,
) -> None:
    from hivemem.domain.lineage import GoneValues

    name = SessionName("s")
    keeper = CurrencyKeeper(store, ReflectionSettings())
    said = items("The checkout session store runs on Redis, 2 nodes.",
                 "let's move the session store from Redis to Memcached",
                 "ok forget Memcached, session store back to Redis like we originally had")
    keeper.apply(name, said[:2])
    gone = store.view(name).gone
    assert gone["name=redis"] == ("t2", ("name=memcached",))
    # Recall reads it for any text: the config line no rule marked is stale, a line
    # naming the successor too is not; names are read in any case.
    assert GoneValues(gone).stale("SESSION_BACKEND=redis in the config PR") == "t2"
    assert GoneValues(gone).stale("Redis or Memcached, both fit") is None
    keeper.apply(name, said[2:])
    gone = store.view(name).gone
    assert "name=redis" not in gone  # current again: the field is deleted
    assert gone["name=memcached"][0] == "t3"


def test_a_value_a_private_turn_moved_on_from_is_not_published(store: SlotTableStore) -> None:

    name = SessionName("s")
    vectors = EMB.embed_documents(["The checkout session store runs on Redis.",
                                   "let's move the session store from Redis to Memcached"])
    CurrencyKeeper(store, ReflectionSettings()).apply(name, [
        EmbeddedTurn.of(turn(1, "The checkout session store runs on Redis."), vectors[0]),
        EmbeddedTurn.of(turn(2, "let's move the session store from Redis to Memcached",
                             visibility="private"), vectors[1])])
    assert store.view(name).gone == {}


def test_values_moved_on_from_are_read_once_per_table_and_again_when_it_changes() -> None:
    """Recall reads the table's values moved on from (they grow with the session's
    history) once per view of the table, and a changed table's anew."""
    currency = CurrencyView(cast(VectorStore, None), ReflectionSettings())
    try:
        node = "The build uses Node 18."
        first = SlotView(applied=2, gone={"version=node 18": ("t2", ("version=node 22",))})
        got = with_table(Currency({}, {}), "s", lambda _f: None, first, None,
                         chains=currency.chains("s", first))
        assert got.gone is not None and got.gone.stale(node) == "t2"
        again = with_table(Currency({}, {}), "s", lambda _f: None, first, None,
                           chains=currency.chains("s", first))
        assert again.gone is got.gone  # the same view: read once
        later = SlotView(applied=3, gone={"version=node 18": ("t3", ("version=node 24",))})
        moved = with_table(Currency({}, {}), "s", lambda _f: None, later, None,
                           chains=currency.chains("s", later))
        assert moved.gone is not None and moved.gone.stale(node) == "t3"
        assert with_table(Currency({}, {}), "s", lambda _f: None, SlotView(applied=4), None,
                          chains=currency.chains("s", SlotView(applied=4))).gone is None
    finally:
        currency.close()


def test_the_keeper_keeps_its_state_between_batches_while_no_one_else_wrote_it(
    store: SlotTableStore, fake: Redis,
) -> None:
    """The state (hundreds of KB in a long session) is parsed again only when the stored
    version moved: another worker wrote it, or a purge and a new start reached the same
    seq with other turns."""
    keeper = CurrencyKeeper(store, ReflectionSettings())
    said = items("We decided to use PostgreSQL for the database.",
                 "Change of plan: we switch the database to MySQL.")
    keeper.apply("s", said[:1])
    kept = store.state("s")
    assert store.state("s") is kept and kept.applied == 1
    other = SlotTableStore(fake, store.keys)  # another boundary worker
    CurrencyKeeper(other, ReflectionSettings()).apply("s", said)
    moved = store.state("s")
    assert moved is not kept and moved.applied == 2
    assert moved == other.state("s")  # read whole: the state the other worker wrote
    fake.delete(*store.keys.session_keys(SessionName("s")))  # a forget purges the session
    given(fake, "s", 2)  # started again: two other turns
    CurrencyKeeper(other, ReflectionSettings()).apply("s", items(
        "We decided the cache runs on Valkey.", "The cache keeps entries for an hour."))
    again = store.state("s")
    assert again.applied == 2 and "PostgreSQL" not in again.model_dump_json()
    assert "Valkey" in again.model_dump_json()


def test_vectors_are_fields_of_their_own_written_once_and_dropped_with_their_statement(
    store: SlotTableStore, fake: Redis, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch sends only the vectors of statements new to the state (not the ~200 of the
    current ones); another reader gets the same state; a state written before vectors were
    fields (in its JSON) is read the same and written the new way."""
    key = store.keys.slot_state(SessionName("s"))

    def fields() -> set[str]:
        return {f.decode() for f in fake.hkeys(key) if f.startswith(b"v:")}

    vectors = {"t1": "AAAA", "t2": "BBBB"}
    assert store.write("s", 0, SlotState(applied=1, vectors=vectors), {}, {}) == WRITTEN
    assert fields() == {"v:t1", "v:t2"} and b"AAAA" not in fake.hget(key, "state")
    sent: list[list[object]] = []
    real = vars(store)["_write"]

    def spy(keys: list[str], args: list[object]) -> object:
        sent.append(args)
        return real(keys=keys, args=args)

    monkeypatch.setattr(store, "_write", spy)
    assert store.write("s", 1, SlotState(applied=2, vectors={"t2": "BBBB", "t3": "CCCC"}),
                       {}, {}) == WRITTEN
    assert "AAAA" not in sent[0] and "BBBB" not in sent[0] and "CCCC" in sent[0]
    assert fields() == {"v:t2", "v:t3"}
    other = SlotTableStore(fake, store.keys)  # another worker: reads it whole
    assert other.state("s").vectors == {"t2": "BBBB", "t3": "CCCC"}
    # Written by an older build: the vectors inside the JSON, no epoch, no fields.
    fake.delete(key)
    fake.hset(key, mapping={"applied": 2, "state": SlotState(
        applied=2, vectors={"t4": "DDDD"}).model_dump_json()})
    legacy = other.state("s")
    assert legacy.vectors == {"t4": "DDDD"}
    assert other.write("s", 2, legacy.model_copy(update={"applied": 3}), {}, {}) == WRITTEN
    assert fields() == {"v:t4"} and b"DDDD" not in fake.hget(key, "state")
    assert SlotTableStore(fake, store.keys).state("s").vectors == {"t4": "DDDD"}
    # Another state at the same seq (a purge, then another worker): the fields this store
    # knew are not that state's, so every vector is sent and the others' are deleted.
    fake.delete(key)
    assert store.write("s", 0, SlotState(applied=3, vectors={"t1": "AAAA"}), {},
                       {}) == WRITTEN
    fake.delete(key)
    assert other.write("s", 0, SlotState(applied=3, vectors={"t9": "ZZZZ"}), {},
                       {}) == WRITTEN
    assert store.write("s", 3, SlotState(applied=4, vectors={"t1": "AAAA", "t2": "BBBB"}),
                       {}, {}) == WRITTEN
    assert fields() == {"v:t1", "v:t2"}


def test_proposals_jokes_and_requests_reported_change_nothing(store: SlotTableStore) -> None:
    """A chess club's secretary (writer d's non-change conversation, in other words): what
    members propose, what someone jokes or asks, and what an assistant weighs leave the
    club's arrangements current; before, each made the first statement history, and a
    question about club night got none of it."""
    keeper = CurrencyKeeper(store, ReflectionSettings())
    keeper.apply("s", items(
        "Our club meets every Tuesday 19:00 in the back room of Cafe Milena.",
        "Some members propose to change the championship to rapid 25+10.",
        "Rapid would fix the closing time, but it changes the character of the championship."
        " A middle way is 60+30, or adjourning games unfinished at 23:00.",
        "Pavel is joking we should move club night to the pub Zlaty Jelen.",
        "Also someone asked if club night can be Thursday instead.",
        "Break it down: flash layout, image verification, update protocol over UART."))
    view = store.view("s")
    assert "t1" not in view.replaced and not view.gone
