"""A session's failed reflections are kept beside the traces stream (one read for the stats),
and a session reflected before they were kept is still read from its traces."""

from __future__ import annotations

import redis

from hivemem.pipeline.topology import Keys
from hivemem.service.turns import _failed_reflections
from hivemem.store.reflection import ReflectionState


def trace(session: str, index: int, *, failed: bool = False) -> dict[str, object]:
    return {"session_id": session, "index": index, "episode_id": f"e{index}",
            **({"failed": True, "error": "bad output"} if failed else {})}


def test_a_failure_is_listed_until_its_episode_is_reflected(redis_client: redis.Redis) -> None:
    keys = Keys()
    state = ReflectionState(redis_client, keys)
    assert state.failed_indexes("s") is None  # nothing recorded yet
    state.add_trace(trace("s", 1))
    assert state.failed_indexes("s") == []
    state.add_trace(trace("s", 2, failed=True))
    state.add_trace(trace("s", 3, failed=True))
    state.add_trace(trace("other", 2, failed=True))
    assert state.failed_indexes("s") == [2, 3]
    state.add_trace(trace("s", 2))  # a replay that worked
    assert _failed_reflections(state, "s") == [3]
    assert _failed_reflections(state, "other") == [2]
    # Forgetting the session deletes what is kept about it.
    assert keys.reflections_failed("s") in keys.session_keys("s")


def test_a_session_reflected_before_failures_were_kept_reads_its_traces(
    redis_client: redis.Redis,
) -> None:
    keys = Keys()
    state = ReflectionState(redis_client, keys)
    for t in (trace("old", 1, failed=True), trace("old", 2)):
        state.add_trace(t)
    redis_client.delete(keys.reflections_failed("old"))  # as an older version left it
    assert state.failed_indexes("old") is None
    assert _failed_reflections(state, "old") == [1]
