"""The change rules consolidation applies to every reflector's statements (heuristic here)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hivemem.domain.consolidation import Plan, plan_actions
from hivemem.domain.episode import Episode
from hivemem.domain.fact import Fact, FactStatus
from hivemem.domain.models import Role, Turn
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
        plan = plan_actions(prior, actions, session_id="s", episode_id=episode.episode_id,
                            namespace="default", now=episode.ended_at,
                            valid_from=episode.ended_at, similarity=lambda _c, _f: 0.0)
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
