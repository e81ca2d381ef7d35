"""`TurnLog` keeps each session's recent window decoded between reads: a row read again
(the same bytes at the same seq) is handed out as a copy equal to decoding it anew, with
its own metadata; a row rewritten, or a new turn, is decoded anew."""

from __future__ import annotations

from datetime import UTC, datetime

import fakeredis

from hivemem.domain.models import Role, Turn
from hivemem.domain.names import session_name
from hivemem.pipeline.topology import Keys
from hivemem.pipeline.wire import turn_from_wire, wire_json
from hivemem.store.state import TurnLog

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
NAME = session_name("default", "s")


def _turn(seq: int, content: str, **kw: object) -> Turn:
    return Turn(turn_id=f"t{seq}", session_id="s", role=Role.USER, content=content,
                timestamp=T0, seq=seq, token_count=3, **kw)  # type: ignore[arg-type]


def _row(turn: Turn) -> tuple[bytes, int]:
    return wire_json(turn).encode(), turn.seq


def _read(log: TurnLog, rows: list[tuple[bytes, int]]) -> list[Turn]:
    """The window holding `rows` (oldest first), read as recall reads it (newest first)."""
    client = log._r  # noqa: SLF001 (the test's own client)
    key = log.keys.session_recent(NAME)
    client.delete(key)
    for raw, seq in rows:
        client.rpush(key, seq, raw)
    return log.recent_turns(NAME, 50)[::-1]


def _same(a: Turn, b: Turn) -> bool:
    return (a == b and a.__dict__ == b.__dict__ and list(a.__dict__) == list(b.__dict__)
            and a.model_fields_set == b.model_fields_set
            and [type(v) for v in a.__dict__.values()] == [type(v) for v in b.__dict__.values()])


def test_a_row_read_again_is_an_equal_copy_with_its_own_metadata() -> None:
    log = TurnLog(fakeredis.FakeRedis(), Keys(), recent_window=50)
    rows = [_row(_turn(1, "hello", metadata={"date": "May 8", "n": 3})),
            _row(_turn(2, "we use Postgres", agent_id="ann", markers=("decision",)))]
    first = _read(log, rows)
    second = _read(log, rows)
    for got_first, got_second, row in zip(first, second, rows, strict=True):
        decoded = turn_from_wire(*row)
        assert _same(got_first, decoded) and _same(got_second, decoded)
        assert got_first is not got_second
        assert got_first.metadata is not got_second.metadata
    second[0].metadata["date"] = "changed"
    assert _read(log, rows)[0].metadata == {"date": "May 8", "n": 3}


def test_a_rewritten_row_or_a_new_turn_is_decoded_anew() -> None:
    log = TurnLog(fakeredis.FakeRedis(), Keys(), recent_window=50)
    old = _row(_turn(1, "we use Postgres"))
    assert _read(log, [old])[0].content == "we use Postgres"
    rewritten = _row(_turn(1, "we use Postgres", markers=("decision",)))
    new = _row(_turn(2, "now MySQL"))
    got = _read(log, [rewritten, new])
    assert [t.markers for t in got] == [("decision",), ()]
    assert _same(got[1], turn_from_wire(*new))


def test_nested_metadata_is_decoded_each_time() -> None:
    log = TurnLog(fakeredis.FakeRedis(), Keys(), recent_window=50)
    row = _row(_turn(1, "hi", metadata={"tags": ["a"]}))
    first = _read(log, [row])[0]
    first.metadata["tags"].append("b")
    assert _read(log, [row])[0].metadata == {"tags": ["a"]}
