"""Packed messages: the P messages of a split in one buffer, written and read in one call each.

Package-internal. Phase 1 of the split algorithms sends part j of a vector to rank j; at
P = 1,024 the per-message Python of :meth:`~sparcml._wire.codec.Codec.encode` and
:func:`~sparcml._wire.codec.decode` (a few microseconds a message) was most of a rank's
software time per call. Here one Numba call (:mod:`sparcml._wire.packed_kernels`) writes all
P messages back to back, and one reads a received packed buffer: **the same bytes** as the
per-message functions (so receivers, traffic counts and results do not change), lossless
codecs only (a quantizer draws random numbers per message: those keep the per-message path).

:class:`Packed` is what :func:`encode_split` returns; :func:`scan` reads the table of any
packed buffer (or says which message the per-message path must handle).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .._errors import SparcmlError
from .codec import Codec
from .._lazy import lazy_module
kernels = lazy_module("sparcml._kernels")
pk = lazy_module("sparcml._wire.packed_kernels")

__all__ = ["Packed", "encode_split", "scan", "typed_views", "message_sizes"]

_NO_LINK = (False, 0.0, 0.0)


class Packed(NamedTuple):
    """P messages back to back: ``buf`` (uint8) and their ``table`` (``int64[P, NCOLS]``:
    ``table[j, START]`` and ``table[j, NBYTES]`` locate message j; ``table[j, FMT]`` is 1
    for a dense message)."""

    buf: np.ndarray
    table: np.ndarray

    def message(self, j: int) -> np.ndarray:
        """Message j (a view)."""
        at = int(self.table[j, pk.START])
        return self.buf[at:at + int(self.table[j, pk.NBYTES])]


def typed_views(buf: np.ndarray, codec: Codec) -> tuple[np.ndarray, np.ndarray]:
    """``buf`` (uint8, 8-byte aligned, a multiple of 8 bytes) as the codec's index and value
    items (for the kernels' byte positions)."""
    return buf.view(codec.index_dtype), buf.view(codec.value_dtype)


def _link(codec: Codec) -> tuple[bool, float, float]:
    if codec.link_costs is None:
        return _NO_LINK
    byte_s, index_s = codec.link_costs
    return True, float(byte_s), float(index_s)


def encode_split(codec: Codec, vec, bounds: np.ndarray) -> Packed:
    """The messages of ``vec`` cut at ``bounds`` (``P + 1`` increasing int64): message j is
    bitwise ``codec.encode(part j)`` of :func:`sparcml._collectives.exchange.split_parts`.
    ``vec``: a normalized :class:`~sparcml.SparseVector` of the codec's dtypes; the codec
    lossless."""
    if codec.lossy:
        raise SparcmlError("encode_split: packed messages are lossless (a quantizer encodes "
                           "message by message)")
    size = bounds.shape[0] - 1
    starts, lengths = bounds[:-1], np.diff(bounds)
    if vec.is_dense:
        counts = np.empty(size, np.int64)
        pk.block_nonzeros(vec.values, bounds, counts)
    else:
        pos = kernels.split_positions(vec.indices, bounds)
        counts = np.diff(pos)
    table = np.empty((size, pk.NCOLS), np.int64)
    s_idx, s_val = codec.index_dtype.itemsize, codec.value_dtype.itemsize
    use_link, byte_s, index_s = _link(codec)
    total = pk.plan_messages(counts, lengths, starts, s_idx, s_val, codec.code_indices,
                             use_link, byte_s, index_s, table)
    buf = np.zeros(int(total), np.uint8)
    idx_view, val_view = typed_views(buf, codec)
    if vec.is_dense:
        pk.encode_dense_split(vec.values, bounds, table, buf, idx_view, val_view,
                              np.empty(0, codec.index_dtype))
    else:
        pk.encode_sparse_split(vec.indices, vec.values, pos, table, buf, idx_view, val_view)
    return Packed(buf, table)


def message_sizes(table: np.ndarray) -> np.ndarray:
    """The bytes of each message of ``table`` (a view)."""
    return table[:, pk.NBYTES]


def scan(buf: np.ndarray, displs: np.ndarray, sizes: np.ndarray,
         codec: Codec) -> tuple[np.ndarray | None, int]:
    """``(table, -1)`` of the messages ``buf[displs[j]:displs[j] + sizes[j]]`` when the
    kernels can read every one (lossless, the codec's item sizes, aligned, well formed); else
    ``(None, j)``, j the first message they cannot (the per-message path then decodes them all,
    and reports what is wrong with a corrupt one)."""
    size = displs.shape[0]
    if buf.ctypes.data % 8 or buf.shape[0] % 8:
        return None, 0
    table = np.empty((size, pk.NCOLS), np.int64)
    bad = pk.scan_messages(buf, displs.astype(np.int64, copy=False),
                           sizes.astype(np.int64, copy=False), codec.index_dtype.itemsize,
                           codec.value_dtype.itemsize, table)
    return (table, -1) if bad < 0 else (None, int(bad))
