"""Recall's query embedder may load another export of the model (the int8 one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hivemem.config import EmbeddingSettings
from hivemem.providers import embedders


def test_query_model_path_is_the_recall_paths_model(monkeypatch: pytest.MonkeyPatch) -> None:
    loaded: list[EmbeddingSettings] = []

    class Recording:
        def __init__(self, settings: EmbeddingSettings) -> None:
            loaded.append(settings)

    monkeypatch.setattr(embedders, "FastEmbedEmbedder", Recording)
    settings = EmbeddingSettings(model_path=Path("/m/fp32"), query_model_path=Path("/m/int8"))
    embedders.build_embedder(settings, for_queries=True)
    embedders.build_embedder(settings)
    queries, documents = loaded
    assert queries.model_path == Path("/m/int8") and queries.threads == 1
    assert documents.model_path == Path("/m/fp32")
    plain: Any = EmbeddingSettings()
    embedders.build_embedder(plain, for_queries=True)
    assert loaded[-1].model_path is None


def test_a_prepared_query_is_the_same_vector_as_embed_query(fastembed_env: Path) -> None:
    """Recall tokenises first and runs ONNX after starting its helper: bit for bit the
    vector `embed_query` gives."""
    import numpy as np

    embedder = embedders.build_embedder(EmbeddingSettings(), for_queries=True)
    assert isinstance(embedder, embedders.FastEmbedEmbedder) and embedder.releases_gil
    for text in ("When did Caroline go to the LGBTQ support group?", "x", "  ",
                 "a much longer question " * 40):
        run = embedder.prepare_query(text)
        assert np.array_equal(run(), embedder.embed_query(text))
