"""The IDX file format MNIST ships in: parse it, decompress it (bounded), hash it. Pure functions of bytes."""

from __future__ import annotations

import gzip
import hashlib
import io
import math
import zlib

import numpy as np

from jaxintro.errors import DataError
from jaxintro.i18n import _

# IDX type codes (the third magic byte) and their big-endian NumPy dtypes.
IDX_DTYPES = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
MAX_IDX_BYTES = 64 << 20  # any IDX file read, decompressed: the largest of any dataset here is 47 MB (60,000 images)


def parse_idx(raw: bytes, name: str = "<bytes>") -> np.ndarray:
    """Parse the bytes of an IDX file into an array, checking magic, dims and size."""
    if len(raw) < 4:
        raise DataError(_("{name}: {size} bytes is too short for an IDX header (4 bytes at least); re-download it")
                        .format(name=name, size=len(raw)))
    if raw[0] != 0 or raw[1] != 0 or raw[2] not in IDX_DTYPES:
        raise DataError(_(
            "{name}: bad magic number {magic} (expected 0000 then a type byte 08-0e and a rank); "
            "this is not an IDX file, or it is still compressed under another name"
        ).format(name=name, magic=raw[:4].hex()))
    dtype, ndim = IDX_DTYPES[raw[2]], raw[3]
    header = 4 + 4 * ndim
    if ndim == 0 or len(raw) < header:
        raise DataError(_("{name}: header of rank {rank} is truncated ({size} bytes); re-download the file").format(
            name=name, rank=ndim, size=len(raw)))
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    expected = math.prod(dims) * dtype.itemsize  # Python ints: a hostile header cannot overflow this
    actual = len(raw) - header
    if actual != expected:
        raise DataError(_(
            "{name}: header says shape {shape} ({expected} data bytes) but the file holds {actual}; "
            "it is truncated or corrupt: delete it and re-download"
        ).format(name=name, shape=dims, expected=expected, actual=actual))
    # The size check above bounds this allocation by the file's own length.
    try:
        out = aligned_empty(dims, dtype.newbyteorder("="))
        out[...] = np.frombuffer(raw, dtype=dtype, offset=header).reshape(dims)
    except ValueError:  # e.g. a zero dimension beside others whose product NumPy cannot represent
        raise DataError(_("{name}: header shape {shape} cannot be represented; the file is corrupt").format(
            name=name, shape=dims)) from None
    return out


def aligned_empty(shape: tuple[int, ...], dtype: np.dtype, align: int = 64) -> np.ndarray:
    """An uninitialised array whose data starts on an `align`-byte boundary.

    On the CPU backend `jax.device_put` shares (does not copy) 64-byte-aligned host memory, so
    MNIST's 47 MB of training pixels exist once, not twice.
    """
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    buffer = np.empty(nbytes + align, np.uint8)
    offset = (-buffer.ctypes.data) % align
    return buffer[offset:offset + nbytes].view(dtype).reshape(shape)


def sha256_hex(raw: bytes) -> str:
    """SHA-256 of bytes, as hex."""
    return hashlib.sha256(raw).hexdigest()


def decompress_if_gzip(raw: bytes, name: str) -> bytes:
    """The decompressed bytes when `raw` is gzip (capped as they inflate: kilobytes can become gigabytes), else `raw`."""
    if raw[:2] != b"\x1f\x8b":
        return raw
    try:
        out = gzip.GzipFile(fileobj=io.BytesIO(raw)).read(MAX_IDX_BYTES + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError(_("{name}: damaged gzip data ({error}); delete it and re-download").format(
            name=name, error=exc)) from None
    if len(out) > MAX_IDX_BYTES:
        raise DataError(_("{name}: decompresses to more than {limit:,} bytes, more than any dataset's file; "
                          "delete it and re-download").format(name=name, limit=MAX_IDX_BYTES))
    return out
