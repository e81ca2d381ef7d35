import json
from pathlib import Path

import pytest

from hivemem.domain.markers import ORDER, detect_markers, merge_markers
from hivemem.domain.models import BUILTIN_MARKERS

LABELLED = Path(__file__).resolve().parent.parent / "data" / "markers_labelled.jsonl"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Let's go with Postgres for the event store.", ("decision",)),
        ("We decided to drop Python 3.9 support.", ("decision",)),
        ("Switch to uv for dependency management.", ("decision",)),
        ("I went with the cheaper hosting plan in the end.", ("decision",)),
        ("You must not log any user emails.", ("constraint",)),
        ("Never push directly to main.", ("constraint",)),
        ("The payload can't exceed 1 MB.", ("constraint",)),
        ("No more than 3 concurrent requests per worker.", ("constraint",)),
        ("That failed again with the same stack trace.", ("failure",)),
        ("The worker crashed after about 10k messages.", ("failure",)),
        ("Got a KeyError when the field is missing.", ("failure",)),
        ("The request timed out after 30 seconds.", ("failure",)),
        ("The goal is to get p95 latency under 50 ms.", ("goal",)),
        ("I want to run a half marathon by next spring.", ("goal",)),
        ("We aim to cut cloud costs by 30% this quarter.", ("goal",)),
    ],
)
def test_detects_ordinary_phrasings(text: str, expected: tuple[str, ...]) -> None:
    assert detect_markers(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "Should we use Postgres?",  # question
        "Did it fail?",
        "If we used Kafka, would we still need Redis?",  # hypothetical
        "If the build fails, ping me.",
        "We considered MongoDB but never really evaluated it.",  # not chosen
        "I was thinking maybe we go with Vue, but I'm not sure yet.",  # hedged
        "We haven't decided on a venue yet.",
        "You must be tired after that trip!",  # epistemic must
        "It must have been amazing to see the northern lights.",
        "Must feel great to see your script come alive!",
        "There must be a better way to do this.",
        "Never mind, I found the file.",
        "I've never been to Paris.",
        "Never give up!",  # encouragement, not a rule
        "Don't worry, it's no big deal.",
        "I want to say thanks for all your help last week.",  # not a goal
        "I'd love to try it!",
        "It worked! The tests are green now.",  # success
        "No errors in the logs since the restart.",
        "The job didn't fail this time.",
        "Nothing broke during the upgrade, surprisingly.",
        "I broke my personal record in the 5k!",
        "The waves were crashing on the rocks.",
        "Tuesday doesn't work for me, how about Wednesday?",
        "My son scored his first goal at soccer practice!",
        'In the movie the old man tells her "you must never go back".',  # quoted speech
        "I went hiking with my kids last weekend.",
        "",
        "   ",
    ],
)
def test_near_misses_get_no_marker(text: str) -> None:
    assert detect_markers(text) == ()


def test_statement_before_a_question_tail_counts() -> None:
    assert detect_markers("I decided to take the job in Seattle, can you believe it?") == (
        "decision",
    )


def test_explicit_prefixes_always_count() -> None:
    assert detect_markers("DECISION: ship on Friday") == ("decision",)
    assert detect_markers("Constraint: one VM only") == ("constraint",)
    assert detect_markers("failure: summarizer returned nothing") == ("failure",)
    assert detect_markers("Goal:   full trace coverage") == ("goal",)


def test_fixed_order_and_several_markers() -> None:
    text = "The goal is to ship by Friday. The deploy crashed, so we decided to roll back."
    assert detect_markers(text) == ("decision", "failure", "goal")
    assert detect_markers("Goal: cut latency. Constraint: no new infrastructure.") == (
        "constraint",
        "goal",
    )


def test_tool_turns_are_only_checked_for_failures() -> None:
    text = "We decided to use Redis. Error: connection refused on port 6379."
    assert detect_markers(text, role="tool") == ("failure",)
    assert detect_markers(text, role="user") == ("decision", "failure")


def test_deterministic_and_curly_apostrophes() -> None:
    text = "We\u2019ve decided to switch to gRPC; it can\u2019t exceed 2 MB."
    assert detect_markers(text) == ("decision", "constraint")
    assert all(detect_markers(text) == ("decision", "constraint") for _ in range(5))


# -- merge rule ----------------------------------------------------------------------------


def test_merge_without_caller_markers_takes_detection() -> None:
    assert merge_markers((), ("failure", "goal")) == ("failure", "goal")


def test_merge_any_builtin_from_caller_switches_detection_off() -> None:
    assert merge_markers(("decision",), ("failure", "goal")) == ("decision",)
    assert merge_markers(("custom:x", "constraint"), ("goal",)) == ("custom:x", "constraint")


def test_merge_custom_markers_never_suppress_detection() -> None:
    assert merge_markers(("custom:billing",), ("goal",)) == ("custom:billing", "goal")


def test_merge_keeps_caller_order_dedupes_and_ignores_detected_customs() -> None:
    assert merge_markers(("goal", "custom:a", "goal"), ()) == ("goal", "custom:a")
    assert merge_markers(("custom:a",), ("custom:b", "failure", "failure")) == (
        "custom:a",
        "failure",
    )


# -- labelled set --------------------------------------------------------------------------


def _labelled() -> list[dict[str, object]]:
    with open(LABELLED, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def test_labelled_set_shape() -> None:
    rows = _labelled()
    assert len(rows) >= 200
    assert len({r["text"] for r in rows}) == len(rows)
    for r in rows:
        assert isinstance(r["text"], str) and r["text"].strip()
        assert isinstance(r["markers"], list) and set(r["markers"]) <= BUILTIN_MARKERS
    for marker in ORDER:
        assert sum(marker in r["markers"] for r in rows) >= 40, marker  # type: ignore[operator]
    assert sum(not r["markers"] for r in rows) >= 60
    assert sum(len(r["markers"]) >= 2 for r in rows) >= 5  # type: ignore[arg-type]


@pytest.mark.parametrize("marker", ORDER)
def test_precision_and_recall_on_labelled_set(marker: str) -> None:
    tp = fp = fn = 0
    misses = []
    for r in _labelled():
        got = marker in detect_markers(str(r["text"]))
        want = marker in r["markers"]  # type: ignore[operator]
        tp += got and want
        fp += got and not want
        fn += want and not got
        if got != want:
            misses.append(r["text"])
    precision = tp / (tp + fp)
    recall = tp / (tp + fn)
    assert precision >= 0.9, (precision, misses)
    assert recall >= 0.75, (recall, misses)
