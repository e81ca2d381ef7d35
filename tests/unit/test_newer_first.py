"""The newer of two statements on one thing ranks first for a question about now
(`hivemem.domain.recall.newer_first`): which move, which never do, and the scores they take."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from hivemem.domain.recall.newer_first import Statement, newer_first


def _unit(*xs: float) -> npt.NDArray[np.float32]:
    v = np.array(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


VENUE = _unit(1.0, 0.1, 0.0)
VENUE_AGAIN = _unit(1.0, 0.3, 0.0)  # cosine ~0.98 with VENUE: the same thing
LUNCH = _unit(0.0, 0.1, 1.0)  # another thing


def _order(statements: list[Statement], moved: dict[str, float]) -> list[str]:
    return [s.key for s in sorted(statements, key=lambda s: -moved.get(s.key, s.final))]


def test_a_later_statement_on_the_same_thing_moves_just_above_the_earlier_one() -> None:
    statements = [
        Statement("hotel", 0.9, 1, "Planning day is at the Harbourside Hotel.", VENUE),
        Statement("lunch", 0.8, 3, "Lunch is from Olive & Fig.", LUNCH),
        Statement("library", 0.7, 5, "Planning day is at the Linden Room.", VENUE_AGAIN),
    ]
    moved = newer_first(statements)
    assert _order(statements, moved) == ["library", "hotel", "lunch"]
    # It takes the first place's score; the ones it passed take the places below.
    assert moved["library"] == 0.9
    assert moved["hotel"] == 0.8
    assert moved["lunch"] == 0.7


def test_nothing_moves_when_the_newer_one_already_leads_or_is_about_another_thing() -> None:
    assert newer_first([
        Statement("new", 0.9, 5, "Staging is on stg-eu-4 now.", VENUE),
        Statement("old", 0.8, 1, "Staging lives on stg-eu-2.", VENUE_AGAIN),
    ]) == {}
    assert newer_first([
        Statement("venue", 0.9, 1, "Planning day is at the Harbourside Hotel.", VENUE),
        Statement("lunch", 0.8, 5, "Lunch is from Green Bowl.", LUNCH),
    ]) == {}


def test_a_question_or_a_proposal_never_moves_up() -> None:
    for text in ("what if we did mongo just for attributes?",
                 "maybe we could move it to the Linden Room",
                 "nadia keeps pushing kubernetes"):
        assert newer_first([
            Statement("old", 0.9, 1, "The database is Postgres 16.", VENUE),
            Statement("new", 0.8, 5, text, VENUE_AGAIN),
        ]) == {}, text


def test_a_chain_of_changes_is_ordered_newest_first() -> None:
    statements = [
        Statement("first", 0.9, 1, "Budget is $40k.", VENUE),
        Statement("second", 0.85, 3, "Budget is $45k.", VENUE_AGAIN),
        Statement("third", 0.8, 5, "Budget is $42.5k.", VENUE),
    ]
    assert _order(statements, newer_first(statements)) == ["third", "second", "first"]


def test_only_the_best_ranked_are_reordered() -> None:
    statements = [Statement("old", 0.9, 1, "Planning day is at the Harbourside Hotel.", VENUE)]
    # (said newest first: they are already in order among themselves)
    statements += [Statement(f"other{i}", 0.8 - i / 100, 8 - i, f"Chatter {i}.", LUNCH)
                   for i in range(3)]
    statements.append(Statement("new", 0.1, 9, "Planning day is at the Linden Room.", VENUE))
    assert newer_first(statements, top=4) == {}
    assert _order(statements, newer_first(statements, top=5))[0] == "new"
