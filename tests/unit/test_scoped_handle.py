"""Every public method of `ScopedMemory` is scoped: another namespace's data and another
agent's private data never come back through it.

The methods are enumerated with `inspect`: a new public method without a case here fails
`test_every_method_has_a_case`. The world (fakeredis + Qdrant `:memory:`, hashing embedder):

- namespace ``a``, session ``sa``: alice's shared and private turns, bob's private turn; a
  shared episode, an episode private to bob; facts shared, private to alice, private to bob;
  audit events (one names bob's fact); traces of both episodes;
- namespace ``b``, session ``sb-x``: a shared turn, episode, fact, audit event and trace.

Everything of bob's private data says "walrus", everything of namespace b says "zebra", and
their fact ids are listed too: no answer alice's handle gives may contain any of them.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from support.lifecycle_data import fid

from hivemem import MemoryClient, NotFound, ProcessingTimeout, ScopedMemory, Settings
from hivemem.domain.audit import AuditEvent
from hivemem.domain.episode import Episode
from hivemem.domain.fact import Fact, FactKind
from hivemem.domain.models import RecallResult
from hivemem.domain.names import session_name
from hivemem.domain.session import SessionContext
from hivemem.providers.embedders import HashingEmbedder
from hivemem.store.audit import AuditLog
from hivemem.store.reflection import ReflectionState
from hivemem.store.sessions import SessionStore
from hivemem.store.state import TurnLog
from hivemem.store.streams import StreamStore
from hivemem.store.vectors.server import ServerVectorStore
from hivemem.testing import connect_fake, fake_server
from hivemem.workers.embed import EmbedHandler, embed_kind
from hivemem.workers.stream import StreamWorker

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
EMB = HashingEmbedder(256)
SA, SB = "sa", "sb-x"
F_SHARED, F_ALICE, F_WALRUS, F_ZEBRA = (fid(n) for n in ("shared", "alice", "walrus", "zebra"))
FORBIDDEN = ("walrus", "zebra", F_WALRUS, F_ZEBRA, "sb-x", "t-bob", "t-b1", "ep-bob", "ep-b")


class World:
    def __init__(self, client: MemoryClient, tmp: Path) -> None:
        self.client = client
        self.tmp = tmp
        self.alice = client.scoped(namespace="a", agent_id="alice")

    def text(self, value: Any) -> str:
        """Everything an answer holds, as text (an export: the file it wrote)."""
        if isinstance(value, RecallResult):
            return json.dumps(value.to_dict(), default=str) + value.render()
        if isinstance(value, SessionContext):
            return self.text(value.info) + self.text(value.related) + self.text(value.result)
        if isinstance(value, BaseModel):
            dumped = value.model_dump(mode="json")
            if isinstance(dumped, dict) and "path" in dumped and Path(dumped["path"]).exists():
                return json.dumps(dumped) + Path(dumped["path"]).read_text()
            return json.dumps(dumped, default=str)
        if isinstance(value, ScopedMemory):
            return repr(value.scope)
        if isinstance(value, list | tuple):
            return "\n".join(self.text(v) for v in value)
        return json.dumps(value, default=str)


def _fact(fact_id: str, session: str, content: str, namespace: str, visibility: str,
          agent: str | None, turns: list[str]) -> Fact:
    return Fact(fact_id=fact_id, session_id=session, content=content, kind=FactKind.DECISION,
                subject="database", source_turn_ids=turns, created_at=T0, valid_from=T0,
                namespace=namespace, visibility=visibility,  # type: ignore[arg-type]
                agent_id=agent)


def _episode(eid: str, session: str, turns: list[str], namespace: str, visibility: str,
             agent: str | None, index: int) -> Episode:
    return Episode(episode_id=eid, session_id=session, index=index, turn_ids=tuple(turns),
                   seq_start=1, seq_end=len(turns), started_at=T0, ended_at=T0,
                   close_reason="manual", namespace=namespace,
                   visibility=visibility, agent_id=agent)  # type: ignore[arg-type]


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    settings = Settings.model_validate({"embedding": {"provider": "hashing", "dim": EMB.dim},
                                        "worker": {"block_ms": 50}})
    redis = connect_fake(fake_server())
    vectors = ServerVectorStore(settings.qdrant, EMB.dim, location=":memory:")
    client = MemoryClient(settings, redis_client=redis, vector_store=vectors, embedder=EMB)
    keys = client.keys
    alice = client.scoped(namespace="a", agent_id="alice")
    bob = client.scoped(namespace="a", agent_id="bob")
    other = client.scoped(namespace="b", agent_id="carol")
    at = [T0 + timedelta(minutes=i) for i in range(5)]
    alice.ingest(SA, "user", "We pick the database PostgreSQL", turn_id="t-a1",
                 timestamp=at[0], markers=["decision"], metadata={"topic": "db"})
    alice.ingest(SA, "user", "alice notes the database plan privately", turn_id="t-a2",
                 visibility="private", timestamp=at[1])
    # Keyed like alice's shared turn, and newer: `latest` must not show it to others.
    bob.ingest(SA, "user", "walrus: the database password is hunter2", turn_id="t-bob",
               visibility="private", timestamp=at[2], markers=["custom:walrus-vault"],
               metadata={"topic": "db"})
    other.ingest(SB, "user", "zebra database plan for the other tenant", turn_id="t-b1",
                 timestamp=at[3])
    state = TurnLog(redis, keys, settings.ingest.recent_window)
    StreamWorker(embed_kind(EmbedHandler(EMB, vectors, state, StreamStore(redis, keys), keys)),
                 StreamStore(redis, keys), settings.worker).run(burst=True)

    # Written here as the pipeline would: each session by its internal name.
    name_a, name_b = session_name("a", SA), session_name("b", SB)
    sessions = SessionStore(redis, keys)
    sessions.add_episodes(name_a, [_episode("ep-a", SA, ["t-a1"], "a", "shared", None, 1),
                               _episode("ep-bob", SA, ["t-bob"], "a", "private", "bob", 2)])
    sessions.add_episodes(name_b, [_episode("ep-b", SB, ["t-b1"], "b", "shared", None, 1)])
    facts = [
        _fact(F_SHARED, SA, "The database is PostgreSQL", "a", "shared", "alice", ["t-a1"]),
        _fact(F_ALICE, SA, "alice keeps the database plan", "a", "private", "alice",
              ["t-a2"]),
        _fact(F_WALRUS, SA, "walrus database password", "a", "private", "bob", ["t-bob"]),
        _fact(F_ZEBRA, SB, "zebra database plan", "b", "shared", "carol", ["t-b1"]),
    ]
    vectors.upsert_facts(facts, EMB.embed_documents([f.content for f in facts]))
    AuditLog(redis, keys).append([
        # The reason quotes the private statement that changed the shared fact (what the
        # heuristic reflector wrote): it must not reach a reader who cannot see that fact.
        AuditEvent(at=at[0], session_id=SA, namespace="a", fact_id=F_SHARED, action="created",
                   actor="reflection", cause="episode ep-a", related=[F_WALRUS],
                   reason="changed: walrus says the password is hunter2"),
        AuditEvent(at=at[0], session_id=SA, namespace="a", fact_id=F_ALICE, action="created",
                   actor="reflection", cause="episode ep-a"),
        AuditEvent(at=at[1], session_id=SA, namespace="a", fact_id=F_WALRUS, action="created",
                   actor="reflection", cause="walrus episode", related=[F_SHARED]),
        AuditEvent(at=at[2], session_id=SB, namespace="b", fact_id=F_ZEBRA, action="created",
                   actor="reflection", cause="zebra episode"),
    ])
    traces = ReflectionState(redis, keys)
    # A shared episode's trace that names bob's private turn and fact (what a reflector
    # shown unscoped prior facts leaves behind): only what the reader may see comes back.
    traces.add_trace({"episode_id": "ep-a", "session_id": SA, "namespace": "a",
                      "input_turns": [{"turn_id": "t-a1", "content": "We pick PostgreSQL"},
                                      {"turn_id": "t-bob", "content": "walrus hunter2"}],
                      "prior_facts": [{"fact_id": F_WALRUS, "content": "walrus password"},
                                      {"fact_id": F_SHARED, "content": "PostgreSQL"}],
                      "raw_output": "walrus says hunter2", "saved": [F_SHARED, F_WALRUS]})
    traces.add_trace({"episode_id": "ep-bob", "session_id": SA, "namespace": "a",
                      "input_turns": [{"turn_id": "t-bob", "content": "walrus"}]})
    traces.add_trace({"episode_id": "ep-b", "session_id": SB, "namespace": "b",
                      "input_turns": [{"turn_id": "t-b1", "content": "zebra"}]})
    client.admin.set_session_info(name_b, title="zebra project")
    # What the boundary stage counts for the session's turns (this world runs none).
    redis.hset(keys.boundary_state(name_a), mapping={"marker:decision": 1,
                                                 "marker:custom:walrus-vault": 1})
    yield World(client, tmp_path)
    client.close()


# Each case: what alice's handle does with the method (on her own session), and what it
# does with namespace b's session id (None: the method names no session). The first answer
# must hold no forbidden text (and `expect`, to show the method reads something); the
# second must raise `NotFound`, exactly like a missing session, or, for a method that
# makes a missing session (CREATES), make namespace a's own session of that id and leave
# namespace b's as it was: the same id in two namespaces is two sessions.
Call = Callable[[ScopedMemory, Path, str], Any]
CREATES = "creates"  # names a session, and makes it when it is missing (a first turn)
def _or_timeout(wait: Callable[[], object]) -> object:
    try:
        return wait()
    except ProcessingTimeout as exc:
        return str(exc)


CASES: dict[str, tuple[Call, str | None, bool | str]] = {
    # name: (call(handle, tmp, session), expected text in alice's answer, names a session)
    "ingest": (lambda m, _t, s: m.ingest(s, "user", "alice adds a shared turn"),
               "alice", CREATES),
    "ingest_many": (lambda m, _t, s: m.ingest_many(
        [{"session_id": s, "role": "user", "content": "one more"}]), "one more", CREATES),
    "close_episode": (lambda m, _t, s: m.close_episode(s), None, True),
    "close_session": (lambda m, _t, s: m.close_session(s), None, True),
    "set_session_info": (lambda m, _t, s: m.set_session_info(s, title="Alice's"),
                         "Alice's", True),
    "recall": (lambda m, _t, s: m.recall(s, "database password plan", 2000),
               "PostgreSQL", True),
    "facts": (lambda m, _t, s: m.facts(s, include_history=True), "PostgreSQL", True),
    "episodes": (lambda m, _t, s: m.episodes(s), "ep-a", True),
    "get_session_stats": (lambda m, _t, s: m.get_session_stats(s), "decision", True),
    # This world runs no boundary stage (which keeps the slot table, so a turn is not
    # processed until it has been through it): the wait for its own session times out (a
    # ProcessingTimeout naming only that session); another namespace's is NotFound first.
    "wait_until_processed": (
        lambda m, _t, s: _or_timeout(lambda: m.wait_until_processed(s, 0.01)), SA, True),
    "wait_until_reflected": (lambda m, _t, s: _or_timeout(lambda: m.wait_until_reflected(s, 0.01)),
                             None, True),
    "sessions": (lambda m, _t, _s: m.sessions(), SA, False),
    "traces": (lambda m, _t, s: m.traces(20, s), "ep-a", True),
    "timeline": (lambda m, _t, s: m.timeline(s), "PostgreSQL", True),
    "timeline_page": (lambda m, _t, s: m.timeline_page(s), "PostgreSQL", True),
    "latest": (lambda m, _t, s: m.latest(s, "topic"), "PostgreSQL", True),
    # Recall plus the key index of the recalled turns' keys, the scope checked once.
    "recall_latest": (lambda m, _t, s: m.recall_latest(
        s, "database password plan", "topic", 2000,
        keys_of=lambda r: [str(i.metadata["topic"]) for i in r if "topic" in i.metadata]),
        "PostgreSQL", True),
    "audit": (lambda m, _t, s: m.audit(F_SHARED if s == SA else F_ZEBRA), F_SHARED, True),
    "session_info": (lambda m, _t, s: m.session_info(s), SA, True),
    "related_sessions": (lambda m, _t, s: m.related_sessions(s, min_score=-1.0), None, True),
    "session_context": (lambda m, _t, s: m.session_context(s, "database", 2000, related=3),
                        "PostgreSQL", True),
    "export": (lambda m, t, s: m.export(t / "out.jsonl", [s], vectors=True), "PostgreSQL",
               True),
    "for_agent": (lambda m, _t, _s: m.for_agent("bob").for_agent("alice"), "'a'", False),
    "pin": (lambda m, _t, _s: m.pin() if m.scope.agent_id else m, "'a'", False),
    "forget": (lambda m, _t, s: m.forget(s, turn_ids=["t-a1"]), '"turns": 1', True),
    "forget_fact": (lambda m, _t, s: m.forget_fact(F_SHARED if s == SA else F_ZEBRA),
                    '"facts": 1', True),
    "forget_agent": (lambda m, _t, _s: m.forget_agent("alice"), '"agent"', False),
}


def _public_methods() -> set[str]:
    return {name for name, member in inspect.getmembers(ScopedMemory, inspect.isfunction)
            if not name.startswith("_")}


def test_every_method_has_a_case() -> None:
    assert _public_methods() == set(CASES)


def _clean(world: World, answer: Any) -> str:
    text = world.text(answer)
    for bad in FORBIDDEN:
        assert bad not in text, f"{bad!r} leaked: {text[:400]}"
    return text


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("agent", ["alice", None])
def test_each_method_keeps_to_its_scope(world: World, name: str, agent: str | None) -> None:
    call, expect, names_session = CASES[name]
    handle = world.client.scoped(namespace="a", agent_id=agent)
    text = _clean(world, call(handle, world.tmp, SA))
    if expect is not None:
        assert expect in text
    if names_session:
        theirs = session_name("b", SB)
        before = world.client.admin.session_stats(theirs).last_seq
        if names_session == CREATES:
            made = world.text(call(handle, world.tmp, SB))  # a's own session, named sb-x
            assert not [bad for bad in FORBIDDEN if bad != SB and bad in made], made[:400]
            assert world.client.admin.session_stats(session_name("a", SB)).last_seq == 1
        else:
            for session in (SB, "no-such-session"):
                with pytest.raises(NotFound) as info:
                    call(handle, world.tmp, session)
                if name not in ("audit", "forget_fact"):  # these name a fact: "no fact <id>"
                    assert (info.value.field, info.value.message) == ("session_id",
                                                                      "no such session")
        assert world.client.admin.session_stats(theirs).last_seq == before  # nothing written


def test_private_memories_are_seen_by_their_agent_only(world: World) -> None:
    alice, shared_only = world.alice, world.client.scoped(namespace="a")
    mine = {f.fact_id for f in alice.facts(SA)}
    assert mine == {F_SHARED, F_ALICE}
    assert {f.fact_id for f in shared_only.facts(SA)} == {F_SHARED}
    assert "alice notes" in world.text(alice.timeline(SA))
    assert "alice notes" not in world.text(shared_only.timeline(SA))
    bob = alice.for_agent("bob")
    assert bob.scope.namespace == "a"
    assert {f.fact_id for f in bob.facts(SA)} == {F_SHARED, F_WALRUS}
    assert [t["episode_id"] for t in bob.traces(20, SA)] == ["ep-bob", "ep-a"]
    assert [t["episode_id"] for t in alice.traces(20)] == ["ep-a"]
    # The audit of a shared fact does not name bob's private fact to alice; bob sees it.
    assert [e.related for e in alice.audit(F_SHARED)] == [[]]
    assert [e.related for e in bob.audit(F_SHARED)] == [[F_WALRUS], [F_SHARED]]
    with pytest.raises(NotFound):
        alice.audit(F_WALRUS)
    assert alice.sessions() == [SA]
    assert world.client.scoped(namespace="b").sessions() == [SB]
    # The operator sees every session by its internal name.
    assert sorted(world.client.admin.sessions()) == ["a/sa", "b/sb-x"]


def test_a_handle_never_writes_as_someone_else(world: World) -> None:
    alice = world.alice
    # Namespace b's session id names a's own session: b's stays as it was.
    before = world.client.admin.session_stats("b/sb-x").last_seq
    assert alice.ingest(SB, "user", "not an intrusion").namespace == "a"
    assert world.client.admin.session_stats("b/sb-x").last_seq == before
    from hivemem import ValidationError

    for bad in ({"namespace": "b"}, {"agent_id": "bob"}):
        with pytest.raises(ValidationError):
            alice.ingest_many([{"session_id": SA, "role": "user", "content": "x", **bad}])
    turn = alice.ingest(SA, "user", "mine", visibility="private")
    assert (turn.namespace, turn.agent_id, turn.visibility) == ("a", "alice", "private")
    with pytest.raises(ValidationError):  # private needs an agent to be private to
        world.client.scoped(namespace="a").ingest(SA, "user", "x", visibility="private")


def test_a_pinned_handle_stays_its_agent(world: World) -> None:
    """What an agent-bound API key gets: `for_agent` cannot make it someone else."""
    from hivemem import NotPermitted, ValidationError

    pinned = world.alice.pin()
    assert pinned.pinned and not world.alice.pinned
    assert pinned.for_agent(None) is pinned and pinned.for_agent("alice") is pinned
    with pytest.raises(NotPermitted) as err:
        pinned.for_agent("bob")
    assert err.value.field == "agent_id"
    with pytest.raises(ValidationError):
        pinned.ingest_many([{"session_id": SA, "role": "user", "content": "x",
                             "agent_id": "bob"}])
    with pytest.raises(ValidationError):  # nobody to pin to
        world.client.scoped(namespace="a").pin()
    assert "walrus" not in world.text(pinned.timeline(SA))
