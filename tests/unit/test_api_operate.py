"""Compaction preview/apply and dead letters over HTTP: what each key may see and do."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace

import httpx
import pytest

pytest.importorskip("fastapi")

from support.api_app import Api, live_api

from hivemem.pipeline.topology import Topology
from hivemem.store.stream_entries import decode_entries
from hivemem.store.streams import StreamStore


@pytest.fixture(scope="module")
def api() -> Iterator[Api]:
    with live_api() as server:
        yield server


def sid() -> str:
    return f"op-{uuid.uuid4().hex[:10]}"


def problem(res: httpx.Response, status: int) -> dict[str, object]:
    assert res.status_code == status, res.text
    assert res.headers["content-type"].startswith("application/problem+json")
    body: dict[str, object] = res.json()
    return body


def ingest(http: httpx.Client, session: str, content: str, agent: str,
           visibility: str = "shared") -> str:
    res = http.post(f"/v1/sessions/{session}/turns", json={
        "role": "user", "content": content, "agent_id": agent, "visibility": visibility})
    assert res.status_code == 201, res.text
    turn_id: str = res.json()["turn_id"]
    return turn_id


def kill_undelivered(api: Api, sessions: set[str]) -> dict[str, str]:
    """Dead-letter the sessions' turns on the turns streams, as a worker that gave up would
    (the entry leaves its stream): turn id -> the letter's entry id."""
    redis = api.client._redis  # noqa: SLF001 (the test's own fakeredis)
    streams = StreamStore(redis, api.client.keys)
    out: dict[str, str] = {}
    for stream in Topology(api.client.keys).embed.streams():
        for entry in decode_entries(redis.xrange(stream)):
            if not any(f'"{s}"' in entry.fields["turn"] for s in sessions):
                continue
            streams.dead_letter(stream, "embed", entry, "store refused: boom", 5)
            redis.xdel(stream, entry.entry_id)
            turn_id = entry.fields["turn"].split('"turn_id":"', 1)[1].split('"', 1)[0]
            out[turn_id] = entry.entry_id
    return out


def letters(http: httpx.Client, **params: object) -> list[dict[str, object]]:
    res = http.get("/v1/dead-letters", params=params)
    assert res.status_code == 200, res.text
    found: list[dict[str, object]] = res.json()["letters"]
    return found


def test_dead_letters_are_listed_by_namespace_and_what_the_agent_may_read(api: Api) -> None:
    api.drain()
    s_a, s_b = sid(), sid()
    planner_key, _ = api.keys.create("team-a", "planner", agent_id="planner")
    coder_key, _ = api.keys.create("team-a", "coder", agent_id="coder")
    with api.http(api.key_a) as a, api.http(api.key_b) as b, \
            api.http(planner_key) as planner, api.http(coder_key) as coder:
        private = ingest(planner, s_a, "planner's private note: the key is 1234", "planner",
                         "private")
        shared = ingest(coder, s_a, "shared: deploy on Friday", "coder")
        other = ingest(b, s_b, "team b's turn", "bob")
        ids = kill_undelivered(api, {s_a, s_b})
        assert {private, shared, other} <= set(ids)

        mine = {str(x["entry_id"]): x for x in letters(a)}
        assert set(mine) == {ids[private], ids[shared]}  # not team b's
        letter = mine[ids[private]]
        assert letter["session_id"] == s_a and letter["kind"] == "turn"
        assert letter["error"] == "store refused: boom" and letter["deliveries"] == 5
        assert letter["turns"][0]["content"].startswith("planner's private")  # type: ignore[index]
        assert {str(x["entry_id"]) for x in letters(b)} == {ids[other]}
        # An agent key: the shared turn and its own private one, never another agent's.
        assert {str(x["entry_id"]) for x in letters(coder)} == {ids[shared]}
        assert {str(x["entry_id"]) for x in letters(planner)} == {ids[private], ids[shared]}
        assert letters(a, stage="boundary") == []
        assert len(letters(a, count=1)) == 1

        problem(a.get("/v1/dead-letters", params={"stage": "window"}), 422)
        problem(a.get("/v1/dead-letters", params={"count": 0}), 422)
        # Replay: a namespace key, only its namespace's letters.
        body = problem(coder.post("/v1/dead-letters/replay",
                                  json={"entry_ids": [ids[shared]]}), 403)
        assert body["field"] == "agent_id"
        body = problem(b.post("/v1/dead-letters/replay", json={"entry_ids": [ids[shared]]}),
                       404)
        assert body["field"] == "entry_ids"
        problem(a.post("/v1/dead-letters/replay", json={"entry_ids": ["not-an-id"]}), 422)
        problem(a.post("/v1/dead-letters/replay", json={"stage": "embed", "all": True}), 422)

        res = a.post("/v1/dead-letters/replay", json={"entry_ids": [ids[shared]]})
        assert res.status_code == 200, res.text
        assert res.json() == {"stage": "embed", "replayed": [ids[shared]]}
        assert {str(x["entry_id"]) for x in letters(a)} == {ids[private]}
        api.drain()  # the replayed turn is embedded now
        stats = a.get(f"/v1/sessions/{s_a}/stats").json()
        assert stats["turns_processed"] >= 1
        # None named: every letter of the namespace (team b's stays).
        res = a.post("/v1/dead-letters/replay", json={})
        assert res.json()["replayed"] == [ids[private]]
        assert letters(a) == [] and len(letters(b)) == 1
        assert b.post("/v1/dead-letters/replay", json={}).json()["replayed"] == [ids[other]]
        api.drain()


