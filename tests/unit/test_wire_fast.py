"""ingest_many's cheaper per-turn Python gives what the plain code gave: `TurnDraft`'s inline
accepts return what its `check_*` functions return and raise what they raise; the orjson
wire form is json's bytes; `trusted_turn` is `Turn.model_construct`'s instance; the turn ids
are uuid4 hex; the row checks of `ingest_many` name the same fields."""

from __future__ import annotations

import json
import re
import types
import uuid
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from hivemem import MemoryClient, Settings, ValidationError
from hivemem.config import IngestSettings
from hivemem.domain.ids import check_id
from hivemem.domain.models import Role, Turn, trusted_turn
from hivemem.domain.scope import check_namespace, check_visibility
from hivemem.domain.tokens import estimate_tokens
from hivemem.domain.turn import (
    TurnDraft,
    check_content,
    check_markers,
    check_metadata,
    check_role,
    check_timestamp,
    check_turn_id,
    new_turn_id,
)
from hivemem.pipeline import wire
from hivemem.pipeline.wire import head_json, turn_fields, turn_from_wire, wire_json, wire_parts

LIMITS = IngestSettings(max_content_bytes=64)


class Text(str):
    """A str subclass: never accepted inline, always checked by the function."""


def reference(session_id: object, role: object, content: object, **kw: Any) -> dict[str, Any]:
    """What TurnDraft did before the inline accepts: every field through its function."""
    out: dict[str, Any] = {
        "session_id": check_id("session_id", session_id),
        "role": check_role(role),
        "content": check_content(content, LIMITS.max_content_bytes),
    }
    agent = kw.get("agent_id")
    out["agent_id"] = None if agent is None else check_id("agent_id", agent)
    out["markers"] = check_markers(kw.get("markers"))
    out["metadata"] = check_metadata(kw.get("metadata"), LIMITS.max_metadata_bytes)
    out["timestamp"] = check_timestamp(kw.get("timestamp"))
    out["turn_id"] = check_turn_id(kw.get("turn_id"))
    out["token_count"] = estimate_tokens(out["content"])
    out["namespace"] = check_namespace(kw.get("namespace"))
    out["visibility"] = check_visibility(kw.get("visibility", "shared"))
    if out["visibility"] == "private" and out["agent_id"] is None:
        raise ValidationError("visibility", "a private turn needs an agent_id (its owner)")
    return out


def outcome(fn: Any, *args: Any, **kw: Any) -> tuple[str, Any]:
    try:
        result = fn(*args, **kw)
    except ValidationError as exc:
        return "error", (exc.field, exc.message)
    if isinstance(result, TurnDraft):
        result = {name: getattr(result, name) for name in TurnDraft.__slots__}
    generated = {"turn_id"} if kw.get("turn_id") is None else set()
    if kw.get("timestamp") is None:
        generated.add("timestamp")
    return "ok", {k: (type(v), v) for k, v in result.items() if k not in generated}


ids = st.one_of(
    st.sampled_from(["s1", "a.b:c-d_e", "x" * 128, "x" * 129, "", "bad id", "é", "s\n"]),
    st.builds(Text, st.sampled_from(["s1", "bad id"])),
    st.sampled_from([None, 7, b"s1", 1.5]),
)
roles = st.one_of(
    st.sampled_from(["user", "assistant", "system", "tool", "USER", "", "bot"]),
    st.sampled_from(list(Role)), st.builds(Text, st.sampled_from(["user", "x"])),
    st.sampled_from([None, 1]),
)
contents = st.one_of(
    st.text(max_size=80),
    st.sampled_from(["hi", "  ", "", "\t\n", "x" * 64, "x" * 65, "é" * 32, "é" * 33,
                     "\ud800 lone", "ok \x00 nul"]),
    st.builds(Text, st.sampled_from(["hi", " "])),
    st.sampled_from([None, 3, b"hi"]),
)


@settings(max_examples=1500, deadline=None)
@given(session_id=ids, role=roles, content=contents,
       agent_id=st.one_of(st.none(), ids), turn_id=st.one_of(st.none(), ids),
       namespace=st.one_of(st.none(), ids),
       visibility=st.sampled_from(["shared", "private", "public", Text("shared"), None]),
       markers=st.sampled_from([None, [], ["goal", "goal"], ("decision",), ["nope"], "goal"]),
       metadata=st.sampled_from([None, {}, {"k": 1.5}, {"k": float("nan")}, [1]]),
       timestamp=st.sampled_from([None, datetime(2026, 1, 2, tzinfo=UTC),
                                  datetime(2026, 1, 2), "2026-01-02"]))
