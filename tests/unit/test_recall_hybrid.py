"""Hybrid recall end to end (producer -> embed worker -> Qdrant -> recall): the lexical signal,
presets and policies, explain, context around hits, related sessions, timestamps."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

import numpy as np
import numpy.typing as npt
import pytest

from hivemem import MemoryClient, RecallPolicy, ValidationError
from hivemem.domain.recall.policy import PRESETS

Pipeline = tuple[MemoryClient, Callable[[], None]]
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


class NoiseEmbedder:
    """Unit vectors from a hash of the text: no semantic signal at all."""

    dim = 1024
    name = "noise"

    def embed_documents(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        rows = []
        for text in texts:
            seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")
            row = np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
            rows.append(row / np.linalg.norm(row))
        return np.stack(rows) if rows else np.zeros((0, self.dim), dtype=np.float32)

    def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        row: npt.NDArray[np.float32] = self.embed_documents([text])[0]
        return row


@pytest.fixture
def embedder() -> NoiseEmbedder:  # overrides conftest's hashing embedder for `pipeline`
    return NoiseEmbedder()


def fill(client: MemoryClient, session: str, texts: list[str]) -> None:
    for i, text in enumerate(texts):
        client.ingest(session, "user" if i % 2 == 0 else "assistant", text,
                      timestamp=T0 + timedelta(minutes=i), turn_id=f"{session}-{i}")


FILLER = [f"status update {i}: the build is green and tests pass" for i in range(40)]


def test_keywords_find_what_vectors_cannot(pipeline: Pipeline) -> None:
    client, drain = pipeline
    fill(client, "s1", [*FILLER[:20], "the invoice job crashed with error PG-4471",
                        *FILLER[20:]])
    drain()
    result = client.recall("s1", "what was error PG-4471 about?", token_budget=200)
    top = result[0]
    assert top.content == "the invoice job crashed with error PG-4471"
    assert top.components.lexical == pytest.approx(1.0)
    # Found by keywords only (dense pool of one): it still carries its real similarity.
    narrow = PRESETS["balanced"].model_copy(update={"search_limit": 1, "recent_turns": 0})
    lexical_only = client.recall("s1", "what was error PG-4471 about?", token_budget=200,
                                 preset=narrow)
    hit = next(i for i in lexical_only if i.content == top.content)
    emb = NoiseEmbedder()
    expected = float(emb.embed_documents([top.content])[0]
                     @ emb.embed_query("what was error PG-4471 about?"))
    assert hit.components.dense == pytest.approx(expected, abs=1e-5) and expected != 0.0
    off = client.recall("s1", "what was error PG-4471 about?", token_budget=200,
                        preset=PRESETS["balanced"].model_copy(update={"lexical": False}))
    assert off[0].content != top.content or off[0].components.lexical == 0.0


def test_neighbours_bring_the_answer_next_to_the_hit(pipeline: Pipeline) -> None:
    client, drain = pipeline
    fill(client, "s1", [*FILLER[:10], "Which port does the staging gateway listen on?",
                        "It is 8443, behind the load balancer.", *FILLER[10:30]])
    drain()
    result = client.recall("s1", "staging gateway port", token_budget=300, explain=True)
    answer = next(i for i in result if i.source_id == "s1-11")
    assert result[0].source_id == "s1-10"
    # The answer carries the relevance of the question next to it (a keyword hit; the
    # noise vectors give nothing), far above the filler's.
    assert answer.components.neighbour == pytest.approx(result[0].components.relevance)
    assert answer.components.neighbour > 2 * max(
        i.components.relevance for i in result if i.source_id not in ("s1-10", "s1-11"))
    # It follows a question: it gains as its answer too (and the turn before does not).
    assert answer.components.answer == pytest.approx(result[0].components.relevance)
    before = next(i for i in result if i.source_id == "s1-9")
    assert before.components.answer == 0.0
    assert answer.score - before.score > 0.9 * PRESETS["balanced"].weights.answer * (
        result[0].components.relevance)
    narrow = PRESETS["balanced"].model_copy(update={"neighbours": 0, "search_limit": 1,
                                                    "recent_turns": 0})
    alone = client.recall("s1", "staging gateway port", token_budget=300, preset=narrow)
    ids = [i.source_id for i in alone]
    assert "s1-10" in ids and "s1-11" not in ids  # (the other one: the noise top dense hit)


def test_explain_lists_exclusions_with_reasons(pipeline: Pipeline) -> None:
    client, drain = pipeline
    fill(client, "s1", ["We deploy with Helm charts on Kubernetes.",
                        "We deploy with Helm charts on Kubernetes.",
                        *FILLER[:30]])
    drain()
    result = client.recall("s1", "how do we deploy with helm", token_budget=40, explain=True)
    assert result.used_tokens <= 40 == result.token_budget
    assert result.preset == "balanced"
    reasons = {x.reason for x in result.excluded}
    assert {"duplicate", "budget"} <= reasons
    dup = next(x for x in result.excluded if x.reason == "duplicate")
    assert dup.detail.startswith("near-duplicate of turn:s1:")
    assert client.recall("s1", "helm", token_budget=40).excluded == []  # only when asked
    as_dict = result.to_dict()
    assert as_dict["used_tokens"] == result.used_tokens and as_dict["excluded"]


def test_presets_and_custom_policies(pipeline: Pipeline) -> None:
    client, drain = pipeline
    fill(client, "s1", FILLER[:30])
    drain()
    cheap = client.recall("s1", "build status", preset="cheap")
    assert cheap.preset == "cheap" and cheap.token_budget == 1000
    assert client.recall("s1", "build status").preset == "balanced"
    strict = RecallPolicy(name="strict", min_score=10.0)
    assert len(client.recall("s1", "build status", preset=strict)) == 0
    reserved = RecallPolicy(name="reserve", reserve_tokens=900, token_budget=1000)
    assert client.recall("s1", "build status", preset=reserved).used_tokens <= 100
    with pytest.raises(ValidationError) as info:
        client.recall("s1", "build status", preset="nope")
    assert info.value.field == "preset"
    with pytest.raises(ValidationError) as info:
        client.recall("s1", "build status", token_budget=50, preset=reserved)
    assert info.value.field == "token_budget"
    with pytest.raises(ValidationError) as info:
        client.recall("s1", "build status", related_sessions="s2")  # type: ignore[arg-type]
    assert info.value.field == "related_sessions"
    with pytest.raises(ValueError, match="quotas"):
        RecallPolicy(quotas={"turns": 0.5})


def test_related_sessions_are_searched_with_a_smaller_boost(pipeline: Pipeline) -> None:
    client, drain = pipeline
    fill(client, "s1", FILLER[:10])
    fill(client, "s2", ["the release train leaves on Thursday", *FILLER[10:20]])
    drain()
    alone = client.recall("s1", "when does the release train leave")
    assert all(i.session_id == "s1" for i in alone)
    both = client.recall("s1", "when does the release train leave",
                         related_sessions=["s2"])
    hit = next(i for i in both if i.session_id == "s2")
    assert hit.content == "the release train leaves on Thursday"
    assert hit.components.session == 0.5 and "related session" in hit.components.reasons()


def test_render_shows_timestamps_oldest_first(pipeline: Pipeline) -> None:
    client, drain = pipeline
    fill(client, "s1", ["we met Alice at the conference", "Bob joined the team later"])
    drain()
    result = client.recall("s1", "who did we meet", token_budget=500,
                           preset=RecallPolicy(min_score=-10))  # noise vectors: keep all
    lines = result.render().splitlines()
    assert lines[0] == "[2026-03-01 09:00] user: we met Alice at the conference"
    assert lines[1].startswith("[2026-03-01 09:01] ")
