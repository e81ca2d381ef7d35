"""The recall path's int8 copy of the embedding model.

Recall embeds one short query per call, and on these CPUs the model's int8 quantisation runs
it in about half the time of fp32 (bench/probes/locomo_arms.py: recall p95 -3.5 ms, LoCoMo R@5/R@10
within noise of fp32 queries; the documents stay fp32). The copy is made here, once per
model file, with onnxruntime's dynamic quantisation (QInt8 weights, per channel: per tensor
loses cosine 0.968 vs 0.992 to fp32), and kept in a folder keyed by the fp32 file's content,
so every process of a deployment finds it made. Several processes making it at once each
write a folder of their own and rename it into place: the first wins, the rest use it.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

__all__ = ["default_derived_dir", "int8_copy"]

_MODEL_FILE = "model.onnx"


def default_derived_dir() -> Path:
    """Where derived models are kept unless configured: the user's cache folder."""
    root = os.environ.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return Path(root) / "hivemem" / "models"


def _digest(path: Path) -> str:
    h = hashlib.blake2b(digest_size=10)
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def int8_copy(model_dir: Path, model_file: str, into: Path, *, name: str) -> Path:
    """A folder with the int8 quantisation of `model_dir/model_file` as model.onnx and the
    model's other files (tokenizer, config) beside it; made now if it is not in `into`.
    Raises OSError / ImportError / onnx's errors when it cannot be made (the caller falls
    back to the fp32 model)."""
    source = model_dir / model_file
    slug = "".join(c if c.isalnum() or c in "-_." else "-" for c in name)
    target = into / f"{slug}-int8-{_digest(source)}"
    if (target / _MODEL_FILE).is_file():
        return target
    from onnxruntime.quantization import QuantType, quantize_dynamic

    into.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix=f".{slug}-", dir=into))
    try:
        for entry in model_dir.iterdir():
            if entry.is_file() and entry.name != model_file and not entry.name.endswith(".onnx"):
                shutil.copy2(entry, work / entry.name)
        # onnxruntime logs a suggestion to pre-process on the root logger: not ours to show.
        root = logging.getLogger()
        level = root.level
        root.setLevel(logging.ERROR)
        try:
            quantize_dynamic(str(source), str(work / _MODEL_FILE),
                             weight_type=QuantType.QInt8, per_channel=True)
        finally:
            root.setLevel(level)
        try:
            work.rename(target)
        except OSError:
            if not (target / _MODEL_FILE).is_file():
                raise
            # Another process put its copy in place first: the same bytes, use that one.
    finally:
        with contextlib.suppress(OSError):
            if work.exists():
                shutil.rmtree(work)
    log.info("model.quantized", model=name, folder=str(target),
             ms=round((time.perf_counter() - started) * 1000, 1))
    return target
