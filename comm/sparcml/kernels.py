"""Numba kernels of the comm layer: pure functions on arrays, no MPI inside.

Every kernel is ``@njit(cache=True, nogil=True)``: compiled once per dtype signature and cached on
disk, and run without the GIL so that a communication thread can merge while Python computes.
Index arrays are int32 or int64 and sorted strictly increasing unless stated; value arrays are
float32 or float64; outputs keep the input dtypes. Reference implementations in plain NumPy live
in ``tests/reference_kernels.py``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = [
    "merge_add",
    "merge_many",
    "scatter_add",
    "split_positions",
    "dense_to_sparse",
    "count_nonzero",
    "first_unsorted",
]

_jit = njit(cache=True, nogil=True)


@_jit
def merge_add(a_idx, a_val, b_idx, b_val):
    """Sum two sparse streams: the sorted union of the indices, values added where both hold one.

    Returns ``(idx, val)`` of length ``<= len(a) + len(b)`` (views into one allocation).
    Where both hold an index the value is ``a + b`` (commutative, so bitwise the same as ``b + a``).
    """
    na = a_idx.shape[0]
    nb = b_idx.shape[0]
    out_idx = np.empty(na + nb, dtype=a_idx.dtype)
    out_val = np.empty(na + nb, dtype=a_val.dtype)
    # Branch-free: the next index is the smaller head; a head is consumed when it is <= the
    # other. -0.0 is the exact additive identity (x + -0.0 == x for every x, -0.0 included),
    # so adding it for the stream that does not hold the index changes nothing. Random
    # interleavings make a branchy merge mispredict on every other item (2x slower).
    neg_zero = -np.zeros(1, dtype=a_val.dtype)[0]
    i = 0
    j = 0
    n = 0
    while i < na and j < nb:
        ai = a_idx[i]
        bj = b_idx[j]
        va = a_val[i]
        vb = b_val[j]
        take_a = ai <= bj
        take_b = bj <= ai
        out_idx[n] = min(ai, bj)
        out_val[n] = (va if take_a else neg_zero) + (vb if take_b else neg_zero)
        i += take_a
        j += take_b
        n += 1
    while i < na:
        out_idx[n] = a_idx[i]
        out_val[n] = a_val[i]
        i += 1
        n += 1
    while j < nb:
        out_idx[n] = b_idx[j]
        out_val[n] = b_val[j]
        j += 1
        n += 1
    return out_idx[:n], out_val[:n]


@_jit
def _sift_down(heap_key, heap_src, size, pos):
    # min-heap ordered by (index, stream): equal indices pop in stream order
    while True:
        left = 2 * pos + 1
        if left >= size:
            return
        child = left
        right = left + 1
        if right < size and (heap_key[right] < heap_key[left] or
                             (heap_key[right] == heap_key[left] and
                              heap_src[right] < heap_src[left])):
            child = right
        if heap_key[child] < heap_key[pos] or (heap_key[child] == heap_key[pos] and
                                               heap_src[child] < heap_src[pos]):
            heap_key[pos], heap_key[child] = heap_key[child], heap_key[pos]
            heap_src[pos], heap_src[child] = heap_src[child], heap_src[pos]
            pos = child
        else:
            return


@_jit
def merge_many(offsets, idx, val):
    """Sum S sparse streams stored back to back: stream s is ``idx[offsets[s]:offsets[s+1]]``.

    A k-way heap merge, O(total log S). Values at an index shared by several streams are added
    left to right in stream order, so the result is bitwise that of folding the streams in order
    (``((s0 + s1) + s2) + ...``) whatever the number of streams.
    """
    nstreams = offsets.shape[0] - 1
    total = offsets[nstreams] - offsets[0]
    out_idx = np.empty(total, dtype=idx.dtype)
    out_val = np.empty(total, dtype=val.dtype)
    heap_key = np.empty(nstreams, dtype=np.int64)
    heap_src = np.empty(nstreams, dtype=np.int64)
    cursor = offsets[:-1].copy()
    size = 0
    for s in range(nstreams):
        if offsets[s] < offsets[s + 1]:
            heap_key[size] = idx[offsets[s]]
            heap_src[size] = s
            size += 1
    for pos in range(size // 2 - 1, -1, -1):
        _sift_down(heap_key, heap_src, size, pos)
    n = 0
    while size > 0:
        key = heap_key[0]
        s = heap_src[0]
        c = cursor[s]
        if n > 0 and out_idx[n - 1] == key:
            out_val[n - 1] = out_val[n - 1] + val[c]
        else:
            out_idx[n] = key
            out_val[n] = val[c]
            n += 1
        c += 1
        cursor[s] = c
        if c < offsets[s + 1]:
            heap_key[0] = idx[c]
        else:
            size -= 1
            heap_key[0] = heap_key[size]
            heap_src[0] = heap_src[size]
        _sift_down(heap_key, heap_src, size, 0)
    return out_idx[:n], out_val[:n]


@_jit
def scatter_add(dense, idx, val, offset):
    """In place: ``dense[idx[i] - offset] += val[i]`` for every i (a dense block from ``offset``)."""
    for i in range(idx.shape[0]):
        dense[idx[i] - offset] += val[i]


@_jit
def split_positions(idx, bounds):
    """Positions splitting a sorted index array at each bound: ``np.searchsorted(idx, bounds)``.

    With ``bounds = [b0, b1, ..., bP]`` the part owned by block j is
    ``idx[pos[j]:pos[j+1]]`` (indices in ``[b_j, b_{j+1})``).
    """
    return np.searchsorted(idx, bounds)


@_jit
def count_nonzero(x):
    """Number of entries of a dense array that are not zero (NaN counts as nonzero)."""
    n = 0
    for i in range(x.shape[0]):
        if x[i] != 0:
            n += 1
    return n


@_jit
def dense_to_sparse(x, offset, index_dtype_sample):
    """Nonzero entries of a dense block as ``(idx, val)``, indices shifted by ``offset``.

    ``index_dtype_sample`` is a length-0 array whose dtype the indices take.
    """
    n = count_nonzero(x)
    out_idx = np.empty(n, dtype=index_dtype_sample.dtype)
    out_val = np.empty(n, dtype=x.dtype)
    k = 0
    for i in range(x.shape[0]):
        if x[i] != 0:
            out_idx[k] = i + offset
            out_val[k] = x[i]
            k += 1
    return out_idx, out_val


@_jit
def first_unsorted(idx):
    """First position i > 0 with ``idx[i] <= idx[i-1]``, or -1 when strictly increasing."""
    for i in range(1, idx.shape[0]):
        if idx[i] <= idx[i - 1]:
            return i
    return -1
