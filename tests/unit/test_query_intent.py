"""A recall query is read once into a `QueryIntent` (hivemem.domain.recall.intent)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from hivemem import MemoryClient, Settings
from hivemem.domain.recall.intent import QueryIntent, TimeExpression, read_query
from hivemem.domain.recall.policy import PRESETS
from hivemem.domain.recall.scoring import Signals, score_candidates
from hivemem.providers.embedders import HashingEmbedder
from hivemem.recall import recaller

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def times(query: str) -> list[tuple[str, str, int | None, int | None, int | None]]:
    return [(t.text, t.kind, t.day, t.month, t.year) for t in read_query(query).times]


def test_people_named_are_the_known_speakers_among_the_words() -> None:
    intent = read_query("Is Mel's cat older than Caroline's? Ask planner-bot")
    assert intent.people_named({"mel", "caroline", "sam", "planner-bot"}) == {
        "mel", "caroline", "planner-bot"}
    assert intent.people_named({"planner"}) == set()  # a word, not part of one
    assert read_query("Where does everyone live?").people_named({"sam"}) == set()
    assert read_query("WHERE IS SAM").people_named({"sam"}) == {"sam"}


@pytest.mark.parametrize(("query", "past", "latest"), [
    ("what did we use before MySQL?", True, False),
    ("which database did we originally pick?", True, False),
    ("what was the timeout previously", True, False),
    ("which database are we using now?", False, True),
    ("What is the current session timeout?", False, True),
    ("is it still Redis these days", False, True),
    ("what did we use before, and what is it now?", True, True),
    ("When did Caroline go to the support group?", False, False),
])
def test_past_and_latest(query: str, past: bool, latest: bool) -> None:
    intent = read_query(query)
    assert (intent.past, intent.latest) == (past, latest)


@pytest.mark.parametrize(("query", "past"), [
    # A state that did not last, or never came to be, is the past.
    ("What seat did I switch to briefly?", True),
    ("Which tool did we almost switch paging to?", True),
    ("Which colour did my partner want to switch to?", True),
    # Those words about what holds now, or a wish that is no change, are not.
    ("Is the bus almost full?", False),
    ("Which feature is temporarily disabled?", False),
    ("What did Sam want to eat?", False),
])
def test_a_state_that_did_not_last_is_the_past(query: str, past: bool) -> None:
    assert read_query(query).past == past


@pytest.mark.parametrize(("query", "expected"), [
    ("what did we decide yesterday?", [("yesterday", "relative", None, None, None)]),
    ("anything from last week", [("last week", "relative", None, None, None)]),
    ("two weeks ago we deployed", [("two weeks ago", "relative", None, None, None)]),
    ("the plan for this morning", [("this morning", "relative", None, None, None)]),
    ("what happened in March?", [("in March", "month", None, 3, None)]),
    ("since Sept 2023", [("since Sept 2023", "month", None, 9, 2023)]),
    ("early June", [("early June", "month", None, 6, None)]),
    ("what did we ship in 2024", [("in 2024", "year", None, None, 2024)]),
    ("2024", [("2024", "year", None, None, 2024)]),
    ("on 2024-03-05 the cluster went down", [("2024-03-05", "date", 5, 3, 2024)]),
    ("the launch on March 5th, 2024", [("on March 5th, 2024", "date", 5, 3, 2024)]),
    ("due the 3rd of May", [("the 3rd of May", "date", 3, 5, None)]),
    ("what did Sam say last Friday", [("last Friday", "weekday", None, None, None)]),
    ("yesterday and in March 2023", [("yesterday", "relative", None, None, None),
                                     ("in March 2023", "month", None, 3, 2023)]),
])
def test_time_expressions(query: str, expected: list[tuple[object, ...]]) -> None:
    assert times(query) == expected


@pytest.mark.parametrize("query", [
    "this may take a while",
    "we march on",
    "which port, 8080 or 9000?",
    "what is the current session timeout?",
])
def test_no_time_where_none_is_named(query: str) -> None:
    assert read_query(query).times == ()


def test_a_full_date_is_one_expression_not_also_a_year() -> None:
    assert read_query("on 2024-03-05").times == (
        TimeExpression("2024-03-05", "date", day=5, month=3, year=2024),)


def test_scoring_takes_past_and_latest_from_the_intent() -> None:
    policy = PRESETS["balanced"]
    sig = [Signals("old", "turn", "s", dense=0.62, seq=2),
           Signals("new", "turn", "s", dense=0.55, seq=30, stale=False),
           Signals("gone", "turn", "s", dense=0.7, seq=3, stale=True, successors=("new",))]
    # A question about a speaker ("what port does Sam use?") ranks by relevance.
    about_sam = score_candidates(sig, policy, current_session="s", newest_seq=30,
                                 intent=read_query("which port does sam use").among(["sam"]))
    assert about_sam["old"].final > about_sam["new"].final > about_sam["gone"].final
    # A question about what holds now of a thing, said so or not: the newer one first.
    for asked in ("which port do we use now", "which port do we use"):
        latest = score_candidates(sig, policy, current_session="s", newest_seq=30,
                                  intent=read_query(asked).among(["sam"]))
        assert latest["new"].final > latest["old"].final > latest["gone"].final, asked
    past = score_candidates(sig, policy, current_session="s", newest_seq=30,
                            intent=read_query("which port did we use before"))
    assert past["gone"].final > past["new"].final  # the old value is the answer


def test_a_question_about_the_state_of_a_thing_is_not_one_about_a_speaker() -> None:
    for asked in ("which branch do I open PRs against?", "staging namespace?",
                  "where's the party happening?"):
        assert read_query(asked).among(["mia", "bot"]).asks_state, asked
    for asked in ("What does Melanie do to destress?",  # a speaker's life
                  "How long have Mel and her husband been married?",  # by a short name
                  "which port did we use before?",  # the past
                  "When did Mia go to the conference?",  # an event
                  ""):
        assert not read_query(asked).among(["melanie", "mia"]).asks_state, asked


def test_one_recall_reads_its_query_once(
    tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    read: list[str] = []

    def counted(text: str) -> QueryIntent:
        read.append(text)
        return read_query(text)

    monkeypatch.setattr(recaller, "read_query", counted)
    with MemoryClient.local(tmp_path / "m", settings, embedder=HashingEmbedder(1024)) as client:
        for i, (agent, text) in enumerate((("sam", "We deploy to Fly.io"),
                                           ("priya", "We moved the deploys to Render"))):
            client.ingest("s", "user", text, agent_id=agent, turn_id=f"t{i}",
                          timestamp=T0 + timedelta(minutes=i))
        client.wait_until_processed("s", 30)
        items = list(client.recall("s", "Where did Sam say we deploy now?", 500))
    assert items and read == ["Where did Sam say we deploy now?"]


def test_the_state_after_someones_change_is_asked_about_now() -> None:
    for asked in ("What's the coder agent's daily cap after Hamid's change?",
                  "How much traffic does the canary get after Sven's objection?"):
        assert read_query(asked).current, asked
    # An event after something is not: "after the race" asks what happened.
    assert not read_query("What did Caroline do after the race?").current


@pytest.mark.parametrize("query", [
    "How many seconds can an upload take before failing now?",
    "what's the current wait before retrying a webhook?",
    "how long does a session last these days before expiring",
    # asked in the present tense, with no word of the past or an event
    "how many retries before giving up?",
    "how many retries do jobs get before landing in the DLQ?",
])
def test_before_a_verb_in_a_question_about_now_is_a_condition_not_the_past(query: str) -> None:
    intent = read_query(query)
    assert not intent.past
    assert intent.current


@pytest.mark.parametrize("query", [
    "which queue did we use before moving to Kafka now?",  # a change: the old value answers
    "Which city was she in before traveling to Chicago?",
    "What did Jean go through before meeting Maria?",  # an event, then
])
def test_before_a_change_or_without_now_still_asks_about_the_past(query: str) -> None:
    assert read_query(query).past


@pytest.mark.parametrize("query", [
    "Which caterer did we end up hiring?",
    "what font did they go with for the logo",
    "Did we finally settle on a venue?",
    "did you switch the CI runners to ARM?",
    "Have we moved the backups to the new bucket?",
])
def test_the_outcome_of_a_choice_is_asked_about_now(query: str) -> None:
    intent = read_query(query)
    assert intent.latest and intent.current and not intent.past


@pytest.mark.parametrize("query", [
    "When did we switch the CI runners to ARM?",
    "Why did they go with the cheaper caterer?",
    "What did Anna and Tom end up playing at the fair?",  # people named: an event
])
def test_when_or_why_a_choice_was_made_or_what_others_did_is_not_read_as_now(
        query: str) -> None:
    assert not read_query(query).latest


def test_a_possessive_asks_about_a_speaker_only_when_that_person_is_one() -> None:
    asked = read_query("When is Nia's first day?")
    assert asked.possessed == {"nia"}
    # While the speakers are unknown, any person's something is read as about a speaker.
    assert not asked.current and asked.may_be_current
    # Nia is the new hire the chat is about, not one of its speakers: a question about now.
    assert asked.among({"grace", "onboard-bot"}).current
    # "What is Caroline's identity?" in Caroline's own chat asks about her, not about now.
    assert not read_query("What is Caroline's identity?").among({"caroline", "mel"}).current
