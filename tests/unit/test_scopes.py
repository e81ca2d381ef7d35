"""Scopes: namespaces and visibility, enforced in the store layer, through the SDK."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis

from hivemem import MemoryClient, ValidationError
from hivemem.domain.consolidation import PlanContext, plan_actions
from hivemem.domain.fact import Fact, FactAction
from hivemem.domain.models import Role, Turn
from hivemem.domain.names import SessionName, session_name
from hivemem.domain.scope import Owner, Scope, owner_of
from hivemem.errors import OutOfScope
from hivemem.providers.embedders import HashingEmbedder
from hivemem.store.vectors.base import TURNS, Point, VectorStore
from tests.support.streams import turns_len
from tests.support.vector_stores import BACKENDS, open_store

EMB = HashingEmbedder(64)
Pipeline = tuple[MemoryClient, Callable[[], None]]


def test_scope_rules() -> None:
    me = Scope("team-a", "alice")
    assert me.allows({"namespace": "team-a", "visibility": "shared", "agent_id": "bob"})
    assert me.allows({"namespace": "team-a", "visibility": "private", "agent_id": "alice"})
    assert not me.allows({"namespace": "team-a", "visibility": "private", "agent_id": "bob"})
    assert not me.allows({"namespace": "team-b", "visibility": "shared"})
    # Records from before scopes: the default namespace, shared.
    assert Scope().allows({"agent_id": "x"})
    assert not me.allows({"agent_id": "x"})
    assert not Scope("team-a").allows({"namespace": "team-a", "visibility": "private",
                                       "agent_id": "alice"})


def test_owner_of_derived_memories() -> None:
    shared = {"visibility": "shared", "agent_id": "a"}
    mine = {"visibility": "private", "agent_id": "a"}
    theirs = {"visibility": "private", "agent_id": "b"}
    assert owner_of([shared, shared]) == Owner("shared", None)
    assert owner_of([shared, mine]) == Owner("private", "a")
    assert owner_of([mine, theirs]) == Owner("private", None)


def _turn(session: str, seq: int, content: str, **kw: object) -> Turn:
    return Turn(turn_id=f"t{seq}", session_id=session, role=Role.USER, content=content,
                timestamp=datetime(2026, 1, 1, tzinfo=UTC), seq=seq, token_count=3,
                **kw)  # type: ignore[arg-type]


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VectorStore]:
    s = open_store(request.param, tmp_path / "q", EMB.dim)
    yield s
    s.close()


def test_store_filters_by_scope(store: VectorStore) -> None:
    turns = [
        _turn("s", 1, "shared plan", namespace="a", agent_id="alice"),
        _turn("s", 2, "alice secret plan", namespace="a", agent_id="alice",
              visibility="private"),
        _turn("s", 3, "bob secret plan", namespace="a", agent_id="bob", visibility="private"),
        _turn("s", 4, "other tenant plan", namespace="b", agent_id="alice"),
    ]
    store.upsert_turns(turns, EMB.embed_documents([t.content for t in turns]))
    query = EMB.embed_query("plan")

    # The same id in two namespaces is two sessions: asked for both by their names.
    both = [session_name("a", "s"), session_name("b", "s")]

    def seqs(scope: Scope | None) -> set[int]:
        return {h.turn.seq for h in store.search_turns(both, query, 10, scope)}

    assert seqs(None) == {1, 2, 3, 4}
    assert seqs(Scope("a", "alice")) == {1, 2}
    assert seqs(Scope("a", "bob")) == {1, 3}
    assert seqs(Scope("a")) == {1}
    assert seqs(Scope("b", "bob")) == {4}
    a_s = session_name("a", "s")
    assert {h.turn.seq for h in store.turns_by_seq(a_s, [1, 2, 3, 4], Scope("a", "bob"))} \
        == {1, 3}
    assert {h.turn.seq for h in store.turns_by_seq(a_s, [1, 2, 3, 4])} == {1, 2, 3}
    got = store.get_turns(a_s, ["t1", "t2", "t3", "t4"], Scope("a", "alice"))
    assert {h.turn.seq for h in got} == {1, 2}
    assert store.get_turns(a_s, ["t2"])[0].turn.visibility == "private"
    assert [h.turn.seq for h in store.get_turns(session_name("b", "s"), ["t4"])] == [4]
    assert store.get_turns(SessionName("s"), ["t1", "t4"]) == []  # default's "s": none


def test_points_from_before_scopes_are_default_and_shared(store: VectorStore) -> None:
    legacy = {"kind": "turn", "turn_id": "old", "session_id": "s", "agent_id": None,
              "role": "user", "content": "legacy", "markers": [], "metadata": {},
              "timestamp": "2026-01-01T00:00:00+00:00", "ts": 0.0, "seq": 1,
              "token_count": 1}
    store.upsert(TURNS, [Point("00000000-0000-0000-0000-000000000001",
                               EMB.embed_query("legacy"), legacy)])
    query = EMB.embed_query("legacy")
    assert [h.turn.turn_id for h in store.search_turns("s", query, 5, Scope())] == ["old"]
    assert store.search_turns("s", query, 5, Scope("other")) == []


def test_fact_scope_follows_its_source_turns(store: VectorStore) -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    turns = [
        _turn("s", 1, "we use postgres", namespace="a", agent_id="alice"),
        _turn("s", 2, "my api token rotates", namespace="a", agent_id="bob",
              visibility="private"),
    ]
    # Reflection decides a new fact's scope from the turns that state it.
    actions = [FactAction(op="add", content=text, agent_id=agent, source_turn_ids=[source])
               for agent, text, source in [("alice", "we use postgres", "t1"),
                                           ("bob", "bob's token rotates", "t2")]]
    plan = plan_actions([], actions, PlanContext(
        turns=turns, session_id="s", episode_id="ep", namespace="a", now=now, valid_from=now,
        similarity=lambda _c, _f: 0.0))
    written = list(plan.writes.values())
    assert [(f.namespace, f.visibility, f.agent_id) for f in written] == [
        ("a", "shared", "alice"), ("a", "private", "bob")]
    store.upsert_facts(written, EMB.embed_documents([f.content for f in written]))
    a_s = session_name("a", "s")
    visible = store.list_facts(a_s, None, Scope("a", "alice"))
    assert [f.content for f in visible] == ["we use postgres"]
    assert len(store.list_facts(a_s, None, Scope("a", "bob"))) == 2
    assert store.list_facts(a_s, None, Scope("b", "bob")) == []
    assert store.list_facts(session_name("b", "s")) == []  # b's "s" is another session
    hits = store.search_facts(a_s, EMB.embed_query("token"), 5, ["active"], Scope("a", "x"))
    assert [h.fact.content for h in hits] == ["we use postgres"]


# -- through the SDK ------------------------------------------------------------------------


def test_recall_sees_own_and_shared_never_other_namespaces(pipeline: Pipeline) -> None:
    client, drain = pipeline
    client.ingest("a-1", "user", "The deploy target is Kubernetes", agent_id="alice",
                  namespace="team-a")
    client.ingest("a-1", "assistant", "Alice private note about the deploy", agent_id="alice",
                  namespace="team-a", visibility="private")
    client.ingest("a-1", "assistant", "Bob private note about the deploy", agent_id="bob",
                  namespace="team-a", visibility="private")
    client.ingest("b-1", "user", "Team B deploy runs on bare metal", agent_id="alice",
                  namespace="team-b")
    for drained in (False, True):  # from the recent window, then from the vector store
        if drained:
            drain()

        def contents(agent: str | None, ns: str = "team-a") -> set[str]:
            return {i.content for i in client.recall("a-1", "deploy", agent_id=agent,
                                                     namespace=ns)}

        assert contents("alice") == {"The deploy target is Kubernetes",
                                     "Alice private note about the deploy"}
        assert contents("bob") == {"The deploy target is Kubernetes",
                                   "Bob private note about the deploy"}
        assert contents(None) == {"The deploy target is Kubernetes"}
        items = client.recall("b-1", "deploy", agent_id="alice", namespace="team-b")
        assert {i.namespace for i in items} == {"team-b"}
        # Another namespace's session is refused, directly or as a related session.
        with pytest.raises(OutOfScope):
            client.recall("a-1", "deploy", agent_id="alice", namespace="team-b")
        with pytest.raises(OutOfScope):
            client.recall("b-1", "deploy", namespace="team-b", related_sessions=["a-1"])
        with pytest.raises(OutOfScope):  # the default namespace is a namespace too
            client.recall("a-1", "deploy")


def test_the_same_id_in_two_namespaces_is_two_sessions(
    pipeline: Pipeline, redis_client: redis.Redis,
) -> None:
    client, _drain = pipeline
    client.ingest("s", "user", "first", namespace="team-a")
    # Team B's session "s" is its own: nothing of team A's is seen, or refused.
    with pytest.raises(OutOfScope):
        client.get_session_stats("s", namespace="team-b")
    with pytest.raises(OutOfScope):
        client.close_episode("s", namespace="team-b")
    with pytest.raises(OutOfScope):
        client.facts("s", namespace="team-b")
    assert client.ingest("s", "user", "second", namespace="team-b").seq == 1
    before = turns_len(redis_client, client.keys)
    client.ingest_many([
        {"session_id": "new", "role": "user", "content": "ok", "namespace": "team-b"},
        {"session_id": "s", "role": "user", "content": "yes", "namespace": "team-b"},
    ])
    assert turns_len(redis_client, client.keys) == before + 2
    assert client.get_session_stats("s", namespace="team-b").turns_enqueued == 2
    assert client.get_session_stats("s", namespace="team-a").turns_enqueued == 1
    assert [t.content for t in client.recent_turns("s", namespace="team-a")] == ["first"]
    with pytest.raises(ValidationError, match="agent_id"):
        client.ingest("s", "user", "x", namespace="team-a", visibility="private")
    with pytest.raises(ValidationError, match="visibility"):
        client.ingest("s", "user", "x", namespace="team-a", visibility="secret")


def test_sessions_from_before_namespaces_are_default(
    pipeline: Pipeline, redis_client: redis.Redis
) -> None:
    client, _drain = pipeline
    client.ingest("old", "user", "hello")
    # As written before scopes: a counter, no owner.
    redis_client.hdel(client.keys.session_turn_ids("old"), "#ns")
    client.ingest("old", "user", "again")  # the default namespace still owns it
    # Team A's "old" is another session: it neither claims nor sees default's.
    assert client.ingest("old", "user", "claim", namespace="team-a").seq == 1
    assert client.get_session_stats("old").turns_enqueued == 2


def test_two_agents_writing_one_session_lose_nothing(pipeline: Pipeline) -> None:
    client, drain = pipeline
    per_agent = 150
    got: dict[str, list[int]] = {"alice": [], "bob": []}
    start = threading.Barrier(2)

    def write(agent: str) -> None:
        start.wait()
        for i in range(per_agent):
            turn = client.ingest("shared", "assistant", f"{agent} says {i}", agent_id=agent,
                                 namespace="team-a")
            got[agent].append(turn.seq)

    threads = [threading.Thread(target=write, args=(a,)) for a in got]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seqs = got["alice"] + got["bob"]
    assert sorted(seqs) == list(range(1, 2 * per_agent + 1))  # one total order, no gap
    for agent_seqs in got.values():
        assert agent_seqs == sorted(agent_seqs)  # each writer's own order holds
    drain()
    stats = client.get_session_stats("shared", namespace="team-a")
    assert stats.turns_enqueued == stats.turns_processed == 2 * per_agent
    stored = sorted(t.seq for t in client.vector_store().iter_turns(
        session_name("team-a", "shared")))
    assert stored == list(range(1, 2 * per_agent + 1))


def test_async_client_passes_scopes_through(pipeline: Pipeline) -> None:
    import asyncio

    from hivemem import AsyncMemoryClient

    client, _drain = pipeline
    aclient = AsyncMemoryClient(client=client)

    async def run() -> None:
        await aclient.ingest("x", "user", "hello from async", agent_id="a", namespace="team-a",
                             visibility="private")
        stats = await aclient.get_session_stats("x", namespace="team-a")
        assert stats.turns_enqueued == 1
        with pytest.raises(OutOfScope):
            await aclient.close_episode("x", namespace="team-b")
        mine = await aclient.recall("x", "hello", agent_id="a", namespace="team-a")
        theirs = await aclient.recall("x", "hello", agent_id="b", namespace="team-a")
        assert [i.content for i in mine] == ["hello from async"] and len(theirs) == 0

    asyncio.run(run())


def test_compaction_never_merges_across_scopes() -> None:
    from hivemem.config import CompactionPolicy
    from hivemem.domain.compaction import plan_compaction

    now = datetime(2026, 1, 1, tzinfo=UTC)

    def fact(i: int, visibility: str, agent: str) -> Fact:
        return Fact(fact_id=f"{i:032x}", session_id="s", agent_id=agent, content="We use Postgres",
                    visibility=visibility, created_at=now, valid_from=now)  # type: ignore[arg-type]

    facts = [fact(1, "shared", "a"), fact(2, "private", "b"), fact(3, "private", "c"),
             fact(4, "shared", "d"), fact(5, "private", "b")]
    vectors = EMB.embed_documents([f.content for f in facts])
    plan = plan_compaction(facts, vectors, session_id="s", clock=now,
                           policy=CompactionPolicy(archive_stale=False))
    merged = {(e.fact_id, e.into) for e in plan.diff.merged}
    by_id = {f.fact_id: f for f in facts}
    assert merged, "identical facts of one scope still merge"
    for dup, into in merged:
        assert by_id[dup].visibility == by_id[into].visibility
        if by_id[dup].visibility == "private":
            assert by_id[dup].agent_id == by_id[into].agent_id
