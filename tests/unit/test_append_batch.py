"""The append script writes a session's ids, window, counter and activity once per call:
the result must be the same as appending the turns one by one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import redis

from hivemem.config import IngestSettings
from hivemem.domain.names import session_name
from hivemem.domain.turn import TurnDraft
from hivemem.errors import OutOfScope
from hivemem.pipeline.topology import Keys
from hivemem.store.sessions import SessionStore
from hivemem.store.state import TurnLog

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def draft(session: str, i: int, *, turn_id: str | None = None,
          namespace: str = "default") -> TurnDraft:
    return TurnDraft(session, "user", f"turn {i}", settings=IngestSettings(),
                     timestamp=T0 + timedelta(minutes=i), turn_id=turn_id or f"{session}-{i}",
                     namespace=namespace)


def window_seqs(r: redis.Redis, keys: Keys, session: str) -> list[int]:
    """The seqs the window list holds, oldest first ((seq, JSON) pairs)."""
    return [int(s) for s in r.lrange(keys.session_recent(session), 0, -1)[::2]]


def turn_ids(r: redis.Redis, keys: Keys, session: str) -> dict[bytes, bytes]:
    """The ids hash without the counter and owner it also holds (`hivemem.store.head`)."""
    return {k: v for k, v in r.hgetall(keys.session_turn_ids(session)).items()
            if not k.startswith(b"#")}


def snapshot(r: redis.Redis, keys: Keys, session: str) -> tuple[object, ...]:
    return (TurnLog(r, keys, 0).last_seq(session), r.hgetall(keys.session_turn_ids(session)),
            r.lrange(keys.session_recent(session), 0, -1),
            SessionStore(r, keys).info(session)[1],  # first/last activity
            r.xlen(keys.turns_stream(keys.partition(session))),
            r.smembers(keys.sessions(keys.partition(session))))


def test_a_batch_gives_what_one_by_one_gives(redis_client: redis.Redis) -> None:
    batch_keys, single_keys = Keys("batch"), Keys("single")
    batched = TurnLog(redis_client, batch_keys, recent_window=3)
    single = TurnLog(redis_client, single_keys, recent_window=3)
    # Two sessions interleaved, a repeated turn id inside the batch, more turns than the
    # window holds.
    drafts = [draft("a", 1), draft("b", 1), draft("a", 2), draft("a", 2), draft("a", 3),
              draft("b", 2), draft("a", 4), draft("a", 5)]
    got = batched.append_turns(drafts)
    one_by_one = [single.append_turn(d) for d in drafts]
    assert got == one_by_one == [(1, False), (1, False), (2, False), (2, True), (3, False),
                                 (2, False), (4, False), (5, False)]
    for session in ("a", "b"):
        assert snapshot(redis_client, batch_keys, session) == snapshot(
            redis_client, single_keys, session)
    assert window_seqs(redis_client, batch_keys, "a") == [3, 4, 5]
    # A later call continues the counter and sees the earlier ids.
    assert batched.append_turns([draft("a", 6), draft("a", 1)]) == [(6, False), (1, True)]


def test_one_id_of_two_namespaces_in_a_batch_is_two_sessions(
    redis_client: redis.Redis,
) -> None:
    state = TurnLog(redis_client, Keys("ns"), recent_window=5)
    got = state.append_turns([draft("a", 1, namespace="team-x"),
                              draft("a", 2, namespace="team-y"),
                              draft("a", 3, namespace="team-x")])
    assert got == [(1, False), (1, False), (2, False)]
    x, y = session_name("team-x", "a"), session_name("team-y", "a")
    assert (state.last_seq(x), state.last_seq(y)) == (2, 1)
    assert (state.namespace_of(x), state.namespace_of(y)) == ("team-x", "team-y")
    assert state.last_seq(session_name("default", "a")) == 0


def test_a_turn_into_a_name_another_namespace_owns_is_refused_inside_a_batch(
    redis_client: redis.Redis,
) -> None:
    """Only a store from before namespaces can hold such a name (a ``default`` name whose
    owner record says otherwise): the append script still refuses it, turn by turn."""
    state = TurnLog(redis_client, Keys("owned"), recent_window=5)
    state.append_turns([draft("a", 1)])
    redis_client.hset(state.keys.session_turn_ids(session_name("default", "a")), "#ns", "x")
    with pytest.raises(OutOfScope):
        state.append_turns([draft("b", 1), draft("a", 2), draft("b", 2)])
    assert state.last_seq(session_name("default", "b")) == 2
    assert state.last_seq(session_name("default", "a")) == 1


def test_a_long_batch_of_one_session(redis_client: redis.Redis) -> None:
    # More pairs than one HSET/ZADD call is given at once inside the script.
    state = TurnLog(redis_client, Keys("long"), recent_window=400)
    out = state.append_turns([draft("a", i) for i in range(1, 701)])
    assert [seq for seq, _ in out] == list(range(1, 701))
    keys = state.keys
    assert len(turn_ids(redis_client, keys, "a")) == 700
    assert len(window_seqs(redis_client, keys, "a")) == 400
    assert state.stats("a").last_activity == T0 + timedelta(minutes=700)
    assert state.stats("a").first_activity == T0 + timedelta(minutes=1)


def test_a_batch_after_the_server_lost_its_scripts(redis_client: redis.Redis) -> None:
    # The scripts go as raw EVALSHA; a server that forgot them (restarted, or a promoted
    # replica) answers NOSCRIPT, and those calls run again on their own.
    state = TurnLog(redis_client, Keys("flushed"), recent_window=5)
    assert state.append_turns([draft(s, 1) for s in "abcd"]) == [(1, False)] * 4
    redis_client.script_flush()
    assert state.append_turns([draft(s, 2) for s in "abcd"]) == [(2, False)] * 4


def test_a_scope_that_passed_is_not_read_again_until_a_turn_is_refused(
    redis_client: redis.Redis,
) -> None:
    state = TurnLog(redis_client, Keys("cache"), recent_window=5)
    state.check_scopes([("a", "team-x")])
    state.append_turns([draft("a", 1, namespace="team-x")])
    name = session_name("team-x", "a")
    # The owner record changes behind this client's back (by hand: no write path does):
    redis_client.hset(state.keys.session_turn_ids(name), "#ns", "team-y")
    state.check_scopes([("a", "team-x")])  # remembered: no read, passes
    # ...but the append script checks every turn itself: nothing of "a" is written.
    with pytest.raises(OutOfScope):
        state.append_turns([draft("a", 2, namespace="team-x")])
    assert state.last_seq(name) == 1
    # And the refusal made the client forget: the pre-check reads again and refuses.
    with pytest.raises(OutOfScope):
        state.check_scopes([("a", "team-x")])


def test_the_window_holds_the_newest_turns_trimmed_past_a_slack(
    redis_client: redis.Redis,
) -> None:
    keys = Keys("slack")
    state = TurnLog(redis_client, keys, recent_window=4)
    state.append_turns([draft("a", i) for i in (1, 2, 3)])
    assert state.append_turns([draft("a", 4), draft("a", 5)]) == [(4, False), (5, False)]
    assert window_seqs(redis_client, keys, "a") == [1, 2, 3, 4, 5]  # 4 + a slack of 1
    assert [t.seq for t in state.recent_turns("a", 10)] == [5, 4, 3, 2]
    state.append_turn(draft("a", 6))  # past the slack: trimmed to the window
    assert window_seqs(redis_client, keys, "a") == [3, 4, 5, 6]
    assert [t.content for t in state.recent_turns("a", 2)] == ["turn 6", "turn 5"]
    assert state.append_turn(draft("a", 2)) == (2, True)  # trimmed, still a duplicate


def test_a_rewrite_of_the_window_keeps_one_entry_per_seq(redis_client: redis.Redis) -> None:
    from hivemem.domain.models import Turn
    from hivemem.pipeline.wire import turn_fields

    keys = Keys("rewrite")
    state = TurnLog(redis_client, keys, recent_window=3)
    state.append_turns([draft("a", i) for i in (1, 2, 3)])
    stored = [Turn.model_validate({**turn_fields(draft("a", i)), "seq": i,
                                   "content": f"stored {i}"}) for i in (2, 3, 4)]
    SessionStore(redis_client, keys).set_recent("a", stored, 3)
    assert window_seqs(redis_client, keys, "a") == [2, 3, 4]
    assert [(t.seq, t.content) for t in state.recent_turns("a", 10)] == [
        (4, "stored 4"), (3, "stored 3"), (2, "stored 2")]


def test_an_episode_close_takes_the_next_seq_of_a_session_with_turns(
    redis_client: redis.Redis,
) -> None:
    state = TurnLog(redis_client, Keys("control"), recent_window=5)
    state.append_turns([draft("b", 1, namespace="team-x"), draft("b", 2, namespace="team-x")])
    b = session_name("team-x", "b")
    assert state.append_control(b, "close_episode") == 3
    assert state.last_seq(b) == 3 and state.namespace_of(b) == "team-x"
    assert state.append_control(session_name("team-x", "nobody"), "close_episode") is None
    assert state.append_control(session_name("default", "b"), "close_episode") is None


@pytest.mark.parametrize("window", [0, 3])
def test_the_last_activity_is_the_newest_turns_with_or_without_a_window(
    redis_client: redis.Redis, window: int,
) -> None:
    state = TurnLog(redis_client, Keys(f"activity{window}"), recent_window=window)
    state.append_turns([draft("a", 1), draft("a", 2)])
    state.append_turn(draft("a", 3))
    stats = state.stats("a")
    assert stats.first_activity == T0 + timedelta(minutes=1)
    assert stats.last_activity == T0 + timedelta(minutes=3)
    info = SessionStore(redis_client, state.keys).info("a")[1]
    assert info["last_ts"] == (T0 + timedelta(minutes=3)).isoformat()


def test_a_restored_or_imported_turn_id_that_is_not_an_id_is_not_kept(
    redis_client: redis.Redis,
) -> None:
    from hivemem.domain.models import Turn
    from hivemem.pipeline.wire import turn_fields

    keys = Keys("oddids")
    state = TurnLog(redis_client, keys, recent_window=5)
    odd = [Turn.model_validate({**turn_fields(draft("a", 1)), "seq": 1, "turn_id": "#seq"}),
           Turn.model_validate({**turn_fields(draft("a", 2)), "seq": 2})]
    state.restore_session("a", odd)
    SessionStore(redis_client, keys).add_turn_ids("a", odd)
    assert turn_ids(redis_client, keys, "a") == {b"a-2": b"2"}
    assert state.last_seq("a") == 2


def test_recall_reads_the_window_and_the_boundary_progress_in_one_round_trip(
    redis_client: redis.Redis,
) -> None:
    from hivemem.store.episodes import EpisodeStore

    keys = Keys("together")
    state = TurnLog(redis_client, keys, recent_window=4)
    episodes = EpisodeStore(redis_client, keys, 10_000)
    for i in range(1, 7):
        state.append_turn(draft("a", i))
    redis_client.hset(keys.boundary_state("a"), mapping={"next_seq": 5, "closed_count": 2})
    # Every round trip writes its commands with one `send_packed_command` (a pipeline's
    # execute, a single command, and the sent pipeline recall uses alike). A connection the
    # pool finds stale reconnects first and sends its handshake (CLIENT SETINFO, HELLO) with
    # the same call: that is the client's, not a round trip of the read, so it is not counted.
    sent: list[bytes] = []
    connection_class = redis_client.connection_pool.connection_class
    send = connection_class.send_packed_command

    def counted(conn: object, command: object, *args: object, **kwargs: object) -> object:
        parts = [command] if isinstance(command, (bytes, str)) else list(command)  # type: ignore[call-overload]
        payload = b"".join(p.encode() if isinstance(p, str) else bytes(p) for p in parts)
        if not any(f"\r\n{word}\r\n".encode() in payload.upper()
                   for word in ("CLIENT", "HELLO", "PING", "AUTH", "SELECT")):
            sent.append(payload.upper())
        return send(conn, command, *args, **kwargs)  # type: ignore[arg-type]

    state.recent_turns_and_progress(episodes, "a", 3)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(connection_class, "send_packed_command", counted)
        turns, progress = state.recent_turns_and_progress(episodes, "a", 3)
    assert len(sent) == 1
    assert b"LRANGE" in sent[0] and b"HGETALL" in sent[0]
    assert [t.seq for t in turns] == [t.seq for t in state.recent_turns("a", 3)] == [6, 5, 4]
    assert progress == episodes.progress("a") == (4, 2, None, {})
    # No window asked: the progress alone; a session never written: empty and zeros.
    assert state.recent_turns_and_progress(episodes, "a", 0) == ([], (4, 2, None, {}))
    assert state.recent_turns_and_progress(episodes, "new", 5) == ([], (0, 0, None, {}))
    # Stores on different clients: each reads its own.
    other = EpisodeStore(redis.Redis(connection_pool=redis_client.connection_pool), keys,
                         10_000)
    assert state.recent_turns_and_progress(other, "a", 2)[0] == state.recent_turns("a", 2)
