"""The pipeline's topology and stream messages: one codec each, round trips, poison entries.

Also pins the rule that no module outside `hivemem/pipeline/` spells a stream name, a
consumer group or a stream entry's fields.
"""

from __future__ import annotations

import base64
import json
import re
import struct
import threading
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
import redis

from hivemem.config import Settings
from hivemem.domain.audit import AuditEvent
from hivemem.domain.models import DeadLetter, Role, Turn
from hivemem.domain.turn import TurnDraft
from hivemem.errors import HivememError, MalformedEntry, ValidationError
from hivemem.pipeline.messages import (
    AuditEntry,
    EmbeddedTurn,
    EpisodeControl,
    SkipEntry,
    TraceEntry,
    TurnEntry,
    decode_dead_letter,
    decode_embedded,
    embedded_from_json,
    encode_dead_letter,
)
from hivemem.pipeline.topology import Keys, Topology
from hivemem.pipeline.vectors import (
    VectorDecodeError,
    decode_vector,
    encode_vector,
    encode_vector_half,
)
from hivemem.pipeline.wire import turn_from_wire, wire_json
from hivemem.store.state import TurnLog
from hivemem.store.streams import StreamStore
from hivemem.workers.boundary import decode_item
from hivemem.workers.stream import StreamWorker, WorkerKind

KEYS = Keys("hmmsg")
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def turn(seq: int = 3, **extra: object) -> Turn:
    fields: dict[str, object] = {
        "turn_id": f"t{seq}", "session_id": "s1", "agent_id": "a1", "role": Role.USER,
        "content": "We decided to use Redis — ünïcode too", "markers": ("decision",),
        "metadata": {"k": [1, 2]}, "timestamp": T0, "seq": seq, "token_count": 9,
        "namespace": "team", "visibility": "private",
    }
    fields.update(extra)
    return Turn.model_validate(fields)


# -- topology -------------------------------------------------------------------------------


def test_the_topology_names_every_stage_once() -> None:
    top = Topology(KEYS)
    assert [s.name for s in top.stages] == ["embed", "boundary"]
    assert [s.name for s in top.all_stages] == ["embed", "boundary", "dispatch"]
    p = KEYS.partition("s1")
    assert (top.embed.stream_for(p), top.embed.group) == (KEYS.turns_stream(p), "embed")
    assert (top.boundary.stream_for(p), top.boundary.group) == (
        KEYS.embedded_stream(p), "boundary")
    assert top.embed.dead_letters_for(p) == KEYS.dead_letters(KEYS.turns_stream(p))
    assert top.embed.message is TurnEntry
    assert top.stage("boundary") is top.boundary
    assert top.stage_of(KEYS.embedded_stream(p)) is top.boundary
    assert top.stage_of(KEYS.outbox_stream(p)) is top.dispatch
    assert top.stage_of(KEYS.traces_stream) is None
    with pytest.raises(ValidationError) as info:
        top.stage("reflect")
    assert isinstance(info.value, ValidationError) and info.value.field == "stage"


