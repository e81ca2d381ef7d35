"""The change rules consolidation applies to every reflector's statements (heuristic here)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np

from hivemem.domain.consolidation import Plan, PlanContext, plan_actions
from hivemem.domain.episode import Episode
from hivemem.domain.fact import Fact, FactStatus
from hivemem.domain.models import Role, Turn
from hivemem.domain.recall.budget import Candidate, select
from hivemem.domain.recall.currency import (
    personal_statements,
    stale_statements,
    turn_key,
)
from hivemem.domain.recall.intent import read_query
from hivemem.domain.slots import canonical_slot, slot_of
from hivemem.providers.heuristic import HeuristicReflector
from hivemem.providers.reflector import ReflectionRequest

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


class Session:
    """Feeds statements one episode at a time, through the heuristic and consolidation."""

    def __init__(self) -> None:
        self.facts: dict[str, Fact] = {}
        self.episodes = 0
        self.last: Plan | None = None

    def say(self, *lines: str | tuple[str, str]) -> Plan:
        self.episodes += 1
        turns = []
        for i, line in enumerate(lines):
            agent, text = line if isinstance(line, tuple) else ("ana", line)
            turns.append(Turn(turn_id=f"e{self.episodes}t{i}", session_id="s", agent_id=agent,
                              role=Role.USER, content=text, seq=self.episodes * 10 + i,
                              timestamp=T0 + timedelta(hours=self.episodes, minutes=i),
                              token_count=len(text.split())))
        episode = Episode(episode_id=f"ep{self.episodes}", session_id="s", index=self.episodes,
                          turn_ids=tuple(t.turn_id for t in turns), seq_start=turns[0].seq,
                          seq_end=turns[-1].seq, started_at=turns[0].timestamp,
                          ended_at=turns[-1].timestamp, close_reason="manual")
        prior = [f for f in self.facts.values()
                 if f.status in (FactStatus.ACTIVE, FactStatus.CONFLICTED)]
        request = ReflectionRequest(session_id="s", episode=episode, turns=turns,
                                    prior_facts=prior)
        actions = HeuristicReflector().reflect(request).actions
        # As the reflect job does: consolidation also sees superseded versions (reverts).
        known = list(self.facts.values())
        plan = plan_actions(known, actions, PlanContext(
            session_id="s", episode_id=episode.episode_id, namespace="default",
            now=episode.ended_at, valid_from=episode.ended_at, similarity=lambda _c, _f: 0.0))
        self.facts.update(plan.writes)
        self.last = plan
        return plan

    def current(self) -> list[str]:
        return sorted(f.content for f in self.facts.values()
                      if f.status in (FactStatus.ACTIVE, FactStatus.CONFLICTED))

    def status_of(self, needle: str) -> list[FactStatus]:
        return [f.status for f in self.facts.values() if needle in f.content]


def test_slots_come_from_the_sentence() -> None:
    assert slot_of("We decided to use PostgreSQL for the database") == "database"
    assert slot_of("Change of plan: we switch the database to MySQL") == "database"
    assert slot_of("let's go with Jenkins") != "language"
    assert slot_of("I prefer Python 3.11", "sam") == "sam's preferred python version"
    assert canonical_slot("our DB") == canonical_slot("the database") == "database"


def test_same_slot_other_value_supersedes_with_or_without_update_words() -> None:
    s = Session()
    s.say("We decided to use PostgreSQL for the database.")
    s.say("We decided to use MySQL for the database.")  # same speaker, no update words
    assert s.status_of("PostgreSQL") == [FactStatus.SUPERSEDED]
    old = next(f for f in s.facts.values() if "PostgreSQL" in f.content)
    assert old.superseded_by and old.valid_to is not None and old.reason
    s.say("Actually, switch the database to SQLite instead.")
    assert s.current() == ["Actually, switch the database to SQLite instead."]


def test_retractions_retire_without_a_successor() -> None:
    for retraction in ("Scrap that.", "The Friday deploy freeze is lifted.",
                       "We're not doing the Friday deploy freeze."):
        s = Session()
        s.say("Decision: we keep a Friday deploy freeze for the release.")
        plan = s.say(retraction)
        assert plan.retracted and plan.added == []
        assert s.current() == [], retraction
        gone = s.facts[plan.retracted[0]]
        assert gone.status == FactStatus.ARCHIVED and gone.superseded_by is None
        assert gone.reason and gone.reason.startswith("retracted")


def test_a_revert_is_a_new_version_with_history_intact() -> None:
    s = Session()
    s.say("We decided to use PostgreSQL for the database.")
    s.say("Actually, switch the database to MySQL.")
    s.say("Change of plan: switch the database back to PostgreSQL.")
    chain = sorted(s.facts.values(), key=lambda f: f.version)
    assert [f.version for f in chain] == [1, 2, 3]
    assert [f.status for f in chain] == [FactStatus.SUPERSEDED, FactStatus.SUPERSEDED,
                                         FactStatus.ACTIVE]
    assert "PostgreSQL" in chain[-1].content


def test_additions_never_supersede() -> None:
    s = Session()
    s.say("We decided to use PostgreSQL for caching.")
    s.say("We also use Redis for caching.")
    assert s.status_of("PostgreSQL") == [FactStatus.ACTIVE]


def test_questions_hypotheticals_and_rejected_proposals_change_nothing() -> None:
    s = Session()
    s.say("We decided to use PostgreSQL for the database.")
    for line in ("What if we used MySQL for the database?",
                 "We considered Mongo for the database but stay with Postgres.",
                 "Should we switch the database to MySQL?"):
        plan = s.say(line)
        assert plan.added == [] and plan.superseded == [], line
    assert s.status_of("PostgreSQL") == [FactStatus.ACTIVE]


def test_personal_slots_change_only_by_their_owner() -> None:
    s = Session()
    s.say(("sam", "I prefer Python 3.11."))
    s.say(("kim", "I prefer Python 3.12."))
    assert sorted(s.current()) == ["I prefer Python 3.11.", "I prefer Python 3.12."]
    s.say(("sam", "Actually I prefer Python 3.13 now."))
    assert s.status_of("3.11") == [FactStatus.SUPERSEDED]
    assert s.status_of("3.12") == [FactStatus.ACTIVE]


def test_two_people_without_update_words_conflict_both_visible() -> None:
    s = Session()
    s.say(("ana", "We decided to use PostgreSQL for the database."))
    s.say(("ben", "We decided to use MySQL for the database."))
    assert sorted(s.status_of("PostgreSQL") + s.status_of("MySQL")) == [
        FactStatus.CONFLICTED, FactStatus.CONFLICTED]
    # A team slot changes by anyone with update language.
    s.say(("ben", "Change of plan: switch the database to SQLite."))
    assert s.status_of("SQLite") == [FactStatus.ACTIVE]
    assert s.status_of("PostgreSQL") == [FactStatus.SUPERSEDED]


def test_an_empty_subject_is_still_versioned() -> None:
    s = Session()
    s.say("Let's go with Jenkins.")
    s.say("Actually, replace Jenkins with GitHub Actions.")
    assert s.status_of("go with Jenkins") == [FactStatus.SUPERSEDED]


def test_plain_statements_of_a_value_are_facts_and_versioned() -> None:
    s = Session()
    s.say("The weekly production deploy is run by Priya.")
    s.say("The weekly production deploy is run by Tomasz.")
    assert s.status_of("Priya") == [FactStatus.SUPERSEDED]
    assert s.status_of("Tomasz") == [FactStatus.ACTIVE]
    # A day or a date alone makes no reflected fact (chat names one in passing far more
    # often than it sets one, measured on LoCoMo): the currency keeper reads those
    # (tests/unit/test_currency_keeper.py).
    assert s.say("The weekly production deploy is on Tuesday.").added == []
    # Numbers are values: "1 hour" and "15 minutes" differ ("1" is no prefix of "15").
    s.say("Product pages are cached for 1 hour.")
    s.say("Product pages are cached for 15 minutes.")
    assert s.status_of("1 hour") == [FactStatus.SUPERSEDED]
    # Chatter that sets nothing is no fact.
    plan = s.say("Recorded as the messaging decision.")
    assert plan.added == []


def test_a_revert_names_the_old_value_and_replaces_what_replaced_it() -> None:
    s = Session()
    s.say("Decision: continuous integration runs on Jenkins.")
    s.say("We're switching CI to GitHub Actions, the hosted runners are simpler.")
    assert s.status_of("Jenkins") == [FactStatus.SUPERSEDED]
    s.say("We're going back to Jenkins, the hosted runners don't work for us.")
    assert s.status_of("GitHub Actions") == [FactStatus.SUPERSEDED]
    assert s.current() == ["We're going back to Jenkins, the hosted runners don't work for us."]


def test_a_retraction_names_the_statement_that_replaces_the_old_one_in_recall() -> None:
    s = Session()
    s.say("Sam: Don't use the staging cluster, it's broken.")
    plan = s.say("Sam: Staging is fine again, ops added disk space.")
    gone = s.facts[plan.retracted[0]]
    assert gone.retracted_by == ["e2t0"]
    stale = stale_statements(s.facts.values())
    assert stale[turn_key("s", "e1t0")] == (turn_key("s", "e2t0"),)


def test_a_question_about_a_slot_is_answered_by_its_fact() -> None:
    s = Session()
    s.say("Sprint review happens in the Orion room.")
    plan = s.say("What if we held the sprint review in the Vega room instead?")
    assert plan.added == [] and plan.superseded == []
    fact = next(f for f in s.facts.values() if "Orion" in f.content)
    assert fact.considered_in == ["e2t0"] and fact.status == FactStatus.ACTIVE
    stale = stale_statements(s.facts.values())
    assert f"fact:{fact.fact_id}" in stale[turn_key("s", "e2t0")]
    assert turn_key("s", "e1t0") not in stale  # the answer itself is current


def test_a_repeat_of_a_known_value_is_history_with_it() -> None:
    s = Session()
    s.say("Switch the formatter to autopep8, it's less intrusive.",
          "Done, the hook runs autopep8.")
    fact = next(f for f in s.facts.values() if f.status == FactStatus.ACTIVE)
    assert fact.mentioned_in == ["e1t1"] and fact.source_turn_ids == ["e1t0"]
    s.say("Switch the formatter to Black again.")
    stale = stale_statements(s.facts.values())
    assert turn_key("s", "e1t1") in stale and turn_key("s", "e1t0") in stale


def test_an_acknowledgement_names_the_slot_of_the_statement_it_confirms() -> None:
    turns = [
        Turn(turn_id="a", session_id="s", role=Role.USER, seq=1, timestamp=T0, token_count=8,
             content="New services should log with loguru, it's simple."),
        Turn(turn_id="b", session_id="s", role=Role.ASSISTANT, seq=2, token_count=5,
             timestamp=T0 + timedelta(seconds=5), content="Noted as the logging standard."),
    ]
    episode = Episode(episode_id="ep", session_id="s", index=1, turn_ids=("a", "b"),
                      seq_start=1, seq_end=2, started_at=T0, ended_at=turns[1].timestamp,
                      close_reason="manual")
    actions = HeuristicReflector().reflect(ReflectionRequest(
        session_id="s", episode=episode, turns=turns, prior_facts=[])).actions
    assert [(a.subject, a.source_turn_ids) for a in actions] == [("logging standard", ["a", "b"])]
    assert actions[0].content == "New services should log with loguru, it's simple."


def test_a_personal_slot_named_with_my_is_the_speakers_own() -> None:
    assert slot_of("Sam: My preferred editor is Neovim", "sam") == "sam's preferred editor"
    s = Session()
    s.say(("sam", "Sam: My preferred editor is Neovim, please set up the dev VM with it."))
    s.say(("priya", "Priya: Actually, I've switched to Emacs myself, put it on my VM."))
    assert s.status_of("Neovim") == [FactStatus.ACTIVE]


def test_near_duplicates_that_set_another_value_are_both_kept() -> None:
    vector = np.ones(4, dtype=np.float32) / 2.0
    old = Candidate(key="t1", text="The weekly deploy is on Tuesday.", score=1.0,
                    token_count=8, vector=vector)
    new = Candidate(key="t2", text="The weekly deploy is on Thursday.", score=0.9,
                    token_count=8, vector=vector)
    same = Candidate(key="t3", text="The weekly deploy is on Tuesday!", score=0.8,
                     token_count=8, vector=vector)
    chosen, excluded = select([old, new, same], budget=100, min_score=0.0,
                              dedup_threshold=0.95, quotas={})
    assert [c.key for c in chosen] == ["t1", "t2"]
    assert [(x.candidate.key, x.reason) for x in excluded] == [("t3", "duplicate")]


def test_a_rejection_naming_a_value_asked_about_earlier_is_answered_by_the_same_fact() -> None:
    s = Session()
    s.say("Feature flags are managed in LaunchDarkly.")
    s.say(("priya", "Priya: I propose we move flags to Unleash and self-host it."))
    fact = next(f for f in s.facts.values() if "LaunchDarkly" in f.content)
    assert fact.considered_in == ["e2t0"] and fact.considered_values == ["unleash"]
    s.say("We discussed it in the architecture meeting and rejected the Unleash proposal.")
    fact = s.facts[fact.fact_id]
    assert fact.considered_in == ["e2t0", "e3t0"] and fact.status == FactStatus.ACTIVE


def test_another_persons_own_slot_is_known_when_a_query_names_someone() -> None:
    s = Session()
    s.say(("sam", "Sam: I'm based in Lisbon."))
    s.say(("priya", "Priya: I moved to Porto last month."))
    personal = personal_statements(s.facts.values())
    assert personal[turn_key("s", "e1t0")] == "sam"
    assert personal[turn_key("s", "e2t0")] == "priya"
    known = set(personal.values())
    assert read_query("Which city is Sam based in?").people_named(known) == {"sam"}
    assert read_query("Where does everyone live?").people_named(known) == set()


def test_another_persons_own_statement_ranks_below_zero_for_a_question_about_someone() -> None:
    from hivemem.domain.recall.policy import PRESETS
    from hivemem.domain.recall.scoring import Signals, score_candidates

    mine = Signals(key="turn:s:a", source="turn", session_id="s", dense=0.5, seq=1)
    theirs = Signals(key="turn:s:b", source="turn", session_id="s", dense=0.5, seq=2,
                     other_person=True)
    scores = score_candidates([mine, theirs], PRESETS["balanced"], current_session="s",
                              newest_seq=2)
    assert scores["turn:s:b"].other_person == 1.0
    assert scores["turn:s:b"].final < 0 < scores["turn:s:a"].final
