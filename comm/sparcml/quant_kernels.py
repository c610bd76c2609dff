"""Numba kernels of the compressors: QSGD encode/decode with bit packing, top-k selection.

Pure functions on arrays and scalars, ``@njit(cache=True, nogil=True)`` like ``kernels.py``; the
public wrappers (:mod:`sparcml.qsgd`, :mod:`sparcml.topk`) validate and convert. NumPy references
live in ``tests/reference_kernels.py``.

QSGD code layout (``bits`` in {2, 4, 8}, ``s = 2**(bits-1) - 1`` levels): value i becomes the
``bits``-bit code ``sign << (bits-1) | level``; codes are packed little-endian inside each byte,
value i at bit offset ``(i * bits) % 8`` of byte ``(i * bits) // 8`` (4, 2 or 1 values a byte).
A level of 0 always has sign 0.

Random rounding uses a counter-based generator (splitmix64 of ``seed + (i + 1) * golden``, top 32
bits): element i of one call always gets the same uniform, whatever the bucketing or thread.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = [
    "counter_uniforms",
    "qsgd_encode",
    "qsgd_decode",
    "first_nonfinite",
    "topk_select",
    "topk_select_buckets",
]

_jit = njit(cache=True, nogil=True)

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_TWO_M32 = 2.0 ** -32


@_jit
def _uniform(seed, i):
    """The i-th uniform in [0, 1) of stream ``seed`` (32-bit resolution)."""
    z = seed + np.uint64(i + 1) * _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    z = z ^ (z >> np.uint64(31))
    return np.float64(z >> np.uint64(32)) * _TWO_M32


@_jit
def counter_uniforms(seed, n):
    """The uniforms the encoder draws for elements ``0..n-1`` of stream ``seed`` (float64)."""
    out = np.empty(n, dtype=np.float64)
    for i in range(n):
        out[i] = _uniform(seed, i)
    return out


@_jit
def first_nonfinite(x):
    """First position holding NaN or +-Inf, or -1 when every value is finite."""
    for i in range(x.shape[0]):
        if not np.isfinite(x[i]):
            return i
    return -1


@_jit
def qsgd_encode(values, bucket_size, bits, use_l2, seed, snap, scales, codes):
    """Quantize ``values`` (float32/float64, length n) into ``scales`` and packed ``codes``.

    Parameters
    ----------
    bucket_size, bits : int
        Values per bucket; bits per code (2, 4 or 8).
    use_l2 : bool
        Scale = L2 norm of the bucket (else max |v|); rounded *up* to float32 so |v| <= scale.
    seed : uint64
        Stream of the random rounding (see :func:`counter_uniforms`).
    snap : float
        Relative tolerance: a value whose level ``r = |v| * s / scale`` lies within ``snap * r``
        of an integer takes that level exactly (no random rounding), so decoded values re-encode
        to themselves. Use about 2**-22 for float32 input, 2**-49 for float64.
    scales : float32 array of ``ceil(n / bucket_size)`` (output)
    codes : uint8 array of ``ceil(n * bits / 8)`` (output, every byte written)

    Returns -1 on success; else the position of the first non-finite value, or ``-2 - b`` when
    bucket b's scale exceeds the float32 range.
    """
    n = values.shape[0]
    s = (1 << (bits - 1)) - 1
    sign_bit = 1 << (bits - 1)
    nbuckets = scales.shape[0]
    acc_byte = 0  # codes are gathered a byte at a time (buckets need not end on a byte)
    acc_shift = 0
    nbyte = 0
    for b in range(nbuckets):
        lo = b * bucket_size
        hi = min(lo + bucket_size, n)
        acc = 0.0
        for i in range(lo, hi):
            v = np.float64(values[i])
            if not np.isfinite(v):
                return i
            if use_l2:
                acc += v * v
            else:
                acc = max(acc, abs(v))
        if use_l2:
            acc = np.sqrt(acc)
        sc = np.float32(acc)
        if np.float64(sc) < acc:
            sc = np.nextafter(sc, np.float32(np.inf))
        if not np.isfinite(sc):
            return -2 - b
        scales[b] = sc
        # an all-zero bucket has scale 0 and codes 0 (inv = 0 makes every r = 0, snapped)
        inv = s / np.float64(sc) if sc > 0 else 0.0
        for i in range(lo, hi):
            v = np.float64(values[i])
            r = abs(v) * inv
            near = np.floor(r + 0.5)
            if abs(r - near) <= snap * r:
                level = np.int64(near)
            else:
                level = np.int64(np.floor(r + _uniform(seed, i)))
            level = min(level, s)
            code = level
            if level > 0 and v < 0:
                code |= sign_bit
            acc_byte |= code << acc_shift
            acc_shift += bits
            if acc_shift == 8:
                codes[nbyte] = np.uint8(acc_byte)
                nbyte += 1
                acc_byte = 0
                acc_shift = 0
    if acc_shift > 0:
        codes[nbyte] = np.uint8(acc_byte)
    return -1


@_jit
def qsgd_decode(scales, codes, n, bucket_size, bits, out):
    """Decode n values from ``scales`` and packed ``codes`` into ``out`` (float32/float64).

    Value = sign * scale * level / s, computed in float64 (``scale * s / s == scale`` exactly)
    then rounded to ``out``'s dtype; one table of ``2**bits`` values per bucket.
    """
    s = (1 << (bits - 1)) - 1
    ncodes = 1 << bits
    mask = ncodes - 1
    table = np.empty(ncodes, dtype=out.dtype)
    for b in range(scales.shape[0]):
        sc = np.float64(scales[b])
        for c in range(ncodes):
            level = c & s
            v = sc * level / s
            table[c] = -v if (c >> (bits - 1)) else v
        lo = b * bucket_size
        hi = min(lo + bucket_size, n)
        for i in range(lo, hi):
            pos = i * bits
            out[i] = table[(codes[pos >> 3] >> (pos & 7)) & mask]
    return out


@_jit
def topk_select(keys, absmask, inf_key, k, out_idx):
    """Positions of the k largest ``keys & absmask`` in increasing order; ties: lower index first.

    ``keys`` are the raw bits of a float array (uint32 view of float32, uint64 of float64), so
    ``keys & absmask`` orders by |x|; ``absmask`` and ``inf_key`` (the bits of +Inf) are given as
    uint64. ``1 <= k < n``; ``out_idx`` (length k, int32/int64) is filled. Radix select on 16-bit
    digits from the top (2 passes for float32, 4 for float64), then one scan. Returns -1, or -2
    when some |x| >= the key of +Inf (NaN or Inf present).
    """
    n = keys.shape[0]
    hist = np.zeros(1 << 16, dtype=np.int64)
    low = np.uint64(0xFFFF)
    prefix = np.uint64(0)
    want = np.int64(k)  # rank of the threshold among the keys still matching the prefix
    shift = keys.itemsize * 8 - 16
    first = True
    while True:
        hist[:] = 0
        sh = np.uint64(shift)
        if first:
            for i in range(n):
                hist[np.int64((np.uint64(keys[i]) & absmask) >> sh)] += 1
            for d in range(np.int64(inf_key >> sh), 1 << 16):
                if hist[d] > 0:
                    return -2
            first = False
        else:
            psh = np.uint64(shift + 16)
            for i in range(n):
                key = np.uint64(keys[i]) & absmask
                if (key >> psh) == prefix:
                    hist[np.int64((key >> sh) & low)] += 1
        d = (1 << 16) - 1
        while hist[d] < want:
            want -= hist[d]
            d -= 1
        prefix = (prefix << np.uint64(16)) | np.uint64(d)
        if shift == 0:
            break
        shift -= 16
    # prefix is now the k-th largest key; `want` of the entries equal to it are taken
    m = 0
    for i in range(n):
        key = np.uint64(keys[i]) & absmask
        if key > prefix:
            out_idx[m] = i
            m += 1
        elif key == prefix and want > 0:
            out_idx[m] = i
            m += 1
            want -= 1
    return -1


@_jit
def topk_select_buckets(keys, absmask, inf_key, bucket_size, k_full, k_last, out_idx):
    """Per-bucket top-k: the ``k_full`` largest |x| of each full bucket of ``bucket_size``,
    ``k_last`` of the last partial bucket (if any); increasing positions, ties lower index first.

    ``keys``, ``absmask``, ``inf_key`` as in :func:`topk_select`; ``0 <= k <= bucket length``;
    ``out_idx`` has the exact total length. Returns -1, or -2 when a NaN or Inf is present.
    """
    n = keys.shape[0]
    buf = np.empty(bucket_size, dtype=np.uint64)
    top = np.empty(33, dtype=np.uint64)
    m = 0
    for lo in range(0, n, bucket_size):
        hi = min(lo + bucket_size, n)
        length = hi - lo
        kb = k_full if length == bucket_size else k_last
        for i in range(lo, hi):
            key = np.uint64(keys[i]) & absmask
            if key >= inf_key:
                return -2
            buf[i - lo] = key
        if kb == 0:
            continue
        if kb >= length:
            for i in range(lo, hi):
                out_idx[m] = i
                m += 1
            continue
        if kb <= 32:  # the kb largest by insertion into a descending list: ~B compares
            for j in range(kb):
                top[j] = 0
            filled = 0
            for j in range(length):
                key = buf[j]
                if filled < kb or key > top[kb - 1]:
                    pos = min(filled, kb - 1)
                    while pos > 0 and top[pos - 1] < key:
                        top[pos] = top[pos - 1]
                        pos -= 1
                    top[pos] = key
                    filled = min(filled + 1, kb)
            thr = top[kb - 1]
            ties = 0
            for j in range(kb):
                if top[j] == thr:
                    ties += 1
        else:
            part = np.partition(buf[:length], length - kb)
            thr = part[length - kb]
            ties = 0  # entries equal to the threshold among the kb largest: lowest index first
            for j in range(length - kb, length):
                if part[j] == thr:
                    ties += 1
        for i in range(lo, hi):
            key = buf[i - lo]
            if key > thr:
                out_idx[m] = i
                m += 1
            elif key == thr and ties > 0:
                out_idx[m] = i
                m += 1
                ties -= 1
    return -1
