"""Wire format: one contiguous byte buffer per message, sent with mpi4py's buffer interface.

Layout: a 32-byte header, then the indices (sparse messages only, padded to 8 bytes), then the
values. Header fields: magic, format (sparse or dense), index and value item sizes, a quantizer
code (0: none), the item count, the length of the index range the message covers, and its
offset (the global index of a dense block's first value). Indices in sparse messages are global.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import kernels
from .errors import SparcmlError
from .vector import should_be_dense

__all__ = ["HEADER", "HEADER_SIZE", "SPARSE", "DENSE", "Part", "encode", "decode"]

MAGIC = 0x53505243  # "SPRC"
SPARSE = 0
DENSE = 1

HEADER = np.dtype([("magic", "<u4"), ("format", "u1"), ("index_size", "u1"),
                   ("value_size", "u1"), ("quantizer", "u1"), ("count", "<i8"),
                   ("length", "<i8"), ("offset", "<i8")])
HEADER_SIZE = HEADER.itemsize
assert HEADER_SIZE == 32

_VALUE_BY_SIZE = {4: np.dtype(np.float32), 8: np.dtype(np.float64)}
_INDEX_BY_SIZE = {4: np.dtype(np.int32), 8: np.dtype(np.int64)}


def _pad8(n: int) -> int:
    return (n + 7) & ~7


@dataclass
class Part:
    """A decoded message: the index range ``[offset, offset + length)`` of a vector.

    Sparse: ``indices`` (global, sorted) and ``values``. Dense: ``indices is None`` and ``values``
    holds all ``length`` values of the range. Arrays are views into the received buffer.
    """

    offset: int
    length: int
    indices: np.ndarray | None
    values: np.ndarray

    @property
    def is_dense(self) -> bool:
        return self.indices is None

    @property
    def nnz(self) -> int:
        return self.length if self.indices is None else self.indices.shape[0]


def _header(buf, fmt, index_dtype, value_dtype, count, length, offset):
    h = buf[:HEADER_SIZE].view(HEADER)
    h["magic"] = MAGIC
    h["format"] = fmt
    h["index_size"] = np.dtype(index_dtype).itemsize
    h["value_size"] = np.dtype(value_dtype).itemsize
    h["quantizer"] = 0
    h["count"] = count
    h["length"] = length
    h["offset"] = offset


def encode(part: Part, index_dtype, *, known_dense: bool = False) -> tuple[np.ndarray, bool]:
    """Encode a part in the cheaper of the two representations (the switch rule, per message).

    Returns ``(buffer, is_dense)``. A sparse part whose nnz crosses the rule is scattered into a
    dense block; a dense part with few nonzeros is sent sparse, unless ``known_dense`` says its
    support is known to cross the rule (skips the O(length) count).
    """
    value_dtype = part.values.dtype
    if part.indices is None:
        dense = known_dense or should_be_dense(kernels.count_nonzero(part.values), part.length,
                                               index_dtype, value_dtype)
        if dense:
            buf = np.empty(_pad8(HEADER_SIZE + part.length * value_dtype.itemsize), np.uint8)
            _header(buf, DENSE, index_dtype, value_dtype, part.length, part.length, part.offset)
            buf[HEADER_SIZE:HEADER_SIZE + part.values.nbytes].view(value_dtype)[:] = part.values
            return buf, True
        idx, val = kernels.dense_to_sparse(part.values, part.offset, np.empty(0, index_dtype))
        part = Part(part.offset, part.length, idx, val)
    n = part.indices.shape[0]
    if should_be_dense(n, part.length, index_dtype, value_dtype):
        buf = np.empty(_pad8(HEADER_SIZE + part.length * value_dtype.itemsize), np.uint8)
        _header(buf, DENSE, index_dtype, value_dtype, part.length, part.length, part.offset)
        block = buf[HEADER_SIZE:HEADER_SIZE + part.length * value_dtype.itemsize].view(value_dtype)
        block[:] = 0
        kernels.scatter_add(block, part.indices, part.values, part.offset)
        return buf, True
    idx_bytes = _pad8(n * np.dtype(index_dtype).itemsize)
    # the total is padded to 8 bytes too, so that buffers gathered back to back stay aligned
    buf = np.zeros(_pad8(HEADER_SIZE + idx_bytes + n * value_dtype.itemsize), np.uint8)
    _header(buf, SPARSE, index_dtype, value_dtype, n, part.length, part.offset)
    buf[HEADER_SIZE:HEADER_SIZE + n * np.dtype(index_dtype).itemsize].view(index_dtype)[:] = \
        part.indices
    buf[HEADER_SIZE + idx_bytes:HEADER_SIZE + idx_bytes + part.values.nbytes].view(value_dtype)[:] = \
        part.values
    return buf, False


def decode(buf: np.ndarray) -> Part:
    """Decode a buffer written by :func:`encode` (views, no copies)."""
    if buf.shape[0] < HEADER_SIZE:
        raise SparcmlError(f"corrupt message: {buf.shape[0]} bytes, shorter than the header")
    h = buf[:HEADER_SIZE].view(HEADER)[0]
    if h["magic"] != MAGIC:
        raise SparcmlError("corrupt message: bad magic number (not a sparcml buffer)")
    value_dtype = _VALUE_BY_SIZE[int(h["value_size"])]
    count, length, offset = int(h["count"]), int(h["length"]), int(h["offset"])
    if h["format"] == DENSE:
        return Part(offset, length, None,
                    buf[HEADER_SIZE:HEADER_SIZE + count * value_dtype.itemsize].view(value_dtype))
    index_dtype = _INDEX_BY_SIZE[int(h["index_size"])]
    idx_end = HEADER_SIZE + count * index_dtype.itemsize
    val_start = HEADER_SIZE + _pad8(count * index_dtype.itemsize)
    return Part(offset, length, buf[HEADER_SIZE:idx_end].view(index_dtype),
                buf[val_start:val_start + count * value_dtype.itemsize].view(value_dtype))
