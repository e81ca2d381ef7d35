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
    plain: Any = EmbeddingSettings(query_precision="fp32")
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


SHARED_INT8 = (Path(__file__).resolve().parents[3] / "shared" / "models"
               / "all-MiniLM-L6-v2-onnx-int8")


@pytest.mark.model
def test_recall_embeds_queries_with_an_int8_copy_made_once(
    fastembed_env: Path, tmp_path: Path
) -> None:
    """By default the query embedder loads the model's int8 quantisation, made from the fp32
    export fastembed has: byte for byte the int8 export in ../shared/models (made the same
    way), made once, its tokenizer beside it; its query vectors close to fp32's."""
    import numpy as np
    from structlog.testing import capture_logs

    settings = EmbeddingSettings(derived_dir=tmp_path / "derived")
    with capture_logs() as first:
        queries = embedders.build_embedder(settings, for_queries=True)
    made = [e for e in first if e["event"] == "model.quantized"]
    assert len(made) == 1
    folder = Path(made[0]["folder"])
    assert folder.parent == tmp_path / "derived"
    assert (folder / "tokenizer.json").is_file()
    if SHARED_INT8.is_dir():
        assert (folder / "model.onnx").read_bytes() == (SHARED_INT8 / "model.onnx").read_bytes()
    assert [p.name for p in (tmp_path / "derived").iterdir()] == [folder.name]  # no leftovers
    with capture_logs() as second:
        again = embedders.build_embedder(settings, for_queries=True)
    assert not [e for e in second if e["event"] == "model.quantized"]  # found, not made again
    fp32 = embedders.build_embedder(settings.model_copy(update={"query_precision": "fp32"}),
                                    for_queries=True)
    documents = embedders.build_embedder(settings.model_copy(
        update={"document_precision": "fp32"}))
    text = "When did Caroline go to the LGBTQ support group?"
    q8, q32 = queries.embed_query(text), fp32.embed_query(text)
    assert np.array_equal(q8, again.embed_query(text))
    assert not np.array_equal(q8, q32)  # it is another model file...
    assert float(q8 @ q32) > 0.97  # ...of the same model
    assert np.array_equal(q32, documents.embed_documents([text])[0])


def test_without_the_quantisation_tools_recall_keeps_fp32_and_says_so(
    monkeypatch: pytest.MonkeyPatch, fastembed_env: Path, tmp_path: Path
) -> None:
    from structlog.testing import capture_logs

    loaded: list[EmbeddingSettings] = []

    class Recording:
        def __init__(self, settings: EmbeddingSettings) -> None:
            loaded.append(settings)

    def no_onnx(*_a: Any, **_k: Any) -> Path:
        raise ModuleNotFoundError("No module named 'onnx'")

    monkeypatch.setattr(embedders, "FastEmbedEmbedder", Recording)
    monkeypatch.setattr(embedders, "int8_copy", no_onnx)
    with capture_logs() as logs:
        embedders.build_embedder(EmbeddingSettings(derived_dir=tmp_path), for_queries=True)
    assert loaded[-1].model_path is None
    (warning,) = [e for e in logs if e["event"] == "embedding.query_int8_unavailable"]
    assert warning["log_level"] == "warning" and "onnx" in warning["error"]
    assert "query_precision=fp32" in warning["fix"]


def test_processes_making_the_copy_at_once_end_with_one(tmp_path: Path) -> None:
    """Each writes a folder of its own and renames it into place; the losers use the
    winner's. A stand-in model file (the quantiser is replaced: this is about the folder)."""
    import threading

    from hivemem.providers import quantized

    source = tmp_path / "fp32"
    source.mkdir()
    (source / "model.onnx").write_bytes(b"fp32 weights")
    (source / "tokenizer.json").write_text("{}")
    barrier = threading.Barrier(4)

    def fake_quantize(src: str, dst: str, **_k: Any) -> None:
        barrier.wait(timeout=10)  # all four are past the "not made yet" check
        Path(dst).write_bytes(Path(src).read_bytes() + b" as int8")

    import onnxruntime.quantization as ortq

    mp = pytest.MonkeyPatch()
    mp.setattr(ortq, "quantize_dynamic", fake_quantize)
    results: list[Path] = []
    errors: list[BaseException] = []

    def make() -> None:
        try:
            results.append(quantized.int8_copy(source, "model.onnx", tmp_path / "d", name="m/x"))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=make) for _ in range(4)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
    finally:
        mp.undo()
    assert not errors and len(set(results)) == 1 and len(results) == 4
    (folder,) = (tmp_path / "d").iterdir()
    assert folder == results[0] and folder.name.startswith("m-x-int8-")
    assert (folder / "model.onnx").read_bytes() == b"fp32 weights as int8"
    assert (folder / "tokenizer.json").read_text() == "{}"
