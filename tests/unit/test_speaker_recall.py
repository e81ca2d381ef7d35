"""A question that names a speaker favours that speaker's turns (weights.speaker)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from hivemem import PRESETS, MemoryClient, Settings
from hivemem.providers.embedders import HashingEmbedder

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def test_the_named_speakers_turn_outranks_the_same_words_from_someone_else(
    tmp_path: Path, settings: Settings
) -> None:
    with MemoryClient.local(tmp_path / "m", settings, embedder=HashingEmbedder(1024)) as client:
        for i, (agent, place) in enumerate((("priya", "lake"), ("sam", "pond"))):
            client.ingest("s", "user", f"I went hiking at the {place} last weekend",
                          agent_id=agent, timestamp=T0 + timedelta(minutes=i),
                          turn_id=f"t-{agent}")
        client.wait_until_processed("s", 30)
        query = "Where did Sam go hiking?"
        flat = PRESETS["balanced"].model_copy(update={"weights": PRESETS[
            "balanced"].weights.model_copy(update={"speaker": 0.0, "recency": 0.0})})
        without = {i.agent_id: i.score for i in client.recall("s", query, 500, preset=flat)}
        boosted = flat.model_copy(update={"weights": flat.weights.model_copy(
            update={"speaker": 0.2})})
        items = list(client.recall("s", query, 500, preset=boosted))
        with_ = {i.agent_id: i.score for i in items}
        assert items[0].agent_id == "sam"
        # Only the named speaker's turn gains (by the weight, scaled by its relevance).
        assert with_["priya"] == without["priya"]
        assert with_["sam"] - without["sam"] > 0.05