def test_turndraft_accepts_and_refuses_what_the_check_functions_do(
    session_id: object, role: object, content: object, **kw: Any
) -> None:
    kw = {k: v for k, v in kw.items() if v is not None}
    ours = outcome(TurnDraft, session_id, role, content, settings=LIMITS, **kw)
    assert ours == outcome(reference, session_id, role, content, **kw)


def test_markers_from_a_generator_are_read_once() -> None:
    def gen() -> Iterable[str]:
        yield from ("goal", "decision")

    assert TurnDraft("s", "user", "x", settings=LIMITS, markers=gen()).markers == (
        "goal", "decision")


def test_new_turn_ids_are_uuid4_hex() -> None:
    seen = set()
    for _ in range(2000):
        tid = new_turn_id()
        assert re.fullmatch(r"[0-9a-f]{32}", tid)
        u = uuid.UUID(hex=tid)
        assert u.version == 4 and u.variant == uuid.RFC_4122 and u.hex == tid
        seen.add(tid)
    assert len(seen) == 2000
    # Every value of the variant digit comes out (it is random, two bits of it).
    assert {tid[16] for tid in seen} == set("89ab")


def _turn(**over: Any) -> Turn:
    fields: dict[str, Any] = {
        "turn_id": "t1", "session_id": "s1", "role": Role.USER, "content": "hello",
        "timestamp": datetime(2026, 1, 2, 3, 4, 5, 678, tzinfo=UTC), "seq": 3,
        "token_count": 2,
    }
    fields.update(over)
    return Turn.model_validate(fields)


def _json_bytes(turn: Any, head: bool = False) -> bytes:
    fields = turn_fields(turn)
    if head:
        del fields["metadata"]
    return wire._dumps(fields).encode()


@pytest.mark.parametrize("over", [
    {},
    {"agent_id": "a1", "visibility": "private", "namespace": "team"},
    {"markers": ("goal", "custom:x"), "role": Role.TOOL},
    {"content": 'quote " back \\ slash / nl \n tab \t nul \x00 \x1f \x7f \u2028 é 日 😀'},
    {"timestamp": datetime(1, 1, 1, tzinfo=UTC)},
    {"timestamp": datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)},
    {"timestamp": datetime(2026, 1, 2, tzinfo=timezone(timedelta(hours=5, minutes=30)))},
    {"metadata": {"big": 1e16, "small": 1e-7, "n": [1, "x", None, True]}},
])
def test_the_orjson_wire_form_is_jsons_bytes(over: dict[str, Any]) -> None:
    turn = _turn(**over)
    draft = TurnDraft(turn.session_id, turn.role, turn.content, settings=IngestSettings(),
                      agent_id=turn.agent_id, markers=turn.markers, metadata=turn.metadata,
                      timestamp=turn.timestamp, turn_id=turn.turn_id, namespace=turn.namespace,
                      visibility=turn.visibility)
    for subject in (turn, draft):
        assert wire_json(subject).encode() == _json_bytes(subject)
        assert head_json(subject).encode() == _json_bytes(subject, head=True)
        body, when = wire_parts(subject)
        assert (body if isinstance(body, bytes) else body.encode()) == _json_bytes(subject)
        assert (when if isinstance(when, str) else when.decode()) == (
            subject.timestamp.isoformat())
        assert turn_from_wire(body, 3) == Turn.model_validate({**turn_fields(subject), "seq": 3})


def test_metadata_is_written_by_json() -> None:
    # orjson would write 1e16 and 1e-7: json's 1e+16 and 1e-07 are what was stored before.
    raw = wire_json(_turn(metadata={"big": 1e16, "small": 1e-7}))
    assert '"big":1e+16' in raw and '"small":1e-07' in raw


def test_every_code_point_is_written_as_json_writes_it() -> None:
    chars = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    for i in range(0, len(chars), 4096):
        turn = _turn(content="".join(chars[i:i + 4096]))
        assert wire_json(turn).encode() == _json_bytes(turn), i


