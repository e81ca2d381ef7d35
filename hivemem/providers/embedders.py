"""Embedders: fastembed for real use, a hashing embedder for unit tests.

Vectors are unit-length float32 rows, so a dot product is the cosine similarity.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import structlog

from hivemem.config import EmbeddingSettings
from hivemem.errors import ModelUnavailable, ProviderError
from hivemem.providers.batching import token_batches
from hivemem.providers.quantized import default_derived_dir, int8_copy

Matrix = npt.NDArray[np.float32]


class Embedder(Protocol):
    """An embedder may also set `releases_gil = True`: its `embed_query` spends its time
    outside the GIL (ONNX), so recall does its lexical work on another thread meanwhile.
    Without it (pure Python, or nothing to compute) recall does all on the caller. Such an
    embedder may offer `prepare_query(text)`, returning the rest of the work as a call:
    recall prepares, starts its helper, and calls it (straight into ONNX)."""

    dim: int
    name: str

    def embed_documents(self, texts: Sequence[str]) -> Matrix: ...

    def embed_query(self, text: str) -> npt.NDArray[np.float32]: ...


def _unit_rows(matrix: Matrix) -> Matrix:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    unit: Matrix = (matrix / norms).astype(np.float32)
    return unit


class HashingEmbedder:
    """Feature hashing of lower-cased words and word bigrams. Deterministic, no model."""

    _WORDS = re.compile(r"\w+", re.UNICODE)

    def __init__(self, dim: int = 384) -> None:
        self.dim = dim
        self.name = f"hashing-{dim}"

    def _row(self, text: str) -> npt.NDArray[np.float32]:
        row = np.zeros(self.dim, dtype=np.float32)
        words = self._WORDS.findall(text.lower())
        features = words + [f"{a} {b}" for a, b in itertools.pairwise(words)]
        for feature in features:
            digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
            index = int.from_bytes(digest[:4], "little") % self.dim
            sign = 1.0 if digest[4] & 1 else -1.0
            row[index] += sign
        return row

    def embed_documents(self, texts: Sequence[str]) -> Matrix:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return _unit_rows(np.stack([self._row(t) for t in texts]))

    def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        row: npt.NDArray[np.float32] = self.embed_documents([text])[0]
        return row


log = structlog.get_logger(__name__)

_HOW_TO_FIX = (
    "To fix: on a machine with internet access the model downloads on first use; offline, set"
    " FASTEMBED_CACHE_PATH to a folder that holds the model in fastembed's cache layout and"
    " HF_HUB_OFFLINE=1 (this repository's README shows the command), or set"
    " HIVEMEM_EMBEDDING__MODEL_PATH to a folder with model.onnx and its tokenizer files."
)


def _offline_if_local(settings: EmbeddingSettings) -> None:
    if settings.offline or model_is_local(settings):
        # Read by huggingface_hub when fastembed imports it: set before that import.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _fastembed_kwargs(settings: EmbeddingSettings) -> dict[str, Any]:
    """Where fastembed finds the model: the cache folder, a specific export."""
    kwargs: dict[str, Any] = {}
    cache_dir = settings.cache_dir or os.environ.get("FASTEMBED_CACHE_PATH")
    if cache_dir:
        kwargs["cache_dir"] = str(cache_dir)
    if settings.model_path is not None:
        kwargs["specific_model_path"] = str(settings.model_path)
    return kwargs


class FastEmbedEmbedder:
    """fastembed's ONNX models. Documents are tokenised once, sorted by token count and cut
    into batches of about `batch_tokens` padded tokens (`providers.batching`): on mixed-length
    turns far less padding than fixed-size batches."""

    releases_gil = True  # onnxruntime's run does

    def __init__(self, settings: EmbeddingSettings) -> None:
        _offline_if_local(settings)
        try:
            from fastembed import TextEmbedding
        except ImportError as exc:  # pragma: no cover - fastembed is a dependency
            raise ModelUnavailable(f"fastembed is not installed: {exc}") from None
        self.name = settings.model
        self.batch_size = settings.batch_size
        self.batch_tokens = settings.batch_tokens
        kwargs = _fastembed_kwargs(settings)
        if settings.threads is not None:
            kwargs["threads"] = settings.threads
        try:
            self._model = TextEmbedding(settings.model, **kwargs)
        except Exception as exc:
            raise ModelUnavailable(
                f"could not load embedding model {settings.model!r}: {exc}. {_HOW_TO_FIX}"
            ) from None
        probe = self._embed(["dimension probe"])
        self.dim = int(probe.shape[1])
        session = getattr(getattr(self._model, "model", None), "model", None)
        self._inputs = {i.name for i in session.get_inputs()} if session is not None else set()
        self._steps = _OnnxSteps.of(getattr(self._model, "model", None), self._inputs)

    def _embed(self, texts: Sequence[str]) -> Matrix:
        try:
            rows = list(self._model.embed(list(texts), batch_size=self.batch_size))
        except Exception as exc:
            raise ProviderError(f"fastembed failed on {len(texts)} texts: {exc}") from exc
        return _unit_rows(np.asarray(rows, dtype=np.float32))

    def embed_documents(self, texts: Sequence[str]) -> Matrix:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if self._steps is not None:
            try:
                return self._steps.documents(texts, self.dim, self.batch_tokens,
                                             self.batch_size)
            except Exception as exc:
                raise ProviderError(f"fastembed failed on {len(texts)} texts: {exc}") from exc
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        vectors = self._embed([texts[i] for i in order])
        out = np.empty_like(vectors)
        out[order] = vectors
        return out

    def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        row: npt.NDArray[np.float32] = self._embed([text])[0]
        return row

    def prepare_query(self, text: str) -> Callable[[], npt.NDArray[np.float32]]:
        """`embed_query` in two steps: the tokenising here, the ONNX run and pooling in the
        call returned (the same vector, bit for bit). Recall starts its helper thread in
        between: the tokeniser releases the GIL, and a helper started before it took the
        GIL for its searches while this thread waited to get back to ONNX (~1.7 ms at load
        8). fastembed's steps are its model's own methods; a model without them is
        embedded whole in the call."""
        inner = getattr(self._model, "model", None)
        steps = ("tokenize", "model", "_preprocess_onnx_input", "_post_process_onnx_output")
        if inner is None or not all(hasattr(inner, a) for a in steps):
            return lambda: self.embed_query(text)
        try:
            from fastembed.common.onnx_model import OnnxOutputContext

            encoded = inner.tokenize([text])
            ids = np.array([e.ids for e in encoded], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
            feed: dict[str, Any] = {"input_ids": ids}
            if "attention_mask" in self._inputs:
                feed["attention_mask"] = mask
            if "token_type_ids" in self._inputs:
                feed["token_type_ids"] = np.zeros_like(ids)
            # fastembed offers no public call for one pre-tokenized batch: its own steps.
            feed = inner._preprocess_onnx_input(feed)  # noqa: SLF001
        except Exception as exc:
            raise ProviderError(f"fastembed failed on a query: {exc}") from exc

        def run() -> npt.NDArray[np.float32]:
            try:
                output = inner.model.run(inner.ONNX_OUTPUT_NAMES, feed)[0]
                rows = list(inner._post_process_onnx_output(OnnxOutputContext(  # noqa: SLF001
                    model_output=output, attention_mask=feed.get("attention_mask", mask),
                    input_ids=feed.get("input_ids", ids))))
            except Exception as exc:
                raise ProviderError(f"fastembed failed on a query: {exc}") from exc
            row: npt.NDArray[np.float32] = _unit_rows(np.asarray(rows, dtype=np.float32))[0]
            return row

        return run


class _OnnxSteps:
    """fastembed's model, driven a batch at a time: its tokenizer (a copy without padding,
    so each text's token count is known before batching), its ONNX session, its pooling.
    fastembed offers no public call for one pre-tokenized batch, so these are its own
    steps (as in `prepare_query`); a model without them is embedded through `embed`."""

    def __init__(self, inner: Any, tokenizer: Any, pad_id: int, inputs: set[str]) -> None:
        self.inner = inner
        self.tokenizer = tokenizer
        self.pad_id = pad_id
        self.inputs = inputs

    @classmethod
    def of(cls, inner: Any, inputs: set[str]) -> _OnnxSteps | None:
        steps = ("tokenizer", "model", "_preprocess_onnx_input", "_post_process_onnx_output")
        if inner is None or not all(getattr(inner, a, None) is not None for a in steps):
            return None
        try:
            from tokenizers import Tokenizer

            tokenizer = Tokenizer.from_str(inner.tokenizer.to_str())
            padding = inner.tokenizer.padding or {}
            tokenizer.no_padding()
        except Exception as exc:
            log.warning("embedding.batching_unavailable", error=f"{type(exc).__name__}: {exc}")
            return None
        return cls(inner, tokenizer, int(padding.get("pad_id", 0)), inputs)

    def documents(self, texts: Sequence[str], dim: int, max_tokens: int,
                  max_rows: int) -> Matrix:
        from fastembed.common.onnx_model import OnnxOutputContext

        inner = self.inner
        encoded = self.tokenizer.encode_batch(list(texts))
        lengths = [len(e.ids) for e in encoded]
        out = np.empty((len(texts), dim), dtype=np.float32)
        for rows in token_batches(lengths, max_tokens, max_rows):
            width = max(lengths[i] for i in rows)
            ids = np.full((len(rows), width), self.pad_id, dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=np.int64)
            for r, i in enumerate(rows):
                ids[r, :lengths[i]] = encoded[i].ids
                mask[r, :lengths[i]] = 1
            feed: dict[str, Any] = {"input_ids": ids}
            if "attention_mask" in self.inputs:
                feed["attention_mask"] = mask
            if "token_type_ids" in self.inputs:
                feed["token_type_ids"] = np.zeros_like(ids)
            feed = inner._preprocess_onnx_input(feed)  # noqa: SLF001 (see the class)
            output = inner.model.run(inner.ONNX_OUTPUT_NAMES, feed)[0]
            pooled = inner._post_process_onnx_output(OnnxOutputContext(  # noqa: SLF001
                model_output=output, attention_mask=feed.get("attention_mask", mask),
                input_ids=feed.get("input_ids", ids)))
            out[rows] = np.asarray(list(pooled), dtype=np.float32)
        return _unit_rows(out)


def build_embedder(settings: EmbeddingSettings, *, for_queries: bool = False) -> Embedder:
    """The configured embedder; `for_queries`: the recall path's (its own ONNX threads)."""
    if settings.provider == "hashing":
        return HashingEmbedder(settings.dim)
    if for_queries:
        update: dict[str, Any] = {"threads": settings.query_threads}
        if settings.query_model_path is not None:
            update["model_path"] = settings.query_model_path
        elif settings.query_precision == "int8":
            update["model_path"] = _int8_model(settings, "query")
        settings = settings.model_copy(update=update)
    elif settings.document_precision == "int8" and settings.model_path is None:
        settings = settings.model_copy(update={"model_path": _int8_model(settings, "document")})
    return FastEmbedEmbedder(settings)