def test_partitions_are_stable_and_every_key_of_a_session_shares_its_slot() -> None:
    from redis.crc import key_slot

    keys = Keys("hm", 16)
    embed = Topology(keys).embed
    assert embed.partitions == 16 and len(set(embed.streams())) == 16
    with pytest.raises(ValueError):
        embed.stream_for(16)
    # A stable hash (not Python's salted hash()): another process, another hash seed,
    # the same partitions.
    import subprocess
    import sys
    code = ("from hivemem.pipeline.topology import partition_of;"
            "print([partition_of(s, 16) for s in ('s1', 's2', 'alice/chat-7')])")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env={**__import__("os").environ, "PYTHONHASHSEED": "12345"},
                           check=True).stdout.strip()
    assert other == str([keys.partition(s) for s in ("s1", "s2", "alice/chat-7")])
    spread = {keys.partition(f"session-{i}") for i in range(200)}
    assert spread == set(range(16))
    for sid in ("s1", "a{b}c", "{weird}", "x" * 120):
        p = keys.partition(sid)
        slot = key_slot(keys.turns_stream(p).encode())
        session_keys = [
            keys.session_turn_ids(sid), keys.session_recent(sid),
            keys.session_processed(sid), keys.session_dead(sid), keys.session_meta(sid),
            keys.session_info(sid), keys.session_audit(sid), keys.boundary_state(sid),
            keys.boundary_buffer(sid), keys.boundary_lease(sid), keys.session_episodes(sid),
            keys.episode(sid, "e1"), keys.reflect_lock(sid), keys.reflected(sid),
            keys.session_set(sid), keys.embedded_stream(p),
            keys.outbox_stream(p), keys.dead_letters(keys.turns_stream(p)),
            keys.delivery_errors(keys.embedded_stream(p), "boundary"),
        ]
        assert {key_slot(k.encode()) for k in session_keys} == {slot}, sid
    assert key_slot(keys.api_key("k1").encode()) == key_slot(keys.api_keys.encode())
    # Partition p's slot is in the p-th of P equal ranges: 3 masters hold 5, 5 and 6 of 16.
    slots = [key_slot(keys.turns_stream(p).encode()) for p in range(16)]
    assert [s * 16 // 16384 for s in slots] == list(range(16))


def test_one_partition_is_still_a_deployment() -> None:
    keys = Keys("hm", 1)
    assert keys.partition("anything") == 0
    assert Topology(keys).embed.streams() == [keys.turns_stream(0)]
    with pytest.raises(ValidationError):
        Keys("hm", 0)


# -- the vector codec -----------------------------------------------------------------------


def test_vectors_are_little_endian_float32_base64_and_exact() -> None:
    vector = np.array([1.0, -0.5, 1e-7, 3.4e38], dtype=np.float32)
    text = encode_vector(vector)
    assert base64.b64decode(text) == struct.pack("<4f", *vector.tolist())
    back = decode_vector(text)
    assert back.dtype == np.float32 and np.array_equal(back, vector)
    back[0] = 2.0  # writable: a copy, not a view of the decoded bytes
    assert encode_vector([0.25]) == base64.b64encode(struct.pack("<f", 0.25)).decode()


@pytest.mark.parametrize("text", ["not base64!", base64.b64encode(b"abc").decode()])
def test_bad_vector_text_raises(text: str) -> None:
    with pytest.raises(VectorDecodeError):
        decode_vector(text)


# -- round trips ----------------------------------------------------------------------------


def test_turn_entry_round_trip_and_unknown_fields_are_ignored() -> None:
    entry = TurnEntry(turn=turn())
    fields = entry.to_fields()
    assert set(fields) == {"seq", "turn"} and fields["seq"] == "3"
    assert TurnEntry.from_fields(fields) == entry
    # A newer producer may add fields, to the entry and to the turn: both are ignored.
    newer = {**fields, "priority": "high",
             "turn": json.dumps({**json.loads(fields["turn"]), "mood": "cheerful"})}
    assert TurnEntry.from_fields(newer) == entry


def test_embedded_turn_round_trip_with_and_without_a_vector() -> None:
    vector = np.linspace(-1, 1, 16, dtype=np.float32)
    entry = EmbeddedTurn.of(turn(), vector)
    fields = entry.to_fields()
    assert fields["kind"] == "turn"
    back = decode_embedded({**fields, "later": "x"})
    assert back == entry and isinstance(back, EmbeddedTurn)
    # float16 on the wire (the boundary stage's cosine needs no more): within 1e-3 here.
    assert back.vector is not None and np.allclose(back.vector, vector, atol=1e-3)
    assert back.vector is not None and np.array_equal(back.vector, entry.vector)
    assert (back.session_id, back.seq) == ("s1", 3)
    bare = EmbeddedTurn.of(turn(), None)
    assert "vec" not in bare.to_fields()
    assert decode_embedded(bare.to_fields()) == bare and bare.vector is None
    assert embedded_from_json(entry.to_json()) == entry


def test_an_embedded_turn_carries_what_the_boundary_reads_and_not_the_metadata() -> None:
    full = turn()
    entry = EmbeddedTurn.of(full, np.ones(8, dtype=np.float32))
    sent = json.loads(entry.to_fields()["turn"])
    # The content feeds the currency keeper; the metadata nobody downstream reads.
    assert sent["content"] == full.content and "metadata" not in sent
    head = decode_embedded(entry.to_fields())
    assert isinstance(head, EmbeddedTurn)
    assert head.turn == full.model_copy(update={"metadata": {}})
    assert entry.to_fields()["vec"].startswith("f16:")


def test_an_embedded_entry_of_the_older_form_still_decodes() -> None:
    # Written before the compact form: the whole turn and a float32 vector.
    vector = np.linspace(-1, 1, 16, dtype=np.float32)
    old = {"kind": "turn", "seq": "3", "turn": wire_json(turn()), "vec": encode_vector(vector)}
    back = decode_embedded(old)
    assert isinstance(back, EmbeddedTurn) and back.turn == turn()
    assert back.vector is not None and np.array_equal(back.vector, vector)


def test_the_half_vector_keeps_a_cosine_within_1e_3() -> None:
    rng = np.random.default_rng(7)
    for dim in (64, 384):
        a, b = rng.normal(size=(2, dim)).astype(np.float32)
        a, b = a / np.linalg.norm(a), b / np.linalg.norm(b)
        exact = float(a @ b)
        half = decode_vector(encode_vector_half(a)) @ decode_vector(encode_vector_half(b))
        assert abs(float(half) - exact) < 1e-3
    with pytest.raises(VectorDecodeError):
        decode_vector("f16:AAA")  # not whole float16s
    with pytest.raises(VectorDecodeError):
        decode_vector("f16:%%%")


@pytest.mark.parametrize("entry", [
    EpisodeControl(session_id="s1", seq=7, action="close_episode"),
    EpisodeControl(session_id="s1", seq=8, action="close_session"),
    SkipEntry(session_id="s1", seq=9),
])
def test_control_and_skip_round_trip(entry: EpisodeControl | SkipEntry) -> None:
    fields = entry.to_fields()
    assert decode_embedded(fields) == entry
    assert decode_embedded({**fields, "unknown": "ignored"}) == entry
    assert embedded_from_json(entry.to_json()) == entry


def test_dead_letter_round_trip() -> None:
    letter = DeadLetter(stream=KEYS.turns_stream(0), group="embed", entry_id="1-0",
                        fields={"seq": "1", "turn": "{}"}, error="boom", deliveries=3,
                        failed_at=T0)
    record = encode_dead_letter(letter)
    assert decode_dead_letter(record, "elsewhere") == letter
    assert decode_dead_letter({**record, "new": "x"}, "elsewhere") == letter
    with pytest.raises(MalformedEntry):
        decode_dead_letter({"error": "no failed_at"}, "elsewhere")


def test_trace_and_audit_round_trips() -> None:
    trace = TraceEntry(trace={"session_id": "s1", "actions": [1, 2], "note": "ü"})
    assert TraceEntry.from_fields({**trace.to_fields(), "x": "y"}) == trace
    event = AuditEvent(seq=4, at=T0, session_id="s1", fact_id="f1", action="created",
                       actor="reflection")
    audit = AuditEntry(event=event)
    assert AuditEntry.from_fields({**audit.to_fields(), "x": "y"}) == audit
    assert "seq" not in json.loads(AuditEntry.body(event))
    with pytest.raises(MalformedEntry):
        TraceEntry.from_fields({"trace": "[1, 2]"})


# -- poison entries -------------------------------------------------------------------------


GOOD_TURN = TurnEntry(turn=turn()).to_fields()


@pytest.mark.parametrize("fields", [
    {},
    {"seq": "3"},
    {"turn": GOOD_TURN["turn"]},
    {"seq": "x", "turn": GOOD_TURN["turn"]},
    {"seq": "0", "turn": GOOD_TURN["turn"]},
    {"seq": "3", "turn": "not json"},
    {"seq": "3", "turn": "[1, 2]"},
    {"seq": "3", "turn": json.dumps({"turn_id": "t"})},
])
def test_malformed_turn_entries_raise_a_typed_error(fields: dict[str, str]) -> None:
    with pytest.raises(MalformedEntry) as info:
        TurnEntry.from_fields(fields)
    assert isinstance(info.value, HivememError)


@pytest.mark.parametrize("fields", [
    {"seq": "1"},
    {"kind": "weird", "seq": "1"},
    {"kind": "skip", "seq": "0", "session_id": "s"},
    {"kind": "skip", "seq": "1", "session_id": ""},
    {"kind": "control", "seq": "1", "session_id": "s", "action": "explode"},
    {"kind": "control", "seq": "1", "session_id": "s"},
    {**EmbeddedTurn.of(turn(), [1.0]).to_fields(), "vec": "%%%"},
])
def test_malformed_embedded_entries_raise_a_typed_error(fields: dict[str, str]) -> None:
    with pytest.raises(MalformedEntry):
        decode_embedded(fields)


def test_the_consume_loop_dead_letters_malformed_entries(
    redis_client: redis.Redis, settings: Settings
) -> None:
    stage = Topology(KEYS).boundary
    stream = stage.stream_for(KEYS.partition("s1"))
    good = EpisodeControl(session_id="s1", seq=1, action="close_episode")
    redis_client.xadd(stream, good.to_fields())  # type: ignore[arg-type]
    weird = redis_client.xadd(stream, {"kind": "weird", "seq": "2"}).decode()
    not_a_turn = redis_client.xadd(
        stream, {"kind": "turn", "seq": "3", "turn": '{"turn_id": "t"}'}).decode()
    seen: list[object] = []
    worker = StreamWorker(WorkerKind.of(stage, decode_item, seen.extend),
                          StreamStore(redis_client, KEYS), settings.worker, consumer="w")
    thread = threading.Thread(target=lambda: worker.run(burst=True))
    thread.start()
    thread.join(20)
    if thread.is_alive():
        worker.stop()
        pytest.fail("burst run did not finish")
    assert seen == [good]
    letters = {d.entry_id: d for d in StreamStore(redis_client, KEYS).dead_letters(stream)}
    assert set(letters) == {weird, not_a_turn}
    assert letters[weird].error.startswith("undecodable: MalformedEntry: unknown entry kind")
    assert letters[not_a_turn].error.startswith("undecodable: ValidationError")
    assert all(d.group == stage.group and d.deliveries == 1 for d in letters.values())
    assert redis_client.xlen(stage.dead_letters_for(KEYS.partition("s1"))) == 2


def test_the_store_scripts_write_what_the_messages_decode(
    redis_client: redis.Redis, settings: Settings
) -> None:
    """The ingest and control scripts assign seqs themselves: their entries must still be
    exactly the messages' wire form."""
    top = Topology(KEYS)
    state = TurnLog(redis_client, KEYS, 10)
    draft = TurnDraft("s1", "user", "hello there", settings=settings.ingest, agent_id="a1",
                      metadata={"x": 1}, timestamp=T0)
    seq, duplicate = state.append_turn(draft)
    assert (seq, duplicate) == (1, False)
    [(_, raw)] = redis_client.xrange(top.embed.stream_for(KEYS.partition("s1")))
    fields = {k.decode(): v.decode() for k, v in raw.items()}
    assert fields["turn"] == wire_json(draft)
    decoded = TurnEntry.from_fields(fields).turn
    assert (decoded.turn_id, decoded.seq, decoded.content) == (draft.turn_id, 1, "hello there")
    assert state.recent_turns("s1", 5) == [decoded]
    assert state.append_control("s1", "close_session") == 2
    [(_, raw)] = redis_client.xrange(top.boundary.stream_for(KEYS.partition("s1")))
    control = decode_embedded({k.decode(): v.decode() for k, v in raw.items()})
    assert control == EpisodeControl(session_id="s1", seq=2, action="close_session")


# -- nothing outside pipeline/ spells the topology ------------------------------------------

PACKAGE = Path(__file__).resolve().parents[2] / "hivemem"

# Each pattern is a spelling the pipeline package owns. They are checked against the
# pipeline's own sources too (below), so a pattern that could never match fails the test.
SPELLINGS: dict[str, re.Pattern[str]] = {
    # A stream key ("hm:stream:turns"): only `Keys` builds them.
    "stream key": re.compile(r":stream:"),
    # A consumer group given as a literal instead of `Stage.group`.
    "group literal": re.compile(
        r"""\b(?:GROUP|group)\s*=\s*["'][a-z]+["']"""
        r"""|x(?:readgroup|group_create|pending(?:_range)?|ack|info_consumers|autoclaim)\("""
        r"""[^)\n]*["'](?:embed|boundary)["']"""),
    # Entry fields read or written by name.
    "entry field": re.compile(
        r"""fields\[["'](?:seq|turn|vec|kind|session_id|action|trace|event)["']\]"""
        r"""|["']vec["']|["']f:|["']kind["']\s*:\s*["'](?:control|skip)["']"""),
    # An entry built inline at the XADD (in Python, or with quoted field names in Lua).
    "inline entry": re.compile(
        r"""\.xadd\([^)\n]*\{|'XADD',\s*KEYS\[\d+\],\s*'\*',\s*'"""),
}


def _sources(inside: bool) -> dict[str, str]:
    pipeline = PACKAGE / "pipeline"
    return {
        str(p.relative_to(PACKAGE)): p.read_text(encoding="utf-8")
        for p in sorted(PACKAGE.rglob("*.py"))
        if (pipeline in p.parents) == inside
    }


def test_no_module_outside_pipeline_spells_streams_groups_or_entry_fields() -> None:
    offences = [
        f"{path}:{text.count(chr(10), 0, m.start()) + 1}: {what}: {m.group(0)!r}"
        for path, text in _sources(inside=False).items()
        for what, pattern in SPELLINGS.items()
        for m in pattern.finditer(text)
    ]
    assert offences == []


OFFENDING = {
    "stream key": ['f"{prefix}:stream:turns"'],
    "group literal": ['GROUP = "embed"', 'r.xreadgroup("embed", "c", {s: ">"})',
                      'r.xpending_range(stream, "boundary", min="-")'],
    "entry field": ['fields["turn"]', '{"kind": "control", "seq": s}', 'out["vec"] = v',
                    'k.startswith("f:")'],
    "inline entry": ['pipe.xadd(k.episodes_stream, {"episode": body})',
                     "redis.call('XADD', KEYS[4], '*', 'seq', seq, 'turn', ARGV[2])"],
}


@pytest.mark.parametrize("what", sorted(SPELLINGS))
def test_the_spelling_patterns_catch_what_they_are_for(what: str) -> None:
    for sample in OFFENDING[what]:
        assert SPELLINGS[what].search(sample), (what, sample)
    # The spellings exist, in the pipeline package only.
    inside = "\n".join(_sources(inside=True).values())
    if what in ("stream key", "entry field"):
        assert SPELLINGS[what].search(inside), what


def test_the_wire_form_leaves_out_default_fields_and_reads_both_forms() -> None:
    plain = turn(agent_id=None, markers=(), metadata={}, namespace="default",
                 visibility="shared")
    sent = json.loads(wire_json(plain))
    assert not {"agent_id", "markers", "metadata", "namespace", "visibility"} & set(sent)
    assert turn_from_wire(wire_json(plain), plain.seq) == plain
    # The form with every field (written before) reads the same.
    full = json.dumps({**sent, "agent_id": None, "markers": [], "metadata": {},
                       "namespace": "default", "visibility": "shared"})
    assert turn_from_wire(full, plain.seq) == plain
    # Non-default values travel.
    assert json.loads(wire_json(turn()))["namespace"] == "team"
