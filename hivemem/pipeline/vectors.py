"""The one vector codec: float32, little-endian, base64 where text is needed (stream entries,
JSON). Exact (no rounding) and compact; a leaf module so that the pure domain can use it for
episode centroids without importing the rest of the pipeline."""

from __future__ import annotations

import base64
import binascii

import numpy as np
import numpy.typing as npt

# Explicit byte order: a vector written on one machine reads the same on any other.
_DTYPE = np.dtype("<f4")


class VectorDecodeError(ValueError):
    """Text that is not a base64 float32 vector."""


def vector_bytes(vector: npt.ArrayLike) -> bytes:
    return np.asarray(vector, dtype=_DTYPE).tobytes()


def vector_from_bytes(raw: bytes) -> npt.NDArray[np.float32]:
    if len(raw) % _DTYPE.itemsize:
        raise VectorDecodeError(f"{len(raw)} bytes is not a whole number of float32s")
    # astype copies: the result is writable and in native order.
    return np.frombuffer(raw, dtype=_DTYPE).astype(np.float32)


def encode_vector(vector: npt.ArrayLike) -> str:
    return base64.b64encode(vector_bytes(vector)).decode("ascii")


def decode_vector(text: str | bytes) -> npt.NDArray[np.float32]:
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise VectorDecodeError(f"not base64: {exc}") from None
    return vector_from_bytes(raw)
