"""Provenance and authority: which turns a fact came from, and whose it is (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hivemem.domain.authority import Author, author_of, episode_author
from hivemem.domain.fact import Fact
from hivemem.domain.models import Role, Turn
from hivemem.domain.provenance import sources_of

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def turn(i: int, text: str, agent: str = "yara", visibility: str = "shared") -> Turn:
    return Turn(turn_id=f"t{i}", session_id="s", agent_id=agent, role=Role.USER, content=text,
                timestamp=T0 + timedelta(minutes=i), seq=i, token_count=3,
                visibility=visibility)  # type: ignore[arg-type]


TURNS = [turn(1, "Morning all."), turn(2, "We moved the launch to May 3."),
         turn(3, "The API gateway is Kong.", "xavi", "private")]


def ids(turns: list[Turn]) -> list[str]:
    return [t.turn_id for t in turns]


def test_a_claimed_turn_that_states_it_is_the_source() -> None:
    assert ids(sources_of("The launch is May 3.", ["t2"], TURNS)) == ["t2"]


def test_a_wrong_claim_is_replaced_by_the_turns_that_state_it() -> None:
    assert ids(sources_of("The launch is May 3.", ["t1"], TURNS)) == ["t2"]
    assert ids(sources_of("The launch is May 3.", ["<turn id>"], TURNS)) == ["t2"]


def test_a_claim_nothing_supports_is_not_believed() -> None:
    assert sources_of("We deploy with Kubernetes on AWS.", ["t1"], TURNS) == []


def test_claimed_turns_may_state_it_together() -> None:
    facts = "Morning launch gateway."  # a third of it from each turn
    assert ids(sources_of(facts, ["t1", "t2", "t3"], TURNS)) == ["t1", "t2", "t3"]
    assert sources_of(facts, ["t1"], TURNS) == []


def test_words_from_a_private_turn_make_the_fact_private() -> None:
    """Half the words from a shared turn state it loosely; the rest came from a private one."""
    facts = "Kong is the gateway and the launch moved to May 3."
    assert ids(sources_of(facts, ["t2"], TURNS)) == ["t2"]
    assert author_of(facts, ["t2"], TURNS, "yara") == Author("private", "xavi")


def test_a_fact_is_as_private_as_any_turn_that_states_it() -> None:
    assert author_of("The API gateway is Kong.", ["t1"], TURNS, "yara") == Author(
        "private", "xavi")
    assert author_of("The launch is May 3.", ["t2"], TURNS, "yara") == Author("shared", "yara")
    # Nothing supports it: the whole episode's, which holds a private turn.
    assert author_of("Invented.", [], TURNS, "yara") == Author("private", "xavi")
    assert episode_author(TURNS[:2]) == Author("shared", None)


def test_who_may_change_what() -> None:
    def fact(visibility: str, agent: str | None) -> Fact:
        return Fact(fact_id="f", session_id="s", content="x", agent_id=agent,
                    visibility=visibility, created_at=T0, valid_from=T0)  # type: ignore[arg-type]

    shared, xavis, yaras = fact("shared", "yara"), fact("private", "xavi"), fact("private", "yara")
    assert Author("shared", "yara").may_change(shared)
    assert Author("shared", "yara").may_change(yaras)
    assert not Author("shared", "yara").may_change(xavis)
    assert not Author("private", "xavi").may_change(shared)
    assert Author("private", "xavi").may_see(shared) and Author("private", "xavi").may_change(xavis)
    assert not Author("private", None).may_change(xavis)