def test_what_orjson_refuses_falls_back_to_json() -> None:
    # A lone surrogate can come back from a stored "\ud800" escape: json writes it as before.
    turn = Turn.model_construct(**{**_turn().__dict__, "content": "bad \ud800"})
    assert wire_json(turn) == wire._dumps(turn_fields(turn))


def test_trusted_turn_is_model_constructs_instance() -> None:
    values = _turn(agent_id="a", metadata={"k": [1]}, markers=("goal",)).__dict__
    ours = trusted_turn(**values)
    theirs = Turn.model_construct(**values)
    assert type(ours) is Turn and ours == theirs and repr(ours) == repr(theirs)
    assert list(ours.__dict__.items()) == list(theirs.__dict__.items())
    assert ours.model_fields_set == theirs.model_fields_set == set(Turn.model_fields)
    assert ours.model_fields_set is not trusted_turn(**values).model_fields_set
    assert (ours.__pydantic_extra__, ours.__pydantic_private__) == (
        theirs.__pydantic_extra__, theirs.__pydantic_private__)
    assert ours.model_dump() == theirs.model_dump()
    assert ours.model_dump_json() == theirs.model_dump_json()
    with pytest.raises(Exception, match="frozen"):
        ours.seq = 4  # type: ignore[misc]


@pytest.fixture
def client(redis_client: redis.Redis, settings: Settings) -> MemoryClient:
    return MemoryClient(settings, redis_client=redis_client)


class Row(Mapping[str, Any]):
    def __init__(self, **fields: Any) -> None:
        self._f = fields

    def __getitem__(self, key: str) -> Any:
        return self._f[key]

    def __iter__(self) -> Any:
        return iter(self._f)

    def __len__(self) -> int:
        return len(self._f)


GOOD = {"session_id": "s1", "role": "user", "content": "hi"}


@pytest.mark.parametrize(("bad", "field", "message"), [
    (["s1", "user", "hi"], "turns[1]", "must be a mapping of turn fields"),
    ({**GOOD, "colour": "red", "size": 1}, "turns[1]", "unknown fields ['colour', 'size']"),
    (Row(**GOOD, colour="red"), "turns[1]", "unknown fields ['colour']"),
    ({"role": "user", "content": "hi"}, "turns[1].session_id", "is required"),
    (Row(session_id="s1", content="hi"), "turns[1].role", "is required"),
    ({"session_id": "s1", "role": "user"}, "turns[1].content", "is required"),
    ({**GOOD, "role": "bot"}, "turns[1].role",
     "unknown role 'bot'; allowed: user, assistant, system, tool"),
])
def test_ingest_many_rows_are_checked_before_anything_is_written(
    client: MemoryClient, bad: object, field: str, message: str
) -> None:
    with pytest.raises(ValidationError) as err:
        client.ingest_many([GOOD, bad, GOOD])  # type: ignore[list-item]
    assert (err.value.field, err.value.message) == (field, message)
    assert client.admin.sessions() == []  # nothing was written


def test_ingest_many_takes_other_mappings(client: MemoryClient) -> None:
    rows = [Row(**GOOD), types.MappingProxyType({**GOOD, "content": "two"})]
    turns = client.ingest_many(rows)
    assert [(t.seq, t.content) for t in turns] == [(1, "hi"), (2, "two")]
    assert client.recent_turns("s1", 10) == list(reversed(turns))


def test_ingest_many_stores_what_it_returns(client: MemoryClient) -> None:
    turns = client.ingest_many([
        {**GOOD, "content": 'odd " \\ \n é 😀', "markers": ["goal"], "agent_id": "a",
         "visibility": "private", "metadata": {"x": 1e16}},
        {**GOOD, "timestamp": datetime(2026, 1, 2, tzinfo=timezone(timedelta(hours=-3)))},
    ])
    # Agent a's private turn too: the operator's view.
    assert client.admin.recent_turns("s1", 10) == list(reversed(turns))
    assert client.recent_turns("s1", 10) == [turns[1]]  # the default scope: shared ones
    assert turns[1].timestamp == datetime(2026, 1, 2, 3, tzinfo=UTC)
    stored = json.loads(wire_json(turns[0]))
    assert stored["metadata"] == {"x": 1e16}
