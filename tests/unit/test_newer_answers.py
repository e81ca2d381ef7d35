"""The newest answer to a question about now (`hivemem.domain.recall.answers`): of two
statements on one thing that both answer the question, the later one replaces the earlier
when it says a value of the same kind in place of one the earlier one says."""

from __future__ import annotations

import numpy as np

from hivemem.domain.recall.answers import Answer, newer_answers


def _unit(*xs: float) -> np.ndarray:
    v = np.asarray(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


SAME = _unit(1, 0, 0)
NEAR = _unit(1, 0.3, 0)  # cos ~0.96 with SAME
OTHER = _unit(0, 1, 0)   # another thing


def _pair(old: str, new: str, *, new_vector: np.ndarray = NEAR, seq: int = 9,
          relevance: tuple[float, float] = (0.5, 0.5)) -> dict[int, int]:
    """`newer_answers` of an earlier statement (seq 1) and a later one."""
    return newer_answers([Answer(1, old, SAME, relevance[0]),
                          Answer(seq, new, new_vector, relevance[1])])


def test_a_later_count_with_the_same_unit_replaces_the_earlier() -> None:
    assert _pair("we're 6 engineers, 48 points per sprint",
                 "From the 3rd: 8 engineers, 64 points per sprint") == {0: 1}


def test_order_is_the_sessions_not_the_lists() -> None:
    answers = [Answer(9, "From the 3rd: 8 engineers", NEAR, 0.5),
               Answer(1, "we're 6 engineers", SAME, 0.5)]
    assert newer_answers(answers) == {1: 0}


def test_another_thing_replaces_nothing() -> None:
    assert _pair("we're 6 engineers", "we have 8 engineers", new_vector=OTHER) == {}


def test_a_proposal_replaces_nothing() -> None:
    assert _pair("the limit is 100 requests per minute",
                 "what if we raised it to 500 requests per minute?") == {}


def test_a_restatement_or_an_addition_replaces_nothing() -> None:
    assert _pair("the limit is 100 requests per minute",
                 "yes, 100 requests per minute, burst 20 on top", seq=5) == {}


def test_loose_kinds_do_not_pair_alone() -> None:
    # Any capitalised word reads as a name, a clock time is as often another option.
    assert _pair("The 14:00 from Waverley, or the 15:00",
                 "Updated: the 7:40 from King's Cross") == {}
    assert _pair("logs ship with Promtail", "OTel Collector as the single agent") == {}


def test_statements_far_from_the_question_are_not_read() -> None:
    assert _pair("we're 6 engineers", "From the 3rd: 8 engineers",
                 relevance=(0.9, 0.2)) == {}
    # ...nor is a later one much less about the question than the earlier, on a
    # neighbouring slot (its vector only as close as one topic's, cos ~0.7)...
    assert _pair("we're 6 engineers", "From the 3rd: 8 engineers",
                 new_vector=_unit(1, 1, 0), relevance=(0.7, 0.5)) == {}


def test_a_restatement_less_close_to_the_question_by_its_wording_replaces() -> None:
    # ...but one that says nearly the same thing (cos >= 0.85) differs from the question by
    # its wording, not by what it is about.
    assert _pair("All worker Dockerfiles use python:3.11-slim as the base image.",
                 "Thanks. I see it: all 5 worker Dockerfiles now build FROM python:3.12-slim."
                 " Images rebuilt and pushed.", relevance=(0.73, 0.66)) == {0: 1}
    assert _pair("All worker Dockerfiles use python:3.11-slim as the base image.",
                 "All worker Dockerfiles now build FROM python:3.12-slim.",
                 new_vector=_unit(1, 1, 0), relevance=(0.73, 0.66)) == {}


def test_an_image_tag_replaces_the_tag_of_the_same_image_only() -> None:
    assert _pair("the base image is python:3.11-slim", "base image: python:3.12-slim") == {0: 1}
    assert _pair("we run node:20-alpine", "we run node:22-alpine") == {0: 1}
    assert _pair("the base image is python:3.11-slim", "the base image is node:20") == {}
    # A host's port is no tag.
    assert _pair("the db is at db:5432", "the db is at db:6432") == {}


def test_the_newest_of_a_chain_is_the_successor() -> None:
    answers = [Answer(1, "Biscuit gets 250 g a day", SAME, 0.5),
               Answer(4, "Updated: 200 g a day", NEAR, 0.5),
               Answer(7, "Corrected: 220 g a day", NEAR, 0.5)]
    assert newer_answers(answers) == {0: 2, 1: 2}


def test_many_candidates_are_compared_in_pieces_and_every_pair_is_found() -> None:
    # 80 candidates: the pairwise product is cut into pieces (OpenBLAS's thread pool is
    # kept out); the one pair on one thing, first and last, is still found.
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(80, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors[79] = vectors[0]
    answers = [Answer(i, f"note {i}: 5 engineers", vectors[i], 0.5) for i in range(80)]
    answers[0] = Answer(0, "we're 6 engineers", vectors[0], 0.5)
    answers[79] = Answer(79, "From the 3rd: 8 engineers", vectors[79], 0.5)
    assert newer_answers(answers) == {0: 79}


def test_a_number_that_names_which_one_replaces_nothing() -> None:
    # "note 3", "Sprint 19", a bare number: which one, not how much.
    for old, new in (("note 3 on topic alpha", "note 7 on topic alpha"),
                     ("Sprint 18 goal: ship bulk edit", "Sprint 19 goal: ship the importer"),
                     ("the answer is 42", "the answer is 43")):
        assert _pair(old, new) == {}, (old, new)
    # A number before what it counts or measures is a quantity.
    for old, new in (("we're 6 engineers", "we're 8 engineers now"),
                     ("the budget is $45 a seat", "the budget is $52 a seat"),
                     ("the runtime is v3.11.2", "the runtime is v3.12.0")):
        assert _pair(old, new) == {0: 1}, (old, new)
