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


def test_without_people_drops_the_names_and_keeps_the_question() -> None:
    from hivemem.domain.recall.currency import without_people

    assert without_people("When did Caroline go to the support group?", {"caroline"}) == (
        "When did go to the support group?")
    assert without_people("Is Mel's cat older than Caroline\u2019s?", {"mel", "caroline"}) == (
        "Is cat older than ?")
    # Only whole names: "planner-bot" is another word, "Melanie" is not "mel".
    assert without_people("what did the planner-bot tell Melanie", {"planner", "mel"}) == (
        "what did the planner-bot tell Melanie")
    assert without_people("Caroline?", {"caroline"}) == "Caroline?"  # nothing else left
    assert without_people("anything", set()) == "anything"


def test_dense_without_speakers_embeds_the_query_without_the_named_speaker(
    tmp_path: Path, settings: Settings
) -> None:
    emb = HashingEmbedder(1024)
    with MemoryClient.local(tmp_path / "m", settings, embedder=emb) as client:
        for i, (agent, text) in enumerate((("sam", "Sam: I painted the lake at dawn"),
                                           ("priya", "Priya: Sam and I went sailing"))):
            client.ingest("s", "user", text, agent_id=agent,
                          timestamp=T0 + timedelta(minutes=i), turn_id=f"t-{agent}")
        client.wait_until_processed("s", 30)
        query = "What did Sam paint?"
        base = PRESETS["balanced"]
        for strip, embedded in ((False, query), (True, "What did paint?")):
            policy = base.model_copy(update={"dense_without_speakers": strip})
            items = {i.source_id: i for i in client.recall("s", query, 500, preset=policy)}
            q = emb.embed_query(embedded)
            for turn_id, text in (("t-sam", "Sam: I painted the lake at dawn"),
                                  ("t-priya", "Priya: Sam and I went sailing")):
                expected = float(emb.embed_documents([text])[0] @ q)
                assert abs(items[turn_id].components.dense - expected) < 1e-5
        # Sam's own turn still comes first: the speaker weight says who.
        policy = base.model_copy(update={"dense_without_speakers": True})
        assert next(iter(client.recall("s", query, 500, preset=policy))).agent_id == "sam"
