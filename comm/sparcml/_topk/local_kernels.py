"""Numba kernels of the exact local top-k selection (what :func:`sparcml.select_topk` runs when
the one-pass sampled kernel of :mod:`sparcml._topk.sampled_kernels` misses, and per bucket).

Pure functions on arrays and scalars, ``@njit(cache=True, nogil=True)`` like ``_kernels.py``; the
public wrapper (:mod:`sparcml._topk.local`) validates and converts. NumPy references live in
``tests/reference_kernels.py``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .._numba_cache import guard_numba_cache

guard_numba_cache()  # before any kernel is compiled (sparcml._numba_cache)

__all__ = ["topk_select", "topk_select_buckets"]

_jit = njit(cache=True, nogil=True)


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
