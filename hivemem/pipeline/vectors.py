"""The one vector codec: float32, little-endian, base64 where text is needed (stream entries,
JSON). Exact (no rounding) and compact; a leaf module so that the pure domain can use it for
episode centroids without importing the rest of the pipeline.

A second, lossy form, `encode_vector_half` (float16, text ``f16:<base64>``), is for vectors
that only feed a similarity decision and are copied through Redis once per turn (the
embedded stream, read by the boundary stage): half the bytes, and a cosine between two unit
vectors so encoded moves by well under 1e-3. `decode_vector` reads both forms (the prefix
cannot start a base64 text: ``:`` is not in its alphabet), so entries written before the
half form existed still decode.
"""

from __future__ import annotations

import base64
import binascii

import numpy as np
import numpy.typing as npt

# Explicit byte order: a vector written on one machine reads the same on any other.
_DTYPE = np.dtype("<f4")
_HALF = np.dtype("<f2")
_HALF_PREFIX = "f16:"


class VectorDecodeError(ValueError):
    """Text that is not a base64 float32 (or ``f16:`` float16) vector."""


def vector_bytes(vector: npt.ArrayLike) -> bytes:
    return np.asarray(vector, dtype=_DTYPE).tobytes()


def vector_from_bytes(raw: bytes) -> npt.NDArray[np.float32]:
    if len(raw) % _DTYPE.itemsize:
        raise VectorDecodeError(f"{len(raw)} bytes is not a whole number of float32s")
    # astype copies: the result is writable and in native order.
    return np.frombuffer(raw, dtype=_DTYPE).astype(np.float32)


def encode_vector(vector: npt.ArrayLike) -> str:
    return base64.b64encode(vector_bytes(vector)).decode("ascii")


def encode_vector_half(vector: npt.ArrayLike) -> str:
    """Lossy: float16 (about 3 significant digits; values beyond +-65504 become inf)."""
    half = np.asarray(vector, dtype=np.float32).astype(_HALF)
    return _HALF_PREFIX + base64.b64encode(half.tobytes()).decode("ascii")


def _b64(text: str | bytes) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise VectorDecodeError(f"not base64: {exc}") from None


def decode_vector(text: str | bytes) -> npt.NDArray[np.float32]:
    """Either form, as float32."""
    if isinstance(text, bytes):
        text = text.decode("ascii", errors="replace")
    if text.startswith(_HALF_PREFIX):
        raw = _b64(text[len(_HALF_PREFIX):])
        if len(raw) % _HALF.itemsize:
            raise VectorDecodeError(f"{len(raw)} bytes is not a whole number of float16s")
        return np.frombuffer(raw, dtype=_HALF).astype(np.float32)
    return vector_from_bytes(_b64(text))
