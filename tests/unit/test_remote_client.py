"""The remote client (`hivemem.connect`, `connect_async`) on its own: its surface is
`ScopedMemory`'s, it retries what the server says to retry, it maps problem answers to the
SDK's errors, it refuses what HTTP cannot carry before sending anything, and the async twin
works end to end against a live API. (What it returns is checked, against the other two ways
of connecting, by test_behaviour_all_clients.)"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi")

from support.connections import remote_api

from hivemem import (
    ApiError,
    AsyncRemoteMemory,
    ConfigurationError,
    NotFound,
    ProcessingTimeout,
    RemoteMemory,
    RetryLater,
    RetryPolicy,
    ScopedMemory,
    StoreUnavailable,
    Unauthorized,
    ValidationError,
    connect,
    connect_async,
)
from hivemem.producer.remote_http import segment
from hivemem.testing import RedisServer

WHOAMI = {"namespace": "team-a", "key_id": "k1"}


def _public(cls: type) -> dict[str, Any]:
    return {name: member for name, member in inspect.getmembers(cls)
            if not name.startswith("_") and (callable(member) or isinstance(member, property))}


def test_the_remote_handle_has_the_scoped_handles_methods_and_signatures() -> None:
    mine = _public(RemoteMemory)
    theirs = _public(ScopedMemory)
    assert sorted(mine) == sorted([*theirs, "close", "import_file"])
    for name, member in theirs.items():
        if isinstance(member, property):
            assert isinstance(mine[name], property), name
            continue
        want, got = inspect.signature(member), inspect.signature(mine[name])
        assert list(got.parameters.values()) == list(want.parameters.values()), name
        returned = re.sub(r"\bScopedMemory\b", "RemoteMemory", str(want.return_annotation))
        assert got.return_annotation == returned, name


def test_the_async_twin_has_the_same_methods_as_coroutines() -> None:
    mine = _public(RemoteMemory)
    theirs = _public(AsyncRemoteMemory)
    assert sorted(theirs) == sorted(mine)
    for name, member in mine.items():
        if isinstance(member, property):
            continue
        got = inspect.signature(theirs[name])
        assert list(got.parameters.values()) == list(inspect.signature(member).parameters
                                                     .values()), name
        assert inspect.iscoroutinefunction(theirs[name]) == (name not in {"for_agent", "pin"}), name


def test_every_type_the_remote_handles_return_is_exported() -> None:
    import sys
    import typing

    import hivemem

    def classes(hint: object) -> Iterator[type]:
        if isinstance(hint, type):
            yield hint
        for arg in typing.get_args(hint):
            yield from classes(arg)

    for cls in (RemoteMemory, AsyncRemoteMemory):
        for name, member in _public(cls).items():
            fn = member.fget if isinstance(member, property) else member
            returned = inspect.signature(fn).return_annotation
            if isinstance(returned, str):
                returned = eval(returned, {**vars(sys.modules[fn.__module__]), **vars(hivemem)})
            for found in classes(returned):
                if found.__module__.startswith("hivemem"):
                    assert getattr(hivemem, found.__name__, None) is found, (cls, name, found)


class Script:
    """An httpx transport that answers from a list of (status, headers, body) and records
    the requests (whoami is always answered)."""

    def __init__(self, *answers: tuple[int, dict[str, str], Any]) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/whoami":
            return httpx.Response(200, json=WHOAMI)
        self.requests.append(request)
        status, headers, body = self.answers.pop(0)
        if isinstance(body, Exception):
            raise body
        return httpx.Response(status, headers={"content-type": "application/problem+json",
                                               **headers}, json=body)


def _client(script: Script, **kwargs: Any) -> RemoteMemory:
    return connect("http://hivemem.test", api_key="hm_x",
                   transport=httpx.MockTransport(script), **kwargs)


@pytest.fixture
def slept(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    waits: list[float] = []
    monkeypatch.setattr("hivemem.producer.remote_http.time.sleep", waits.append)
    return waits


STATS = {"session_id": "s1", "turns_enqueued": 1, "turns_processed": 1,
         "turns_dead_lettered": 0, "turns_pending": 0, "last_seq": 1}


def test_429_and_503_are_retried_after_the_servers_retry_after(slept: list[float]) -> None:
    script = Script(
        (503, {"retry-after": "2"}, {"title": "Unavailable", "status": 503}),
        (429, {"retry-after": "0"}, {"title": "Too many requests", "status": 429}),
        (503, {}, {"title": "Unavailable", "status": 503}),
        (200, {}, STATS),
    )
    memory = _client(script, retry=RetryPolicy(attempts=4, backoff_s=0.5))
    assert memory.get_session_stats("s1").turns_processed == 1
    assert len(script.requests) == 4
    assert slept == [2.0, 0.0, 2.0]  # Retry-After, then the backoff (0.5 * 2**2)


def test_retries_give_up_with_the_typed_error(slept: list[float]) -> None:
    busy = (429, {"retry-after": "1"}, {"title": "Too many requests", "status": 429,
                                         "detail": "backlog of 9 turns"})
    memory = _client(Script(busy, busy, busy), retry=RetryPolicy(attempts=3))
    with pytest.raises(RetryLater, match="backlog of 9 turns"):
        memory.get_session_stats("s1")
    assert slept == [1.0, 1.0]
    down = (503, {}, {"title": "Unavailable", "status": 503, "detail": "redis is down"})
    memory = _client(Script(down, down), retry=RetryPolicy(attempts=2, backoff_s=0))
    with pytest.raises(StoreUnavailable, match="redis is down"):
        memory.get_session_stats("s1")


def test_a_connection_that_never_opened_is_retried(slept: list[float]) -> None:
    script = Script((0, {}, httpx.ConnectError("refused")), (200, {}, STATS))
    assert _client(script).get_session_stats("s1").last_seq == 1
    assert len(script.requests) == 2 and len(slept) == 1


def test_other_errors_are_not_retried(slept: list[float]) -> None:
    script = Script((500, {}, {"title": "Internal error", "status": 500}))
    with pytest.raises(ApiError) as err:
        _client(script).close_episode("s1")
    assert err.value.status == 500 and len(script.requests) == 1 and slept == []


@pytest.mark.parametrize(("status", "body", "error", "field"), [
    (422, {"title": "Invalid input", "detail": "content: is too long", "field": "content"},
     ValidationError, "content"),
    (404, {"title": "Not found", "detail": "no such session", "field": "session_id"},
     NotFound, "session_id"),
    (400, {"title": "Bad request", "detail": "the body is not valid JSON"},
     ValidationError, "body"),
    (413, {"title": "Request too large", "detail": "over 1024 bytes"},
     ValidationError, "body"),
    (401, {"title": "Unauthorized", "detail": "invalid or revoked API key"},
     Unauthorized, None),
    (500, {"title": "Server misconfigured", "detail": "its log says what to fix"},
     ConfigurationError, None),
])
def test_problem_answers_become_the_sdks_errors(
    status: int, body: dict[str, Any], error: type[Exception], field: str | None,
) -> None:
    memory = _client(Script((status, {}, {"status": status, **body})))
    with pytest.raises(error) as raised:
        memory.get_session_stats("s1")
    if field is not None:
        assert isinstance(raised.value, ValidationError)
        assert raised.value.field == field
        assert raised.value.message == body["detail"].removeprefix(f"{field}: ")


@pytest.mark.parametrize(("call", "field"), [
    (lambda m: m.ingest("s1", "user", "x", durable=True), "durable"),
    (lambda m: m.ingest_many([{"session_id": "s1", "role": "user", "content": "x"}],
                             validate_only=True), "validate_only"),
    (lambda m: m.recall("s1", "q", include_archived=True), "include_archived"),
    (lambda m: m.ingest("s 1", "user", "x"), "session_id"),
    (lambda m: m.ingest("s1", "robot", "x"), "role"),
    (lambda m: m.ingest("s1", "user", "x", markers=["nope"]), "markers"),
    (lambda m: m.ingest("s1", "user", "\ud800"), "content"),
    (lambda m: m.ingest_many([{"session_id": "s1", "role": "user", "content": "x",
                               "namespace": "team-b"}]), "turns[0].namespace"),
    (lambda m: m.audit("../x"), "fact_id"),
])
def test_what_http_cannot_carry_is_refused_before_sending(
    call: Callable[[RemoteMemory], Any], field: str,
) -> None:
    script = Script()
    with pytest.raises(ValidationError) as raised:
        call(_client(script))
    assert raised.value.field == field and script.requests == []


def test_a_timed_out_wait_is_a_processing_timeout() -> None:
    script = Script((200, {}, {"done": False, "processed": 1, "target": 3}))
    with pytest.raises(ProcessingTimeout) as raised:
        _client(script).wait_until_processed("s1", 0.5)
    assert (raised.value.processed, raised.value.target) == (1, 3)
    assert json.loads(script.requests[0].content) == {"stage": "embed", "timeout": 0.5}


def test_dot_ids_travel_as_one_path_segment() -> None:
    assert segment("..") == "%2E%2E" and segment("a.b:c") == "a.b%3Ac"


# -- against a live API -----------------------------------------------------------------


@pytest.fixture
def live(redis_server: RedisServer) -> Iterator[tuple[str, str, str]]:
    conn = redis_server.client()
    conn.flushall()
    with remote_api(conn) as (url, key_a, key_b, _client):
        yield url, key_a, key_b
    conn.flushall()
    conn.close()


def test_a_bad_key_is_unauthorized_at_connect(live: tuple[str, str, str]) -> None:
    url, _, _ = live
    with pytest.raises(Unauthorized, match="invalid or revoked"):
        connect(url, api_key="hm_not-a-key")


def test_the_namespace_is_the_keys_and_the_agent_is_bound(live: tuple[str, str, str]) -> None:
    url, key_a, key_b = live
    with connect(url, api_key=key_a, agent_id="planner") as memory:
        assert (memory.scope.namespace, memory.scope.agent_id) == ("team-a", "planner")
        turn = memory.ingest("s-bound", "user", "hi")
        assert (turn.namespace, turn.agent_id) == ("team-a", "planner")
        assert memory.for_agent(None).scope.agent_id is None
    with connect(url, api_key=key_b) as other, pytest.raises(NotFound):
        other.get_session_stats("s-bound")


def test_the_async_client_end_to_end(live: tuple[str, str, str], tmp_path: Path) -> None:
    url, key_a, _ = live
    sid = f"s-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        async with await connect_async(url, api_key=key_a, agent_id="alice") as memory:
            turns = await memory.ingest_many([
                {"session_id": sid, "role": "user", "content": "the cache is Redis 7"},
                {"session_id": sid, "role": "assistant", "content": "Redis 7, noted"}])
            assert [t.seq for t in turns] == [1, 2]
            stats = await memory.wait_until_processed(sid, 20)
            assert stats.turns_processed == 2
            found = await memory.recall(sid, "which cache?")
            assert any("Redis 7" in i.content for i in found)
            assert sid in await memory.sessions()
            summary = await memory.export(tmp_path / "a.jsonl")
            assert summary.sessions == [sid] and summary.counts["turn"] == 2
            with pytest.raises(NotFound):
                await memory.timeline("never-written")
            bob = memory.for_agent("bob")
            assert isinstance(bob, AsyncRemoteMemory) and bob.scope.agent_id == "bob"

    asyncio.run(scenario())


# The README's examples (/tmp/h/readme-client.md), verbatim, run against a live API.
README_SYNC = '''
import hivemem

with hivemem.connect(URL, api_key=KEY, agent_id="planner") as memory:
    memory.ingest("proj-42", "user", "We use PostgreSQL 16 for the orders service",
                  markers=["decision"])
    memory.wait_until_processed("proj-42", timeout=30)
    result = memory.recall("proj-42", "which database?", preset="cheap", explain=True)
    print(result.render())                      # a RecallResult, as in-process
    coder = memory.for_agent("coder")           # same namespace, another agent
    coder.ingest("proj-42", "assistant", "my scratch notes", visibility="private")
    print(memory.session_info("proj-42").turns, len(memory.timeline("proj-42")))
    memory.export("proj-42.jsonl.gz", ["proj-42"])
'''
README_ASYNC = '''
async with await hivemem.connect_async(URL, api_key=KEY, agent_id="planner") as memory:
    turn = await memory.ingest("proj-42", "assistant", "Noted: PostgreSQL 16")
    facts = await memory.facts("proj-42")
'''


def test_the_readme_examples_run(live: tuple[str, str, str], tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    import textwrap

    url, key_a, _ = live
    monkeypatch.chdir(tmp_path)
    scope: dict[str, Any] = {"URL": url, "KEY": key_a}
    exec(README_SYNC, scope)
    printed = capsys.readouterr().out
    assert "PostgreSQL 16" in printed and "2 " in printed
    assert (tmp_path / "proj-42.jsonl.gz").stat().st_size > 0
    exec("async def main():\n" + textwrap.indent(README_ASYNC, "    ")
         + "\n    return turn, facts\n", scope)
    turn, facts = asyncio.run(scope["main"]())
    assert turn.seq == 3 and turn.agent_id == "planner" and isinstance(facts, list)


def test_import_appends_only_the_keys_own_namespace(live: tuple[str, str, str],
                                                   tmp_path: Path) -> None:
    url, key_a, key_b = live
    with connect(url, api_key=key_a) as mine, connect(url, api_key=key_b) as theirs:
        mine.ingest("s-imp", "user", "exported and back")
        mine.wait_until_processed("s-imp", 20)
        exported = mine.export(tmp_path / "a.jsonl.gz")
        seen: list[int] = []
        summary = mine.import_file(exported.path, progress=seen.append)
        assert summary.mode == "append" and summary.sessions == {"s-imp": "s-imp.2"}
        assert summary.path == exported.path and sum(seen) > 0
        assert summary.written["turn"] == 1
        assert sorted(mine.sessions()) == ["s-imp", "s-imp.2"]
        # Team b may not import team a's records, nor replace anything.
        with pytest.raises(ValidationError) as foreign:
            theirs.import_file(exported.path)
        assert foreign.value.field.startswith("line ")
        assert "namespace 'team-a'" in foreign.value.message
        assert theirs.sessions() == []
        with pytest.raises(ValidationError) as mode:
            theirs.import_file(exported.path, mode="replace")
        assert mode.value.field == "mode"
        with pytest.raises(ValidationError) as missing:
            mine.import_file(tmp_path / "nope.jsonl")
        assert missing.value.field == "path"
    # The server refuses the other modes itself, whatever the client.
    raw = httpx.post(f"{url}/v1/import", params={"mode": "overwrite"}, content=b"{}",
                     headers={"Authorization": f"Bearer {key_b}"})
    assert raw.status_code == 422 and raw.json()["field"] == "mode"


def test_remote_answers_equal_the_servers_own(redis_server: RedisServer) -> None:
    conn = redis_server.client()
    conn.flushall()
    try:
        with remote_api(conn) as (url, key_a, _key_b, server), \
                connect(url, api_key=key_a, agent_id="alice") as remote:
            local = server.scoped(namespace="team-a", agent_id="alice")
            remote.ingest("s-eq", "user", "We chose Postgres", markers=["decision"])
            remote.ingest("s-eq", "assistant", "Postgres it is")
            remote.close_episode("s-eq")
            remote.wait_until_reflected("s-eq", 30)
            skip = {"stages"}
            assert (remote.get_session_stats("s-eq").model_dump(exclude=skip)
                    == local.get_session_stats("s-eq").model_dump(exclude=skip))
            assert remote.facts("s-eq", include_history=True) == local.facts(
                "s-eq", include_history=True)
            assert remote.episodes("s-eq") == local.episodes("s-eq")
            assert remote.timeline("s-eq") == local.timeline("s-eq")
            first = remote.timeline_page("s-eq", limit=2)
            assert first == local.timeline_page("s-eq", limit=2)
            assert first.next_cursor is not None
            rest = remote.timeline_page("s-eq", limit=100, cursor=first.next_cursor)
            assert rest.next_cursor is None
            assert rest.events + first.events == local.timeline("s-eq")
            assert remote.session_info("s-eq") == local.session_info("s-eq")
            assert remote.recall("s-eq", "which database?").to_dict() == local.recall(
                "s-eq", "which database?").to_dict()
    finally:
        conn.flushall()
        conn.close()


def test_a_pinned_remote_handle_refuses_another_agent_before_any_request() -> None:
    from hivemem.domain.scope import scope_for
    from hivemem.errors import NotPermitted

    class Refuse:
        def send(self, call: object) -> object:
            raise AssertionError("no request may be sent")

    handle = RemoteMemory(Refuse(), scope_for("team-a", "planner")).pin()
    assert handle.pinned
    assert handle.for_agent("planner") is handle
    assert handle.for_agent(None) is handle
    with pytest.raises(NotPermitted) as refused:
        handle.for_agent("coder")
    assert refused.value.field == "agent_id"


def test_latest_over_http_equals_the_servers_own(redis_server: RedisServer) -> None:
    """`GET /v1/sessions/{id}/latest`: each key's current value, scoped like the other
    session routes, bad input a problem naming the field."""
    conn = redis_server.client()
    conn.flushall()
    try:
        with remote_api(conn) as (url, key_a, key_b, server), \
                connect(url, api_key=key_a, agent_id="alice") as remote:
            local = server.scoped(namespace="team-a", agent_id="alice")
            remote.ingest("s-key", "user", "db: MySQL", metadata={"topic": "db"})
            remote.ingest("s-key", "user", "db: Postgres", metadata={"topic": "db"})
            remote.ingest("s-key", "user", "cache: Redis", metadata={"topic": "cache"})
            remote.ingest("s-key", "user", "queue: none", metadata={"topic": "queue"})
            remote.ingest("s-key", "user", "gone", metadata={"topic": "queue", "deleted": True})
            remote.for_agent("bob").ingest("s-key", "user", "bob's db: SQLite",
                                           metadata={"topic": "db"}, visibility="private")
            remote.wait_until_processed("s-key", 20)
            found = remote.latest("s-key", "topic")
            assert found == local.latest("s-key", "topic")
            assert sorted(found) == ["cache", "db"]
            assert found["db"].turn is not None and found["db"].turn.content == "db: Postgres"
            assert remote.for_agent("bob").latest("s-key", "topic", ["db"])[
                "db"].turn.content == "bob's db: SQLite"  # type: ignore[union-attr]
            bare = remote.latest("s-key", "topic", ["db", "nope"], with_turns=False)
            assert list(bare) == ["db"] and bare["db"].turn is None
            assert bare["db"].turn_id == found["db"].turn_id
            assert remote.latest("s-key", "topic", []) == {}

            async def twin() -> dict[str, Any]:
                async with await connect_async(url, api_key=key_a,
                                               agent_id="alice") as amemory:
                    return await amemory.latest("s-key", "topic", ["cache"])

            assert asyncio.run(twin()) == {"cache": found["cache"]}
            with pytest.raises(NotFound):
                remote.latest("never-written", "topic")
            with pytest.raises(NotFound), connect(url, api_key=key_b) as other:
                other.latest("s-key", "topic")
            for bad, field in (({"by": "no spaces"}, "by"), ({"keys": ["a", ""]}, "keys")):
                with pytest.raises(ValidationError) as raised:
                    remote.latest("s-key", **{"by": "topic", **bad})
                assert raised.value.field.startswith(field)
            with pytest.raises(ValidationError) as one:
                remote.latest("s-key", "topic", "db")
            assert one.value.field == "keys"
            # The route itself: `by` missing, an agent key naming another agent.
            raw = httpx.get(f"{url}/v1/sessions/s-key/latest",
                            headers={"Authorization": f"Bearer {key_a}"})
            assert raw.status_code == 422 and raw.json()["field"] == "by"
            assert raw.headers["content-type"] == "application/problem+json"
            agent_key, _ = server.admin.api_keys().create("team-a", "tests", agent_id="alice")
            raw = httpx.get(f"{url}/v1/sessions/s-key/latest",
                            params={"by": "topic", "agent_id": "bob"},
                            headers={"Authorization": f"Bearer {agent_key}"})
            assert raw.status_code == 403 and raw.json()["field"] == "agent_id"
            raw = httpx.get(f"{url}/v1/sessions/s-key/latest", params={"by": "topic"},
                            headers={"Authorization": f"Bearer {agent_key}"})
            assert raw.status_code == 200
            assert raw.json()["latest"]["db"]["turn"]["content"] == "db: Postgres"
    finally:
        conn.flushall()
        conn.close()
