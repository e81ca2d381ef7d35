from datetime import datetime, timedelta, timezone

import pytest

from hivemem.config import IngestSettings
from hivemem.domain.turn import TurnDraft, check_budget, check_query
from hivemem.errors import ValidationError

S = IngestSettings(max_content_bytes=100, max_metadata_bytes=200)


def draft(**kw: object) -> TurnDraft:
    args: dict[str, object] = {"session_id": "s1", "role": "user", "content": "hello"}
    args.update(kw)
    return TurnDraft(
        args.pop("session_id"), args.pop("role"), args.pop("content"), settings=S, **args  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"content": ""}, "content"),
        ({"content": "   \n\t"}, "content"),
        ({"content": "x" * 101}, "content"),
        ({"content": "é" * 51}, "content"),  # 102 bytes in UTF-8
        ({"content": 42}, "content"),
        ({"content": None}, "content"),
        ({"content": "bad \ud800 surrogate"}, "content"),
        ({"role": "robot"}, "role"),
        ({"role": None}, "role"),
        ({"session_id": ""}, "session_id"),
        ({"session_id": "a b"}, "session_id"),
        ({"session_id": "x" * 129}, "session_id"),
        ({"session_id": "s*"}, "session_id"),
        ({"session_id": "{s}"}, "session_id"),
        ({"session_id": 7}, "session_id"),
        ({"agent_id": "bad/agent"}, "agent_id"),
        ({"markers": ["decision", "important"]}, "markers"),
        ({"markers": "decision"}, "markers"),
        ({"markers": ["custom:"]}, "markers"),
        ({"markers": [1]}, "markers"),
        ({"metadata": {"x": object()}}, "metadata"),
        ({"metadata": {"x": float("nan")}}, "metadata"),
        ({"metadata": {"x": "y" * 300}}, "metadata"),
        ({"metadata": ["not", "a", "dict"]}, "metadata"),
        ({"timestamp": datetime(2026, 1, 1)}, "timestamp"),
        ({"timestamp": "2026-01-01T00:00:00Z"}, "timestamp"),
        ({"turn_id": "has space"}, "turn_id"),
    ],
)
def test_bad_input_names_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        draft(**kwargs)
    assert info.value.field == field
    assert field in str(info.value)


def test_cyclic_metadata_is_rejected() -> None:
    cyclic: dict[str, object] = {}
    cyclic["self"] = cyclic
    with pytest.raises(ValidationError) as info:
        draft(metadata=cyclic)
    assert info.value.field == "metadata"


def test_good_input_is_normalised() -> None:
    ts = datetime(2026, 5, 1, 12, 0, tzinfo=timezone(timedelta(hours=2)))
    d = draft(
        content="Decision: use Postgres",
        markers=["decision", "custom:db", "decision"],
        metadata={"k": [1, 2]},
        timestamp=ts,
        agent_id="planner.1",
        session_id="team:alpha-1",
    )
    assert d.markers == ("decision", "custom:db")
    assert d.timestamp == ts and d.timestamp.utcoffset() == timedelta(0)
    assert d.token_count > 0
    assert len(d.turn_id) == 32


@pytest.mark.parametrize("budget", [0, -5, 1.5, "10", True])
def test_budget_must_be_positive_int(budget: object) -> None:
    with pytest.raises(ValidationError) as info:
        check_budget(budget, 4000)
    assert info.value.field == "token_budget"


def test_budget_default() -> None:
    assert check_budget(None, 4000) == 4000


@pytest.mark.parametrize("query", ["", "  ", None, 3])
def test_query_must_be_text(query: object) -> None:
    with pytest.raises(ValidationError) as info:
        check_query(query)
    assert info.value.field == "query"
