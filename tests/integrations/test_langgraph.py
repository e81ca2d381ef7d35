"""The LangGraph adapter with the real langgraph: the BaseStore contract (get, put, search
with query/filter/limit/offset, delete, list_namespaces, batch/abatch), a graph that stores a
decision and recalls it in a later thread, and the recall/ingest nodes."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

pytest.importorskip("langgraph")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.store.base import BaseStore, GetOp, InvalidNamespaceError, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore

from hivemem import MemoryClient, ScopedMemory, ValidationError
from hivemem.integrations.langgraph import (
    HivememStore,
    ingest_node,
    namespace_to_session,
    recall_node,
    session_to_namespace,
)


def test_namespace_tuples_round_trip_through_session_ids() -> None:
    for ns in [("memories", "user-1"), ("a b", "x@y:z", "é😀"), ("x",)]:
        session = namespace_to_session(ns)
        assert session.startswith("lg.")
        assert session_to_namespace(session) == ns
    assert namespace_to_session(("memories", "user-1")) == "lg.memories.user-1"
    assert session_to_namespace("not-the-store") is None
    with pytest.raises(ValidationError, match="namespace"):
        namespace_to_session(("a.b",))
    with pytest.raises(ValidationError, match="namespace"):
        namespace_to_session(())


def test_put_get_update_delete(memory: ScopedMemory) -> None:
    store = HivememStore(memory)
    ns = ("prefs", "user-1")
    assert store.get(ns, "food") is None
    store.put(ns, "food", {"likes": "pizza"})
    first = store.get(ns, "food")
    assert first is not None and first.value == {"likes": "pizza"}
    assert first.namespace == ns and first.key == "food"
    store.put(ns, "food", {"likes": "sushi"})
    second = store.get(ns, "food")
    assert second is not None and second.value == {"likes": "sushi"}
    assert second.created_at == first.created_at
    assert second.updated_at > first.updated_at
    store.delete(ns, "food")
    assert store.get(ns, "food") is None
    store.put(ns, "food", {"likes": "ramen"})
    again = store.get(ns, "food")
    assert again is not None and again.value == {"likes": "ramen"}
    assert again.created_at > first.created_at


def test_get_and_aget_check_labels_and_read_any_value_json_writes(
        memory: ScopedMemory) -> None:
    """`get`/`aget` skip the batch around their one read, not LangGraph's label checks;
    a value that JSON writes but orjson does not read (NaN, infinities) still
    comes back."""
    store = HivememStore(memory)
    for bad in (("a.b",), ("",), ("x", "nul\x00")):
        with pytest.raises(InvalidNamespaceError):
            store.get(bad, "k")
        with pytest.raises(InvalidNamespaceError):
            asyncio.run(store.aget(bad, "k"))
    ns = ("odd", "values")
    store.put(ns, "plain", {"n": 1})
    store.put(ns, "odd", {"nan": math.nan, "inf": -math.inf, "big": 2**70})
    for got in (store.get(ns, "odd"), asyncio.run(store.aget(ns, "odd"))):
        assert got is not None and got.key == "odd" and got.namespace == ns
        assert math.isnan(got.value["nan"]) and got.value["inf"] == -math.inf
        assert got.value["big"] == 2**70
    plain = asyncio.run(store.aget(ns, "plain"))
    assert plain is not None and plain.value == {"n": 1}
    assert asyncio.run(store.aget(ns, "missing")) is None
    assert {i.key for i in store.search(ns)} == {"plain", "odd"}


def test_put_and_aput_check_as_basestore_does_without_a_batch(
        memory: ScopedMemory, monkeypatch: pytest.MonkeyPatch) -> None:
    """`put`/`aput` (an agent's write on every turn) skip the batch around their one
    write, not LangGraph's checks: the same errors as `BaseStore.put` and nothing written
    on bad input."""
    store = HivememStore(memory)
    reference = InMemoryStore()
    for bad in ((), ("a.b",), ("",), ("langgraph", "x")):
        for target in (store, reference):
            with pytest.raises(InvalidNamespaceError):
                target.put(bad, "k", {"v": 1})
            with pytest.raises(InvalidNamespaceError):
                asyncio.run(target.aput(bad, "k", {"v": 1}))
    with pytest.raises(NotImplementedError, match="TTL"):
        store.put(("t",), "k", {"v": 1}, ttl=5)
    assert store.search(("t",)) == []
    monkeypatch.setattr(store, "batch", lambda ops: pytest.fail("put went through batch"))
    store.put(("direct", "u1"), "k", {"v": 1}, index=False, ttl=None)
    asyncio.run(store.aput(("direct", "u1"), "j", {"v": 2}))
    got = store.get(("direct", "u1"), "k")
    assert got is not None and got.value == {"v": 1}
    later = store.get(("direct", "u1"), "j")
    assert later is not None and later.value == {"v": 2}
    store.put(("direct", "u1"), "k", None)  # None deletes, as in a PutOp
    assert store.get(("direct", "u1"), "k") is None


def test_search_filters_pages_and_recalls(memory: ScopedMemory) -> None:
    store = HivememStore(memory)
    store.put(("docs", "u1"), "a", {"text": "We chose Postgres as the primary database",
                                    "kind": "decision", "rank": 1})
    store.put(("docs", "u1"), "b", {"text": "The office plants need watering on Fridays",
                                    "kind": "note", "rank": 2})
    store.put(("docs", "u2"), "c", {"text": "Deploys happen every Tuesday morning",
                                    "kind": "note", "rank": 3})
    store.put(("other",), "d", {"text": "Postgres is also mentioned here", "kind": "note"})
    listed = store.search(("docs",))
    assert {(i.namespace, i.key) for i in listed} == {
        (("docs", "u1"), "a"), (("docs", "u1"), "b"), (("docs", "u2"), "c")}
    assert [i.key for i in store.search(("docs",), filter={"kind": "note"})] in (
        ["c", "b"], ["b", "c"])
    assert [i.key for i in store.search(("docs",), filter={"rank": {"$gte": 2}},
                                        limit=1)] == [listed[0].key if listed[0].key != "a"
                                                      else listed[1].key]
    assert len(store.search(("docs",), limit=2, offset=2)) == 1
    found = store.search(("docs",), query="which database did we choose? Postgres")
    assert found and found[0].key == "a" and found[0].score is not None
    assert all(i.namespace[0] == "docs" for i in found)
    store.delete(("docs", "u1"), "a")
    after = store.search(("docs",), query="which database did we choose? Postgres")
    assert "a" not in {i.key for i in after}


def test_a_search_passes_over_stale_versions(memory: ScopedMemory) -> None:
    """The recall finds every version of an updated item; only current ones are hits,
    however many stale ones rank above them (the index is asked a few at a time)."""
    store = HivememStore(memory)
    ns = ("facts", "team")
    store.put(ns, "other", {"text": "lunch is at noon"})
    for version in range(12):
        store.put(ns, "db", {"text": f"the orders database choice, version {version}"})
    store.put(ns, "db", {"text": "undecided"})  # the current value ranks below the stale
    for limit in (1, 3):
        found = store.search(ns, query="the orders database choice", limit=limit)
        assert found and len(found) <= limit
        assert {(i.key, i.value["text"]) for i in found} <= {
            ("db", "undecided"), ("other", "lunch is at noon")}
    store.delete(ns, "db")
    assert "db" not in {i.key for i in store.search(ns, query="the orders database choice")}


def test_list_namespaces(memory: ScopedMemory) -> None:
    store = HivememStore(memory)
    for ns in [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f"),
               ("a", "c", "f")]:
        store.put(ns, "k", {"v": 1})
    assert store.list_namespaces(prefix=("a", "b"), max_depth=3) == [
        ("a", "b", "c"), ("a", "b", "d"), ("a", "b", "f")]
    assert store.list_namespaces(suffix=("f",)) == [("a", "b", "f"), ("a", "c", "f")]
    assert store.list_namespaces(prefix=("a", "*", "f")) == [("a", "b", "f"), ("a", "c", "f")]
    assert len(store.list_namespaces(limit=2, offset=1)) == 2
    store.delete(("a", "c", "f"), "k")
    assert ("a", "c", "f") not in store.list_namespaces()


def test_batch_and_abatch_behave_like_langgraphs_in_memory_store(memory: ScopedMemory) -> None:
    ns = ("batch",)
    ops = [PutOp(ns, "x", {"n": 1}), PutOp(ns, "x", {"n": 2}), GetOp(ns, "x"), SearchOp(ns)]

    def shape(results: list[Any]) -> list[Any]:
        return [None if r is None else [i.value for i in r] if isinstance(r, list)
                else r.value for r in results]

    reference = InMemoryStore()
    store = HivememStore(memory)
    assert shape(store.batch(ops)) == shape(reference.batch(ops))
    got = store.get(ns, "x")
    assert got is not None and got.value == reference.get(ns, "x").value == {"n": 2}  # type: ignore[union-attr]

    async def run() -> Any:
        await store.aput(ns, "y", {"n": 3})
        return await store.aget(ns, "y"), await store.asearch(ns, query="n")

    got, searched = asyncio.run(run())
    assert got.value == {"n": 3}
    assert {"x", "y"} >= {i.key for i in searched}


def test_the_store_is_the_handles_namespace_only(embedded: MemoryClient,
                                                 namespace: str) -> None:
    mine = HivememStore(embedded.scoped(namespace=namespace, agent_id="a"))
    teammate = HivememStore(embedded.scoped(namespace=namespace, agent_id="b"))
    stranger = HivememStore(embedded.scoped(namespace=namespace + "-x", agent_id="a"))
    secret = HivememStore(embedded.scoped(namespace=namespace, agent_id="a"),
                          visibility="private")
    mine.put(("team",), "plan", {"text": "ship on Monday"})
    secret.put(("team",), "diary", {"text": "nervous about Monday"})
    got = teammate.get(("team",), "plan")
    assert got is not None and got.value == {"text": "ship on Monday"}
    assert teammate.get(("team",), "diary") is None
    assert mine.get(("team",), "diary") is not None
    assert stranger.get(("team",), "plan") is None
    assert stranger.list_namespaces() == []


def test_a_search_checks_the_scope_once_and_keeps_to_it(
        embedded: MemoryClient, namespace: str, writer: ScopedMemory,
        agent_key: ScopedMemory, scope_checks: list[str]) -> None:
    """A search with a query is recall plus the key index of the recalled keys, made as
    one call that checks the session against the scope once; an agent key still reads
    neither another agent's private items nor another namespace's."""
    mine = HivememStore(writer)
    HivememStore(writer, visibility="private").put(
        ("team",), "diary", {"text": "nervous about the Monday release"})
    mine.put(("team",), "plan", {"text": "the Monday release ships the billing service"})
    mine.get(("team",), "plan")  # waits until both puts are stored
    stranger = embedded.scoped(namespace=namespace + "-x", agent_id="a").pin()
    scope_checks.clear()
    found = HivememStore(agent_key).search(("team",), query="the Monday release")
    assert [i.key for i in found] == ["plan"]
    assert scope_checks == [namespace_to_session(("team",))]
    assert HivememStore(stranger).search(("team",), query="the Monday release") == []
    own = mine.search(("team",), query="nervous about the Monday release")
    assert "diary" in {i.key for i in own}  # its own private item: a sees it


class _State(MessagesState):
    memories: list[str]


def test_a_graph_stores_a_decision_and_recalls_it_in_a_later_thread(
    memory: ScopedMemory,
) -> None:
    """The graph's own flow: the node gets the store from LangGraph, saves a decision
    under the user's namespace in one thread, and a later thread finds it by meaning."""
    store = HivememStore(memory)
    model = GenericFakeChatModel(messages=iter([
        AIMessage("Noted: we will use Postgres."),
        AIMessage("You decided to use Postgres."),
        AIMessage("I do not know yet."),
    ]))

    def remember_and_answer(state: _State, config: RunnableConfig, *,
                            store: BaseStore) -> dict[str, Any]:
        user = config["configurable"]["user_id"]
        question = state["messages"][-1].content
        if str(question).lower().startswith("decision:"):
            store.put(("decisions", user), "db", {"text": str(question)[9:].strip()})
        hits = store.search(("decisions", user), query=str(question), limit=3)
        memories = [h.value["text"] for h in hits]
        return {"messages": [model.invoke(state["messages"])], "memories": memories}

    builder = StateGraph(_State)
    builder.add_node("agent", remember_and_answer)
    builder.add_edge(START, "agent")
    graph = builder.compile(store=store)

    graph.invoke({"messages": [HumanMessage("Decision: we use Postgres for the orders "
                                            "database")]},
                 {"configurable": {"thread_id": "t1", "user_id": "u-42"}})
    later = graph.invoke({"messages": [HumanMessage("Which database did we pick for orders?")]},
                         {"configurable": {"thread_id": "t2", "user_id": "u-42"}})
    assert later["memories"][0] == "we use Postgres for the orders database"
    other_user = graph.invoke({"messages": [HumanMessage("Which database for orders?")]},
                              {"configurable": {"thread_id": "t3", "user_id": "u-7"}})
    assert other_user["memories"] == []


class _ChatState(MessagesState):
    memory_context: str


def test_recall_and_ingest_nodes_carry_a_conversation_across_runs(
    memory: ScopedMemory,
) -> None:
    model = GenericFakeChatModel(messages=iter([
        AIMessage("Got it, the budget cap is 40k."), AIMessage("It is 40k."),
    ]))
    seen: list[str] = []

    def agent(state: _ChatState) -> dict[str, Any]:
        seen.append(state["memory_context"])
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(_ChatState)
    builder.add_node("recall", recall_node(memory))
    builder.add_node("agent", agent)
    builder.add_node("remember", ingest_node(memory))
    builder.add_edge(START, "recall")
    builder.add_edge("recall", "agent")
    builder.add_edge("agent", "remember")
    graph = builder.compile()
    config: RunnableConfig = {"configurable": {"thread_id": "chat-1"}}
    graph.invoke({"messages": [HumanMessage("The budget cap for the launch is 40k euros")]},
                 config)
    assert seen == [""]
    memory.wait_until_processed("chat-1", 10)
    graph.invoke({"messages": [HumanMessage("What is the launch budget cap?")]}, config)
    assert "40k euros" in seen[1]
    memory.wait_until_processed("chat-1", 10)  # the second run's turns are in the timeline
    turns = memory.timeline("chat-1", kinds=["turn"])
    assert [(t.detail["role"], t.summary) for t in turns][:2] == [
        ("user", "The budget cap for the launch is 40k euros"),
        ("assistant", "Got it, the budget cap is 40k.")]
    # Running the ingest node again over the same messages writes nothing twice.
    ingest_node(memory)({"messages": [HumanMessage("What is the launch budget cap?",
                                                   id="m-1")]}, config)
    ingest_node(memory)({"messages": [HumanMessage("What is the launch budget cap?",
                                                   id="m-1")]}, config)
    memory.wait_until_processed("chat-1", 10)
    assert len(memory.timeline("chat-1", kinds=["turn"])) == len(turns) + 1


def test_without_a_query_it_answers_what_langgraphs_in_memory_store_answers(
    memory: ScopedMemory,
) -> None:
    """No conformance suite is published for stores (only for checkpointers), so the
    reference is LangGraph's own InMemoryStore: the same operations, the same answers
    (search order aside: InMemoryStore keeps insertion order, this store newest first)."""
    reference, store = InMemoryStore(), HivememStore(memory)
    script: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
        ("put", (("users", "a"), "profile", {"name": "Ana", "age": 31}), {}),
        ("put", (("users", "b"), "profile", {"name": "Bo", "age": 25}), {}),
        ("put", (("users", "a"), "prefs", {"theme": "dark", "tags": ["x", "y"]}), {}),
        ("put", (("docs",), "d1", {"status": "draft", "score": 4.5}), {}),
        ("get", (("users", "a"), "profile"), {}),
        ("get", (("users", "a"), "missing"), {}),
        ("search", (("users",),), {"filter": {"name": "Ana"}}),
        ("search", (("docs",),), {"filter": {"score": {"$gt": 4}}}),
        ("search", (("users",),), {"filter": {"tags": ["x", "y"]}}),
        ("search", ((),), {"filter": {"status": {"$ne": "final"}}}),
        ("list_namespaces", (), {}),
        ("list_namespaces", (), {"prefix": ("users",), "max_depth": 1}),
        ("put", (("users", "a"), "profile", {"name": "Ana", "age": 32}), {}),
        ("get", (("users", "a"), "profile"), {}),
        ("delete", (("users", "b"), "profile"), {}),
        ("get", (("users", "b"), "profile"), {}),
        ("search", (("users",),), {}),
    ]

    def answer(result: Any) -> Any:
        if result is None:
            return None
        if isinstance(result, list):
            return sorted(repr(answer(r)) for r in result)
        if isinstance(result, tuple):
            return result
        return (result.namespace, result.key, result.value)

    for op, args, kwargs in script:
        expected = answer(getattr(reference, op)(*args, **kwargs))
        assert answer(getattr(store, op)(*args, **kwargs)) == expected, (op, args, kwargs)
    # Where they differ: InMemoryStore still lists a namespace whose last item was deleted
    # (an empty dict stays behind); this store, like the Postgres one, does not.
    assert ("users", "b") in reference.list_namespaces()
    assert store.list_namespaces() == [("docs",), ("users", "a")]


def test_a_search_reuses_the_namespace_listing_for_list_cache_seconds(
        memory: ScopedMemory, monkeypatch: pytest.MonkeyPatch) -> None:
    from hivemem.integrations import handle

    clock = [100.0]
    monkeypatch.setattr(handle.time, "monotonic", lambda: clock[0])
    mine, theirs = HivememStore(memory, list_cache=1.0), HivememStore(memory)
    mine.put(("notes", "a"), "k", {"text": "the cache is Redis"})
    assert [i.namespace for i in mine.search(("notes",))] == [("notes", "a")]
    theirs.put(("notes", "b"), "k", {"text": "the queue is Kafka"})  # another handle
    mine.put(("notes", "c"), "k", {"text": "the db is Postgres"})  # this store: at once
    assert sorted(i.namespace for i in mine.search(("notes",))) == [("notes", "a"),
                                                                     ("notes", "c")]
    assert len(mine.list_namespaces(prefix=("notes",))) == 3  # listing is never cached
    clock[0] += 1.0
    assert len(mine.search(("notes",))) == 3
    fresh = HivememStore(memory, list_cache=0)
    theirs.put(("notes", "d"), "k", {"text": "the cdn is none"})
    assert len(fresh.search(("notes",))) == 4