def test_compaction_preview_and_apply_take_a_namespace_key_of_the_session(api: Api) -> None:
    session = sid()
    agent_key, _ = api.keys.create("team-a", "agent", agent_id="planner")
    with api.http(api.key_a) as a, api.http(api.key_b) as b, api.http(agent_key) as agent:
        ingest(a, session, "we use Postgres", "planner")
        api.drain()
        res = a.get(f"/v1/sessions/{session}/compaction")
        assert res.status_code == 200, res.text
        diff = res.json()
        assert diff["session_id"] == session and len(diff["fingerprint"]) == 64
        assert diff["active_before"] == diff["active_after"]
        assert problem(agent.get(f"/v1/sessions/{session}/compaction"), 403)["field"] == \
            "agent_id"
        problem(b.get(f"/v1/sessions/{session}/compaction"), 404)  # another namespace's
        problem(a.get("/v1/sessions/no-such-session/compaction"), 404)

        stale = "0" * 64
        body = problem(a.post(f"/v1/sessions/{session}/compact", json={"expect": stale}), 422)
        assert body["field"] == "expect"
        problem(a.post(f"/v1/sessions/{session}/compact", json={"expect": "abc"}), 422)
        problem(agent.post(f"/v1/sessions/{session}/compact",
                           json={"expect": diff["fingerprint"]}), 403)
        res = a.post(f"/v1/sessions/{session}/compact", json={"expect": diff["fingerprint"]})
        assert res.status_code == 200, res.text
        assert res.json()["fingerprint"] == diff["fingerprint"]


def test_a_replay_never_touches_a_letter_of_another_namespace_with_the_same_id(
        api: Api) -> None:
    """Two partitions' streams can give the same entry id: replaying team a's letter by
    that id must not put team b's back on its stream too."""
    api.drain()
    with api.http(api.key_a) as a, api.http(api.key_b) as b:
        s_a, s_b = sid(), sid()
        ingest(a, s_a, "team a's turn", "ann")
        ingest(b, s_b, "team b's turn", "bob")
        redis = api.client._redis  # noqa: SLF001 (the test's own fakeredis)
        streams = StreamStore(redis, api.client.keys)
        for stream in Topology(api.client.keys).embed.streams():
            for entry in decode_entries(redis.xrange(stream)):
                if s_a not in entry.fields["turn"] and s_b not in entry.fields["turn"]:
                    continue
                # Both letters name the same original id.
                streams.dead_letter(stream, "embed", replace(entry, entry_id="5-5"), "boom", 5)
                redis.xdel(stream, entry.entry_id)
        body = problem(a.post("/v1/dead-letters/replay", json={"entry_ids": ["5-5"]}), 422)
        assert body["field"] == "entry_ids"
        assert [x["entry_id"] for x in letters(a)] == ["5-5"]
        assert [x["entry_id"] for x in letters(b)] == ["5-5"]
        # The operator's CLI replays both; clean up as it would.
        api.client.admin.replay_dead_letters(["5-5"])
        api.drain()
