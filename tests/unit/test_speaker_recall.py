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


def _sam_and_priya(client: MemoryClient) -> None:
    """Two speakers' turns, one naming the other, embedded."""
    for i, (agent, text) in enumerate((("sam", "Sam: I painted the lake at dawn"),
                                       ("priya", "Priya: Sam and I went sailing"))):
        client.ingest("s", "user", text, agent_id=agent,
                      timestamp=T0 + timedelta(minutes=i), turn_id=f"t-{agent}")
    client.wait_until_processed("s", 30)


def test_dense_without_speakers_embeds_the_query_without_the_named_speaker(
    tmp_path: Path, settings: Settings
) -> None:
    emb = HashingEmbedder(1024)
    with MemoryClient.local(tmp_path / "m", settings, embedder=emb) as client:
        _sam_and_priya(client)
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


def test_beside_the_helper_the_query_is_embedded_again_when_the_recent_turns_name_more(
    tmp_path: Path, settings: Settings
) -> None:
    """With an embedder that frees the GIL, recall embeds the query while the helper reads
    the recent turns, so it starts from the speakers remembered for the session; on a
    session's first recall those do not include Sam yet: the query is embedded again
    without the name, and the dense scores are those of that text. Afterwards Sam is
    remembered and the first embedding is the right one."""

    class Recording(HashingEmbedder):
        releases_gil = True

        def __init__(self) -> None:
            super().__init__(1024)
            self.queries: list[str] = []

        def embed_query(self, text: str):  # type: ignore[no-untyped-def]
            self.queries.append(text)
            embedding.set()
            return super().embed_query(text)

    import threading

    embedding = threading.Event()
    emb = Recording()
    with MemoryClient.local(tmp_path / "m", settings, embedder=emb) as client:
        _sam_and_priya(client)
        query = "What did Sam paint?"
        policy = PRESETS["balanced"].model_copy(update={"dense_without_speakers": True})
        q = emb.embed_query("What did paint?")
        state = client._service.reads.recaller().state
        inner = state.recent_turns

        def recent_turns(*args: object, **kwargs: object) -> object:
            # The helper reads them only once the embedding has begun (as it does when the
            # caller is quicker to ONNX than the helper to Redis, which is the usual race).
            assert embedding.wait(timeout=10)
            return inner(*args, **kwargs)

        state.recent_turns = recent_turns  # type: ignore[method-assign]
        for expected_queries in ([query, "What did paint?"], ["What did paint?"]):
            emb.queries.clear()
            embedding.clear()
            items = {i.source_id: i for i in client.recall("s", query, 500, preset=policy)}
            assert emb.queries == expected_queries
            expected = float(emb.embed_documents(["Sam: I painted the lake at dawn"])[0] @ q)
            assert abs(items["t-sam"].components.dense - expected) < 1e-5