def _int8_model(settings: EmbeddingSettings, role: str) -> Path | None:
    """The int8 copy of the configured model's export (None: it could not be made, and
    the `role` (query, document) embeds with the fp32 model, as logged)."""
    _offline_if_local(settings)
    try:
        from fastembed import TextEmbedding
    except ImportError as exc:  # pragma: no cover - fastembed is a dependency
        raise ModelUnavailable(f"fastembed is not installed: {exc}") from None
    try:
        # Finds (or downloads) the files without starting an ONNX session.
        located = TextEmbedding(settings.model, lazy_load=True, **_fastembed_kwargs(settings))
    except Exception as exc:
        raise ModelUnavailable(
            f"could not load embedding model {settings.model!r}: {exc}. {_HOW_TO_FIX}"
        ) from None
    inner: Any = located.model  # fastembed's ONNX model: its files' folder and name
    try:
        return int8_copy(Path(inner._model_dir),  # noqa: SLF001 (fastembed names no other)
                         inner.model_description.model_file,
                         settings.derived_dir or default_derived_dir(), name=settings.model)
    except Exception as exc:
        event = ("embedding.query_int8_unavailable" if role == "query"
                 else "embedding.document_int8_unavailable")
        log.warning(event, model=settings.model, error=f"{type(exc).__name__}: {exc}",
                    fix="pip install onnx, or set embedding.derived_dir to a writable folder,"
                        " or embedding." + role + "_precision=fp32")
        return None


def model_cache(settings: EmbeddingSettings) -> Path | None:
    """The folder fastembed loads models from: `cache_dir`, else FASTEMBED_CACHE_PATH."""
    folder = settings.cache_dir or os.environ.get("FASTEMBED_CACHE_PATH")
    return Path(folder).expanduser().resolve() if folder else None


def model_is_local(settings: EmbeddingSettings) -> bool:
    """Whether the model is on this machine (a `model_path`, or the model in the cache)."""
    if settings.model_path is not None:
        return Path(settings.model_path).is_dir()
    cache = model_cache(settings)
    if cache is None or not cache.is_dir():
        return False
    name = settings.model.rsplit("/", 1)[-1].lower()
    return any(name in entry.name.lower() for entry in cache.iterdir() if entry.is_dir())
