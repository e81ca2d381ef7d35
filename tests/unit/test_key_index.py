"""The key index (`ScopedMemory.latest`): each key's latest turn per session, kept on the
read side in one Redis hash per session. What it answers (puts, tombstones, `since`,
private turns), that it is kept (the watermark moves, new turns are folded in), that a
forget of the latest turn brings the one before back and leaves no trace of the forgotten
one, that it survives a restart and a lost hash, and that a reader that lost a race (to
another reader or to a forget) writes nothing. Embedded store."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from hivemem import MemoryClient, ScopedMemory, ValidationError
from hivemem.config import Settings
from hivemem.domain.keyed import Latest, fold, visible
from hivemem.domain.models import Role, Turn
from hivemem.domain.names import session_name
from hivemem.domain.scope import Scope
from hivemem.providers.embedders import HashingEmbedder
from hivemem.store.key_index import KeyIndexStore
from tests.support.forget_data import T0, redis_keys_with

S = "kv-session"
# The session's internal name: sessions are keyed by namespace (the store reads by name).
N = session_name("kv", S)


def _open(folder: Path, settings: Settings) -> MemoryClient:
    tuned = settings.model_copy(update={"lifecycle": settings.lifecycle.model_copy(
        update={"forget_settle_s": 0.0, "forget_settle_timeout_s": 1.0})})
    return MemoryClient.local(folder, tuned, embedder=HashingEmbedder(1024), workers=1,
                              as_guest=False)


@pytest.fixture
def client(tmp_path: Path, settings: Settings) -> Iterator[MemoryClient]:
    c = _open(tmp_path / "store", settings)
    try:
        yield c
    finally:
        c.close()


def _put(m: ScopedMemory, key: str, text: str, i: int, **extra: object) -> None:
    meta: dict[str, object] = {"k": key}
    if extra.pop("deleted", False):
        meta["deleted"] = True
    m.ingest(S, "user", text, metadata=meta, timestamp=T0 + timedelta(minutes=i),
             turn_id=f"t{i}", **extra)  # type: ignore[arg-type]


def _contents(m: ScopedMemory, keys: list[str] | None = None) -> dict[str, str]:
    m.wait_until_processed(S, 30)
    return {k: (v.turn.content if v.turn else "") for k, v in m.latest(S, "k", keys).items()}


def test_latest_is_each_keys_newest_turn_until_a_tombstone(client: MemoryClient) -> None:
    m = client.scoped(namespace="kv", agent_id="alice")
    _put(m, "food", "pizza", 1)
    _put(m, "drink", "tea", 2)
    m.ingest(S, "user", "a turn with no key", timestamp=T0 + timedelta(minutes=3))
    _put(m, "food", "sushi", 4)
    assert _contents(m) == {"food": "sushi", "drink": "tea"}
    assert _contents(m, ["food", "nope"]) == {"food": "sushi"}
    food = m.latest(S, "k", ["food"])["food"]
    assert (food.turn_id, food.since, food.at) == ("t4", T0 + timedelta(minutes=1),
                                                   T0 + timedelta(minutes=4))
    _put(m, "food", "gone", 5, deleted=True)
    assert _contents(m) == {"drink": "tea"}
    _put(m, "food", "ramen", 6)
    again = m.latest(S, "k", ["food"], with_turns=False)
    m.wait_until_processed(S, 30)
    again = m.latest(S, "k", ["food"], with_turns=False)
    assert again["food"].turn is None and again["food"].turn_id == "t6"
    assert again["food"].since == T0 + timedelta(minutes=6)  # a new run after the tombstone


def test_the_index_is_kept_and_read_forward(client: MemoryClient) -> None:
    m = client.scoped(namespace="kv", agent_id="alice")
    index = KeyIndexStore(client.admin.redis, client.keys)
    _put(m, "a", "one", 1)
    assert _contents(m) == {"a": "one"}
    first = index.read_all(N, "k")
    assert first.upto == 1 and set(first.entries) == {("", "a")}
    _put(m, "b", "two", 2)
    _put(m, "a", "three", 3)
    assert _contents(m, ["a"]) == {"a": "three"}  # a read of one key folds every new turn
    later = index.read_all(N, "k")
    assert later.upto == 3 and later.entries[("", "b")].turn_id == "t2"
    assert later.entries[("", "a")].since == T0 + timedelta(minutes=1)


def test_private_turns_are_their_agents_only(client: MemoryClient) -> None:
    alice = client.scoped(namespace="kv", agent_id="alice")
    bob = client.scoped(namespace="kv", agent_id="bob")
    shared_only = client.scoped(namespace="kv")
    _put(alice, "plan", "shared plan", 1)
    _put(bob, "plan", "bob's secret plan", 2, visibility="private")
    assert _contents(alice) == {"plan": "shared plan"}
    assert _contents(shared_only) == {"plan": "shared plan"}
    assert _contents(bob) == {"plan": "bob's secret plan"}
    assert client.scoped(namespace="other").sessions() == []
    with pytest.raises(Exception, match="no such session"):
        client.scoped(namespace="other", agent_id="carol").latest(S, "k")


def test_bad_arguments_are_refused_by_name(client: MemoryClient) -> None:
    m = client.scoped(namespace="kv", agent_id="alice")
    _put(m, "a", "one", 1)
    with pytest.raises(ValidationError, match="by"):
        m.latest(S, "no spaces")
    with pytest.raises(ValidationError, match="keys"):
        m.latest(S, "k", "a")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="keys"):
        m.latest(S, "k", [""])


def test_a_forgotten_latest_turn_leaves_the_index(client: MemoryClient) -> None:
    m = client.scoped(namespace="kv", agent_id="alice")
    _put(m, "pw", "the password is old-secret", 1)
    _put(m, "pw", "the password is hunter2-zz", 2)
    assert _contents(m) == {"pw": "the password is hunter2-zz"}
    index = KeyIndexStore(client.admin.redis, client.keys)
    before = index.read_all(N, "k")
    m.forget(S, turn_ids=["t2"])
    after = index.read_all(N, "k")  # the forget itself dropped it, and moved the epoch
    assert after.entries == {} and after.upto == 0 and after.epoch != before.epoch
    assert _contents(m) == {"pw": "the password is old-secret"}
    assert index.read_all(N, "k").entries[("", "pw")].turn_id == "t1"
    m.forget(S)  # the whole session: its index goes with it
    assert not redis_keys_with(client.admin.redis, "t1")
    assert client.admin.redis.exists(client.keys.session_latest(S)) == 0


def test_it_survives_a_restart_and_a_lost_hash(tmp_path: Path, settings: Settings) -> None:
    client = _open(tmp_path / "store", settings)
    m = client.scoped(namespace="kv", agent_id="alice")
    _put(m, "a", "one", 1)
    _put(m, "a", "two", 2)
    assert _contents(m) == {"a": "two"}
    client.close()
    client = _open(tmp_path / "store", settings)
    try:
        m = client.scoped(namespace="kv", agent_id="alice")
        assert KeyIndexStore(client.admin.redis, client.keys).read_all(N, "k").upto == 2
        assert _contents(m) == {"a": "two"}
        client.admin.redis.delete(client.keys.session_latest(S))  # a store restored without it
        assert _contents(m) == {"a": "two"}
        assert m.latest(S, "k")["a"].since == T0 + timedelta(minutes=1)
    finally:
        client.close()


def test_a_reader_that_lost_a_race_writes_nothing(client: MemoryClient) -> None:
    m = client.scoped(namespace="kv", agent_id="alice")
    _put(m, "a", "one", 1)
    m.wait_until_processed(S, 30)
    index = KeyIndexStore(client.admin.redis, client.keys)
    seen = index.read_all(N, "k")
    entry = Latest("a", "", 1, "t1", T0, T0, False)
    other = Latest("a", "", 1, "t-stale", T0, T0, False)
    assert index.write(N, "k", seen, 1, [entry])
    assert not index.write(N, "k", seen, 1, [other])  # another reader moved the watermark
    assert index.read_all(N, "k").entries[("", "a")].turn_id == "t1"
    before_forget = index.read_all(N, "k")
    index.reset(N)  # what a forget does once the turns are erased
    assert not index.write(N, "k", before_forget, 1, [other])  # folded before the forget
    assert index.read_all(N, "k").entries == {}
    fresh = index.read_all(N, "k")
    assert fresh.epoch != before_forget.epoch and fresh.upto == 0
    assert _contents(m) == {"a": "one"}  # and the next read folds the turns again
    # An entry naming a turn that is gone (a forget raced the reader that wrote it): the
    # reader that meets it starts the index again from the turns.
    now = index.read_all(N, "k")
    assert index.write(N, "k", now, now.upto, [Latest("a", "", 1, "t-gone", T0, T0, False)])
    assert _contents(m) == {"a": "one"}
    assert index.read_all(N, "k").entries[("", "a")].turn_id == "t1"


def _turn(seq: int, key: str | None, *, deleted: bool = False, agent: str = "alice",
          visibility: str = "shared") -> Turn:
    meta: dict[str, object] = {} if key is None else {"k": key}
    if deleted:
        meta["deleted"] = True
    return Turn(turn_id=f"t{seq}", session_id=S, agent_id=agent, role=Role.USER,
                content="x", metadata=meta, timestamp=T0 + timedelta(minutes=seq),
                namespace="kv", visibility=visibility, seq=seq,  # type: ignore[arg-type]
                token_count=1)


def test_fold_and_visible_are_order_free_and_scoped() -> None:
    turns = [_turn(3, "a"), _turn(1, "a"), _turn(2, None), _turn(4, "b", deleted=True),
             _turn(5, "a", agent="bob", visibility="private")]
    changed = fold("k", {}, turns)
    assert changed[("", "a")].seq == 3 and changed[("", "a")].since == T0 + timedelta(1 / 1440)
    assert changed[("", "b")].deleted and changed[("bob", "a")].seq == 5
    assert fold("k", changed, [_turn(3, "a")]) == {}  # folded already: no change
    alice = Scope(namespace="kv", agent_id="alice")
    bob = Scope(namespace="kv", agent_id="bob")
    assert {k: e.seq for k, e in visible(changed.values(), alice).items()} == {"a": 3}
    assert {k: e.seq for k, e in visible(changed.values(), bob).items()} == {"a": 5}
    assert {k: e.seq for k, e in visible(changed.values(), None).items()} == {"a": 5}
