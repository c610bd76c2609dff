"""Numba kernels of the compressed index encodings of the wire format: pure, no MPI inside.

Two encodings of a strictly increasing index array ``x[0] < ... < x[n-1]`` in
``[offset, offset + length)`` (what :mod:`sparcml._wire.codec` chooses between, per message, by size):

- **Elias-Fano** of the gaps: with ``y[i] = x[i] - offset - i`` (non-decreasing, in
  ``[0, length - n]``) and ``L = floor(log2((length - n + 1) / n))`` (0 when that is < 1), the
  low ``L`` bits of every ``y[i]`` are bit-packed back to back (the *low* part, ``ceil(n L / 8)``
  bytes), and the high part ``y[i] >> L`` is written in unary: bit ``(y[i] >> L) + i`` is set in
  a bit array of ``n + ((length - n) >> L) + 1`` bits (the *high* part). About
  ``L + 1 + 2^-L (length - n) / n <= 2 + log2(length / n)`` bits per index, whatever the gaps:
  a delta code whose size depends only on ``(n, length)`` (so the choice costs nothing and the
  cost model can predict it), and no long gap can inflate it as it would a fixed-width code.
- **bitmap**: bit ``x[i] - offset`` of a ``length``-bit array (dense stretches: 1 bit per
  position).

Bits are little-endian within bytes (bit ``b`` of the array is ``byte[b >> 3] >> (b & 7)``).
The decoders check what they read (a corrupt message is reported, never read outside ``buf``):
they return the number of indices written, or a negative code (``BAD_COUNT``: not exactly
``n`` set bits; ``BAD_ORDER``: not strictly increasing; ``BAD_RANGE``: outside the range).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .._numba_cache import guard_numba_cache

guard_numba_cache()  # before any kernel is compiled (sparcml._numba_cache)

__all__ = ["ef_low_bits", "ef_nbytes", "bitmap_nbytes", "ef_encode", "ef_decode",
           "bitmap_encode", "bitmap_decode", "BAD_COUNT", "BAD_ORDER", "BAD_RANGE"]

_jit = njit(cache=True, nogil=True)

BAD_COUNT = -1
BAD_ORDER = -2
BAD_RANGE = -3

# the position of the lowest set bit of each byte value (8 for 0, never looked up)
_CTZ = np.array([8] + [(v & -v).bit_length() - 1 for v in range(1, 256)], np.int64)


def ef_low_bits(n: int, length: int) -> int:
    """``L`` of the Elias-Fano code of ``n`` indices over a range of ``length`` (Python ints)."""
    if n <= 0:
        return 0
    q = (length - n + 1) // n
    return q.bit_length() - 1 if q >= 1 else 0


def ef_nbytes(n: int, length: int) -> tuple[int, int]:
    """``(low bytes, high bytes)`` of the Elias-Fano code of ``n`` indices over ``length``."""
    L = ef_low_bits(n, length)
    return (n * L + 7) // 8, (n + ((length - n) >> L) + 1 + 7) // 8


def bitmap_nbytes(length: int) -> int:
    """Bytes of the bitmap of a range of ``length`` positions."""
    return (length + 7) // 8


@_jit
def _put_bits(out, bitpos, value, nbits):
    while nbits > 0:
        sh = bitpos & 7
        take = min(8 - sh, nbits)
        out[bitpos >> 3] |= np.uint8((value & ((1 << take) - 1)) << sh)
        value >>= take
        bitpos += take
        nbits -= take


@_jit
def _get_bits(buf, bitpos, nbits):
    value = 0
    got = 0
    while got < nbits:
        sh = bitpos & 7
        take = min(8 - sh, nbits - got)
        value |= ((np.int64(buf[bitpos >> 3]) >> sh) & ((1 << take) - 1)) << got
        got += take
        bitpos += take
    return value


@_jit
def ef_encode(indices, offset, L, low, high):
    """Write the Elias-Fano code of ``indices`` (sorted, in ``[offset, ...)``) into ``low`` and
    ``high`` (uint8 of :func:`ef_nbytes`, zeroed by the caller)."""
    n = indices.shape[0]
    for i in range(n):
        y = np.int64(indices[i]) - offset - i
        if L > 0:
            _put_bits(low, i * L, y, L)
        h = (y >> L) + i
        high[h >> 3] |= np.uint8(1 << (h & 7))


@_jit
def ef_decode(low, high, n, L, offset, length, out):
    """Decode ``n`` indices of an Elias-Fano code into ``out`` (``n`` items, any int dtype that
    holds ``offset + length``); returns ``n`` or a negative code (see the module docstring)."""
    i = 0
    prev = np.int64(-1)
    mask = (np.int64(1) << L) - 1
    acc = np.int64(0)  # the low bits read ahead, sequentially (L <= 55 keeps them in int64)
    held = 0
    pos = 0
    for byte in range(high.shape[0]):
        b = np.int64(high[byte])
        while b != 0:
            t = _CTZ[b]
            if i >= n:
                return BAD_COUNT
            h = byte * 8 + t - i
            if L == 0:
                lowbits = np.int64(0)
            elif L <= 55:
                while held < L:
                    acc |= np.int64(low[pos]) << held
                    pos += 1
                    held += 8
                lowbits = acc & mask
                acc >>= L
                held -= L
            else:
                lowbits = _get_bits(low, i * L, L)
            y = (h << L) | lowbits
            x = y + i
            if x <= prev:
                return BAD_ORDER
            if x >= length:
                return BAD_RANGE
            out[i] = x + offset
            prev = x
            i += 1
            b &= b - 1
    if i != n:
        return BAD_COUNT
    return n


@_jit
def bitmap_encode(indices, offset, bitmap):
    """Set bit ``x - offset`` of ``bitmap`` (uint8, zeroed by the caller) for every index."""
    for i in range(indices.shape[0]):
        p = np.int64(indices[i]) - offset
        bitmap[p >> 3] |= np.uint8(1 << (p & 7))


@_jit
def bitmap_decode(bitmap, n, offset, length, out):
    """The positions of the set bits of ``bitmap`` plus ``offset`` into ``out`` (``n`` items);
    returns ``n`` or a negative code (see the module docstring)."""
    i = 0
    for byte in range(bitmap.shape[0]):
        b = np.int64(bitmap[byte])
        while b != 0:
            p = byte * 8 + _CTZ[b]
            if p >= length:
                return BAD_RANGE
            if i >= n:
                return BAD_COUNT
            out[i] = p + offset
            i += 1
            b &= b - 1
    if i != n:
        return BAD_COUNT
    return n
