"""What a key sees of a dead letter (`hivemem.api.operate_routes.letter_view`), for each kind
of entry the embed and boundary stages dead-letter."""

from __future__ import annotations

from datetime import UTC, datetime

from hivemem.api.operate_routes import letter_view
from hivemem.domain.models import DeadLetter, Turn
from hivemem.pipeline.messages import EmbeddedTurn, EmbeddedTurns, EpisodeControl, TurnEntry
from hivemem.store.apikeys import ApiKeyInfo

NOW = datetime(2026, 12, 1, tzinfo=UTC)
NAMESPACE_KEY = ApiKeyInfo(key_id="k1", namespace="team-a", created_at=NOW)
ALICE_KEY = ApiKeyInfo(key_id="k2", namespace="team-a", agent_id="alice", created_at=NOW)
BOB_KEY = ApiKeyInfo(key_id="k3", namespace="team-a", agent_id="bob", created_at=NOW)
OTHER_KEY = ApiKeyInfo(key_id="k4", namespace="team-b", created_at=NOW)
SESSIONS = {"team-a": {"s"}, "team-b": {"t"}}


def turn(seq: int, agent: str, visibility: str = "shared", session: str = "s",
         namespace: str = "team-a") -> Turn:
    return Turn.model_validate({
        "turn_id": f"t{seq}", "session_id": session, "agent_id": agent, "role": "user",
        "content": f"{agent} says {seq}", "timestamp": NOW, "seq": seq, "token_count": 3,
        "namespace": namespace, "visibility": visibility})


def letter(fields: dict[str, str]) -> DeadLetter:
    return DeadLetter(stream="hm:stream", group="g", entry_id="7-0", fields=fields,
                      error="boom", deliveries=5, failed_at=NOW)


def seen(key: ApiKeyInfo, dead: DeadLetter, stage: str) -> list[int] | None:
    view = letter_view(dead, stage, SESSIONS[key.namespace], key)  # type: ignore[arg-type]
    return None if view is None else view.seqs


def test_an_embed_letter_is_seen_as_its_turn_is() -> None:
    private = letter(TurnEntry(turn=turn(3, "bob", "private")).to_fields())
    assert seen(NAMESPACE_KEY, private, "embed") == [3]
    assert seen(BOB_KEY, private, "embed") == [3]
    assert seen(ALICE_KEY, private, "embed") is None
    assert seen(OTHER_KEY, private, "embed") is None
    view = letter_view(private, "embed", {"s"}, BOB_KEY)
    assert view is not None and view.turns[0].content == "bob says 3"
    assert view.kind == "turn" and view.error == "boom"


def test_a_boundary_letter_of_several_turns_needs_every_turn_readable() -> None:
    batch = EmbeddedTurns(session_id="s", turns=(
        EmbeddedTurn(turn=turn(4, "alice")), EmbeddedTurn(turn=turn(5, "bob", "private"))))
    dead = letter(batch.to_fields())
    assert seen(NAMESPACE_KEY, dead, "boundary") == [4, 5]
    assert seen(BOB_KEY, dead, "boundary") == [4, 5]
    assert seen(ALICE_KEY, dead, "boundary") is None  # bob's private turn is in it
    assert seen(OTHER_KEY, dead, "boundary") is None


def test_a_control_is_its_session_namespace_s_and_a_broken_letter_nobody_s() -> None:
    close = letter(EpisodeControl(session_id="s", seq=9, action="close_episode").to_fields())
    view = letter_view(close, "boundary", {"s"}, ALICE_KEY)
    assert view is not None and view.kind == "control" and view.action == "close_episode"
    assert view.seqs == [9] and view.turns == []
    assert seen(OTHER_KEY, close, "boundary") is None
    assert seen(NAMESPACE_KEY, letter({"seq": "x", "turn": "{not json"}), "embed") is None
    assert seen(NAMESPACE_KEY, letter({"kind": "nope"}), "boundary") is None
    # A turn claiming a session of the namespace but another namespace: not shown.
    foreign = letter(TurnEntry(turn=turn(2, "carol", namespace="team-b")).to_fields())
    assert seen(NAMESPACE_KEY, foreign, "embed") is None
