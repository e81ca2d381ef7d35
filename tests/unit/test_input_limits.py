"""Input every store can hold: the structure limits of a turn, checked at validation.

qdrant-edge accepted metadata nested 124 levels and then could not replay its WAL: the
embedded store no longer opened for anyone. Validation now bounds depth, nodes, key sizes
and markers; the deepest accepted metadata is stored, read back and survives a reopen.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from hivemem.config import IngestSettings
from hivemem.domain import turn as limits
from hivemem.domain.models import Role, Turn
from hivemem.domain.turn import TurnDraft, check_metadata, check_timestamp
from hivemem.errors import ValidationError
from hivemem.providers.embedders import HashingEmbedder
from hivemem.store.vectors.edge import EdgeVectorStore

EMB = HashingEmbedder(64)
S = IngestSettings()


def nested(depth: int, leaf: Any = "leaf") -> dict[str, Any]:
    """A mapping `depth` containers deep (``{"k": "leaf"}`` is depth 1)."""
    value: Any = leaf
    for _ in range(depth):
        value = {"k": value}
    return value  # type: ignore[no-any-return]


def test_metadata_depth_is_bounded() -> None:
    assert check_metadata(nested(limits.MAX_METADATA_DEPTH), 16 * 1024)
    for depth in (limits.MAX_METADATA_DEPTH + 1, 124, 127):
        with pytest.raises(ValidationError) as err:
            check_metadata(nested(depth), 16 * 1024)
        assert err.value.field == "metadata" and "deep" in err.value.message
    deep_list: Any = "x"
    for _ in range(limits.MAX_METADATA_DEPTH):
        deep_list = [deep_list]
    with pytest.raises(ValidationError, match="deep"):
        check_metadata({"a": deep_list}, 16 * 1024)


def test_metadata_nodes_and_keys_are_bounded() -> None:
    many = {"a": list(range(limits.MAX_METADATA_NODES + 1))}
    with pytest.raises(ValidationError, match="values"):
        check_metadata(many, 1 << 20)
    long_key = {"k" * (limits.MAX_METADATA_KEY_CHARS + 1): 1}
    with pytest.raises(ValidationError) as err:
        check_metadata(long_key, 1 << 20)
    assert err.value.field == "metadata" and "key" in err.value.message
    assert check_metadata({"k" * limits.MAX_METADATA_KEY_CHARS: 1}, 1 << 20)


def test_metadata_integers_fit_64_bits() -> None:
    """qdrant-edge gave 2**70 back as the float 1.1805916207174112e+21 (found by fuzzing)."""
    assert check_metadata({"a": [2**63 - 1, -(2**63), True]}, 1024)
    for big in (2**63, -(2**63) - 1, 2**70):
        with pytest.raises(ValidationError, match="64-bit") as err:
            check_metadata({"a": {"b": [big]}}, 1024)
        assert err.value.field == "metadata"


def test_markers_per_turn_are_bounded() -> None:
    markers = [f"custom:m{i}" for i in range(limits.MAX_MARKERS)]
    assert len(TurnDraft("s", "user", "x", settings=S, markers=markers).markers) == len(markers)
    with pytest.raises(ValidationError) as err:
        TurnDraft("s", "user", "x", settings=S, markers=[*markers, "custom:one-more"])
    assert err.value.field == "markers"
    with pytest.raises(ValidationError, match="markers"):
        TurnDraft("s", "user", "x", settings=S,
                  markers=[f"custom:m{i}" for i in range(10_000)])


@pytest.mark.parametrize("value", [
    datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone(-timedelta(hours=23, minutes=59))),
    datetime(1, 1, 1, 0, 0, tzinfo=timezone(timedelta(hours=5))),
])
def test_timestamps_outside_the_representable_range(value: datetime) -> None:
    with pytest.raises(ValidationError) as err:
        check_timestamp(value)
    assert err.value.field == "timestamp"


def test_deepest_accepted_metadata_survives_an_edge_reopen(tmp_path: Path) -> None:
    """The 124-level case is refused; the accepted maximum (with the widest keys and the
    most markers) is stored, read back, and read back again after the store reopens."""
    with pytest.raises(ValidationError):
        TurnDraft("s1", "user", "x", settings=S, metadata=nested(124))
    metadata = nested(limits.MAX_METADATA_DEPTH - 1, leaf=["é" * 100, 1.5, None, True])
    metadata["k" * limits.MAX_METADATA_KEY_CHARS] = {"🦄": "\u202e"}
    markers = [f"custom:m{i}" for i in range(limits.MAX_MARKERS)]
    draft = TurnDraft("s1", "user", "deep", settings=S, metadata=metadata, markers=markers)
    turn = Turn(turn_id=draft.turn_id, session_id=draft.session_id, role=Role.USER,
                content=draft.content, timestamp=datetime.now(UTC), seq=1, token_count=1,
                metadata=draft.metadata, markers=draft.markers)
    store = EdgeVectorStore(tmp_path / "q", EMB.dim)
    store.upsert_turns([turn], EMB.embed_documents([turn.content]))
    assert store.get_turns("s1", [turn.turn_id])[0].turn == turn
    store.close()
    reopened = EdgeVectorStore(tmp_path / "q", EMB.dim)
    try:
        assert reopened.get_turns("s1", [turn.turn_id])[0].turn == turn
    finally:
        reopened.close()
