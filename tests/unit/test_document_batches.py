"""Documents are embedded in batches cut by padded tokens, shortest first."""

from __future__ import annotations

from pathlib import Path

import pytest

from hivemem.config import EmbeddingSettings
from hivemem.providers import embedders
from hivemem.providers.batching import token_batches


def test_batches_are_sorted_and_stay_within_the_token_and_row_limits() -> None:
    lengths = [30, 5, 120, 5, 8, 60, 7, 300, 12, 9, 9, 40]
    batches = token_batches(lengths, max_tokens=64, max_rows=4)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(len(lengths)))  # every text once
    assert [lengths[i] for i in flat] == sorted(lengths)  # shortest first
    for batch in batches:
        assert len(batch) <= 4
        padded = len(batch) * max(lengths[i] for i in batch)
        assert padded <= 64 or len(batch) == 1  # a text longer than the budget goes alone
    assert [lengths[i] for i in batches[-1]] == [300]
    assert [len(b) for b in batches][:2] == [4, 3]  # short texts fill the row limit, then
    # the tokens do: 9, 9, 12 and 30 would be 4 x 30 = 120 padded tokens


def test_one_batch_when_everything_fits_and_limits_must_be_positive() -> None:
    assert token_batches([3, 2, 1], max_tokens=100, max_rows=10) == [[2, 1, 0]]
    assert token_batches([], max_tokens=10, max_rows=10) == []
    with pytest.raises(ValueError):
        token_batches([1], max_tokens=0, max_rows=1)


@pytest.mark.model
def test_batched_documents_are_fastembeds_vectors_in_the_callers_order(
    fastembed_env: Path, tmp_path: Path
) -> None:
    """fp32: the vectors fastembed's own `embed` gives, whatever the batches; int8 (the
    default): the int8 copy the queries use, close to fp32."""
    import numpy as np

    texts = ["short", "a somewhat longer sentence about the database we chose",
             "x " * 300, "", "Caroline: I went to the LGBTQ support group yesterday!"] * 3
    fp32 = embedders.build_embedder(EmbeddingSettings(document_precision="fp32",
                                                      batch_tokens=64, batch_size=4))
    assert isinstance(fp32, embedders.FastEmbedEmbedder)
    got = fp32.embed_documents(texts)
    reference = np.asarray([fp32.embed_query(t) for t in texts])
    assert got.shape == (len(texts), fp32.dim)
    assert np.allclose(got, reference, atol=1e-5)
    settings = EmbeddingSettings(derived_dir=tmp_path / "derived")
    int8 = embedders.build_embedder(settings)
    query = embedders.build_embedder(settings, for_queries=True)
    got8 = int8.embed_documents(texts)
    # Alone, a document is the query's vector (the same file, the same batch of one); in a
    # batch, int8's dynamic activation scales see its batch-mates: close, not equal.
    alone = int8.embed_documents([texts[1]])[0]
    assert np.allclose(alone, query.embed_query(texts[1]), atol=1e-5)
    assert float(np.min(np.sum(got8 * got, axis=1))) > 0.95
    assert float(np.min(np.sum(got8[1] * alone))) > 0.98
    assert not np.allclose(got8, got, atol=1e-4)  # another model file
