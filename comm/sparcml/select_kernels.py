"""Numba kernels of the distributed top-k selection (:mod:`sparcml.global_topk`): no MPI.

The exact global k-th magnitude is found digit by digit on the raw bits of the values: for
float32 / float64, ``bits & absmask`` orders by ``|x|`` (as in :func:`sparcml.topk.select_topk`).
Each rank histograms the keys of the partial sums it owns; the ranks add their histograms (a
small ``Allreduce``), every rank picks the same digit, and the next round looks only at keys
with the chosen prefix. Zero keys (``0.0``, ``-0.0``) are never counted or selected. Every
kernel is ``@njit(cache=True, nogil=True)``; positions are int64.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["digit_bits", "digit_shifts", "magnitude_keys", "digit_histogram", "count_at_threshold", "select_at_threshold",
           "drop_indices", "zero_indices"]

_jit = njit(cache=True, nogil=True)

MAX_DIGIT_BITS = 11  # 2**11 + 1 int64 bins: 16 KiB per round
MIN_DIGIT_BITS = 4


def digit_bits(k: int, entry_bytes: int) -> int:
    """Digit width of the selection rounds for keeping ``k`` entries of ``entry_bytes`` (index
    plus value): wide enough for few rounds, narrow enough that a round's histogram (8 bytes a
    bin) stays under an eighth of the selected entries' bytes. Plain Python (no Numba)."""
    room = k * entry_bytes / 64
    bits = MIN_DIGIT_BITS
    while bits < MAX_DIGIT_BITS and (1 << (bits + 1)) <= room:
        bits += 1
    return bits


def digit_shifts(key_bits: int, bits: int) -> list:
    """The shifts of the rounds, from the top digit down to 0 (the last digit may be narrower)."""
    return list(range(key_bits - bits, 0, -bits)) + [0]


@_jit
def magnitude_keys(bits, absmask):
    """``bits & absmask`` as uint64 (``bits``: the uint32 / uint64 view of the values)."""
    n = bits.shape[0]
    out = np.empty(n, np.uint64)
    for i in range(n):
        out[i] = np.uint64(bits[i]) & absmask
    return out


@_jit
def digit_histogram(keys, prefix, prefix_shift, shift, first, inf_key, hist):
    """Add to ``hist`` the digit ``(key >> shift) & (2**(prefix_shift - shift) - 1)`` of every
    nonzero key whose bits above ``prefix_shift`` equal ``prefix`` (all nonzero keys when
    ``first``). ``hist`` has ``2**(prefix_shift - shift) + 1`` or more slots; with ``first``
    its last slot counts keys above ``inf_key`` (NaN). Returns nothing."""
    mask = (np.uint64(1) << np.uint64(prefix_shift - shift)) - np.uint64(1)
    sh = np.uint64(shift)
    last = hist.shape[0] - 1
    if first:
        for i in range(keys.shape[0]):
            key = keys[i]
            if key == 0:
                continue
            if key > inf_key:
                hist[last] += 1
            hist[np.int64((key >> sh) & mask)] += 1
        return
    psh = np.uint64(prefix_shift)
    for i in range(keys.shape[0]):
        key = keys[i]
        if key != 0 and (key >> psh) == prefix:
            hist[np.int64((key >> sh) & mask)] += 1


@_jit
def count_at_threshold(keys, threshold, shift):
    """How many keys have ``key >> shift == threshold`` (the ties at the threshold)."""
    sh = np.uint64(shift)
    n = 0
    for i in range(keys.shape[0]):
        if keys[i] != 0 and (keys[i] >> sh) == threshold:
            n += 1
    return n


@_jit
def select_at_threshold(keys, threshold, shift, take_ties):
    """Increasing positions of the nonzero keys with ``key >> shift > threshold``, and of the
    first ``take_ties`` (lowest positions) with ``key >> shift == threshold``."""
    sh = np.uint64(shift)
    n = 0
    for i in range(keys.shape[0]):
        if keys[i] != 0 and (keys[i] >> sh) > threshold:
            n += 1
    out = np.empty(n + max(take_ties, 0), np.int64)
    m = 0
    ties = take_ties
    for i in range(keys.shape[0]):
        key = keys[i]
        if key == 0:
            continue
        high = key >> sh
        if high > threshold:
            out[m] = i
            m += 1
        elif high == threshold and ties > 0:
            out[m] = i
            m += 1
            ties -= 1
    return out[:m]


@_jit
def drop_indices(idx, val, removed):
    """The entries of the sorted stream ``(idx, val)`` whose index is not in the sorted
    ``removed``: ``(indices, values)``, new arrays."""
    n = idx.shape[0]
    keep = np.ones(n, np.bool_)
    j = 0
    nr = removed.shape[0]
    kept = n
    for i in range(n):
        while j < nr and removed[j] < idx[i]:
            j += 1
        if j < nr and removed[j] == idx[i]:
            keep[i] = False
            kept -= 1
    out_idx = np.empty(kept, idx.dtype)
    out_val = np.empty(kept, val.dtype)
    m = 0
    for i in range(n):
        if keep[i]:
            out_idx[m] = idx[i]
            out_val[m] = val[i]
            m += 1
    return out_idx, out_val


@_jit
def zero_indices(values, removed):
    """A copy of the dense ``values`` with the positions ``removed`` set to zero."""
    out = values.copy()
    for j in range(removed.shape[0]):
        out[removed[j]] = 0
    return out
