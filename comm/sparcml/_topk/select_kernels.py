"""Numba kernels of the distributed top-k selection (:mod:`sparcml._topk.topk_allreduce`): no MPI.

The exact global k-th magnitude is found on the raw bits of the values: for float32 / float64,
``bits & absmask`` orders by ``|x|`` (as in :func:`sparcml._topk.local.select_topk`). Each rank
histograms the keys of the partial sums it owns over a key interval cut into equal bins
(:func:`range_histogram`); the ranks add their histograms (a small ``Allreduce``), every rank
picks the same bin, and the next round, if any, looks only inside it. The first interval
spans :data:`FIRST_OCTAVES` octaves below an agreed bound on ``|sum|``, so that on most data one
round ends the search (the bin at the threshold holds few enough keys to be sent as
candidates). Zero keys (``0.0``, ``-0.0``) are never counted or selected. Every kernel is
``@njit(cache=True, nogil=True)``; positions are int64.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .._numba_cache import guard_numba_cache

guard_numba_cache()  # before any kernel is compiled (sparcml._numba_cache)

__all__ = ["digit_bits", "round_shift", "first_interval", "magnitude_keys", "magnitude_keys_into",
           "max_key", "min_key", "count_above", "range_histogram", "kth_largest_below",
           "take_top", "select_top", "count_at_threshold", "select_at_threshold", "drop_indices",
           "zero_indices", "BELOW", "ABOVE", "NAN", "EXTRA_SLOTS", "FIRST_OCTAVES"]

_jit = njit(cache=True, nogil=True)

MAX_DIGIT_BITS = 11  # 2**11 + 3 int64 slots: 16 KiB per round
MIN_DIGIT_BITS = 4
FIRST_OCTAVES = 16  # the first round's interval: this many octaves of |x| below the bound
# the slots after the 2**bits bins of a first round: keys below / above the interval, NaN
BELOW, ABOVE, NAN = 0, 1, 2
EXTRA_SLOTS = 3


def digit_bits(k: int, entry_bytes: int) -> int:
    """Bins per round (``2**bits``) for keeping ``k`` entries of ``entry_bytes`` (index plus
    value): wide enough for few rounds, narrow enough that a round's histogram (8 bytes a
    bin) stays under an eighth of the selected entries' bytes. Plain Python (no Numba)."""
    room = k * entry_bytes / 64
    bits = MIN_DIGIT_BITS
    while bits < MAX_DIGIT_BITS and (1 << (bits + 1)) <= room:
        bits += 1
    return bits


def round_shift(span: int, bits: int) -> int:
    """The bin width ``2**shift`` that cuts ``span`` keys into at most ``2**bits`` bins."""
    return max(0, (int(span) - 1).bit_length() - bits)


def first_interval(bound_key: int, mantissa_bits: int, bits: int) -> tuple[int, int, int]:
    """``(base, span, shift)`` of the first round: the ``2**bits`` bins of width ``2**shift``
    that end just above ``bound_key`` (an upper bound of the keys, >= 1) and cover
    :data:`FIRST_OCTAVES` octaves below it (fewer when the keys' range ends first)."""
    shift = round_shift(FIRST_OCTAVES << mantissa_bits, bits)
    top = int(bound_key) + 1
    base = max(1, top - ((1 << bits) << shift))
    return base, top - base, shift


@_jit
def magnitude_keys(bits, absmask):
    """``bits & absmask`` as uint64 (``bits``: the uint32 / uint64 view of the values)."""
    n = bits.shape[0]
    out = np.empty(n, np.uint64)
    for i in range(n):
        out[i] = np.uint64(bits[i]) & absmask
    return out


@_jit
def magnitude_keys_into(bits, absmask, out):
    """:func:`magnitude_keys` written into ``out`` (as long as ``bits``); returns ``out``."""
    for i in range(bits.shape[0]):
        out[i] = np.uint64(bits[i]) & absmask
    return out


@_jit
def max_key(bits, absmask):
    """The largest ``bits & absmask`` (0 for no values): above the key of +Inf means NaN."""
    best = np.uint64(0)
    for i in range(bits.shape[0]):
        key = np.uint64(bits[i]) & absmask
        if key > best:
            best = key
    return best


@_jit
def count_above(bits, absmask, limit):
    """How many keys ``bits & absmask`` exceed ``limit``."""
    n = 0
    for i in range(bits.shape[0]):
        if (np.uint64(bits[i]) & absmask) > limit:
            n += 1
    return n


@_jit
def min_key(bits, absmask):
    """The smallest ``bits & absmask`` (``absmask`` itself for no values)."""
    best = absmask
    for i in range(bits.shape[0]):
        key = np.uint64(bits[i]) & absmask
        if key < best:
            best = key
    return best


@_jit
def range_histogram(keys, base, span, shift, first, inf_key, hist):
    """Add to ``hist[(key - base) >> shift]`` one for every nonzero key in
    ``[base, base + span)``. With ``first``, also count the other nonzero keys in the slots
    after the ``len(hist) - EXTRA_SLOTS`` bins: below the interval, above it (up to
    ``inf_key``), and above ``inf_key`` (NaN). Returns nothing."""
    nb = hist.shape[0] - 3
    sh = np.uint64(shift)
    for i in range(keys.shape[0]):
        key = keys[i]
        if key == 0:
            continue
        if key < base:
            if first:
                hist[nb] += 1
            continue
        d = key - base
        if d >= span:
            if first:
                if key > inf_key:
                    hist[nb + 2] += 1
                else:
                    hist[nb + 1] += 1
            continue
        hist[np.int64(d >> sh)] += 1


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
        n += (keys[i] != 0) & ((keys[i] >> sh) > threshold)
    out = np.empty(n + max(take_ties, 0) + 1, np.int64)  # + 1: the last speculative write
    m = 0
    ties = take_ties
    for i in range(keys.shape[0]):  # branch-free: write always, keep when selected
        key = keys[i]
        high = key >> sh
        above = (key != 0) & (high > threshold)
        tie = (key != 0) & (high == threshold) & (ties > 0)
        out[m] = i
        m += above | tie
        ties -= tie
    return out[:m]


@_jit
def kth_largest_below(bits, absmask, high, want, key_bits):
    """``(kth, ties, above)`` over the keys ``bits & absmask`` of the values' bits: ``kth`` the
    ``want``-th largest of the keys below ``high`` (there are at least ``want >= 1``; every
    key < ``2**key_bits``), ``ties`` how many keys equal to it rank within the ``want``, and
    ``above`` how many keys are ``>= high`` (a radix select, 11 bits a pass).

    Two passes over all keys: the first counts ``above`` and the top digit, the second copies
    the keys of the threshold's top digit out (branch-free); the later digits are counted on
    that copy, which holds a small share of the keys."""
    n = bits.shape[0]
    top = key_bits
    low = max(top - 11, 0)
    hist = np.zeros(1 << (top - low), np.int64)
    above = 0
    for i in range(n):
        key = np.uint64(bits[i]) & absmask
        below = key < high
        above += 1 - below
        hist[np.int64(key >> np.uint64(low)) * below] += below
    remaining = want
    d = hist.shape[0] - 1
    while hist[d] < remaining:
        remaining -= hist[d]
        d -= 1
    prefix = np.uint64(d)
    if low == 0:
        return prefix, remaining, above
    keys = np.empty(hist[d] + 1, np.uint64)  # + 1: the last speculative write
    m = 0
    for i in range(n):
        key = np.uint64(bits[i]) & absmask
        keys[m] = key
        m += (key < high) & ((key >> np.uint64(low)) == prefix)
    top = low
    while top > 0:
        low = max(top - 11, 0)
        width = top - low
        hist = np.zeros(1 << width, np.int64)
        mask = (np.uint64(1) << np.uint64(width)) - np.uint64(1)
        for i in range(m):
            key = keys[i]
            if (key >> np.uint64(top)) == prefix:
                hist[np.int64((key >> np.uint64(low)) & mask)] += 1
        d = hist.shape[0] - 1
        while hist[d] < remaining:
            remaining -= hist[d]
            d -= 1
        prefix = (prefix << np.uint64(width)) | np.uint64(d)
        top = low
    return prefix, remaining, above


@_jit
def take_top(idx, val, bits, absmask, high, kth, ties, count):
    """The ``count`` entries (new arrays, in order) whose key ``bits & absmask`` is ``>= high``
    or ``> kth``, and the first ``ties`` whose key equals ``kth``."""
    out_idx = np.empty(count + 1, idx.dtype)  # + 1: the last speculative write
    out_val = np.empty(count + 1, val.dtype)
    m = 0
    for i in range(idx.shape[0]):  # branch-free: write always, keep when selected
        key = np.uint64(bits[i]) & absmask
        tie = (key == kth) & (key < high) & (ties > 0)
        keep = (key >= high) | (key > kth) | tie
        ties -= tie
        out_idx[m] = idx[i]
        out_val[m] = val[i]
        m += keep
        if m == count:
            break
    return out_idx[:count], out_val[:count]


@_jit
def select_top(idx, val, bits, absmask, high, want, key_bits):
    """:func:`kth_largest_below` and :func:`take_top` in one call (one dispatch for a small
    selection): the entries whose key is ``>= high`` and the ``want`` largest keys below it
    (equal keys: the earlier entry first), as new arrays in order; every entry (copies) when
    there are not more than that."""
    kth, ties, above = kth_largest_below(bits, absmask, high, want, key_bits)
    if want < idx.shape[0] - above:
        return take_top(idx, val, bits, absmask, high, kth, ties, above + want)
    return idx.copy(), val.copy()


@_jit
def drop_indices(idx, val, removed):
    """The entries of the sorted stream ``(idx, val)`` whose index is not in the sorted
    ``removed``: ``(indices, values)``, new arrays (one pass)."""
    n = idx.shape[0]
    out_idx = np.empty(n, idx.dtype)
    out_val = np.empty(n, val.dtype)
    nr = removed.shape[0]
    i = 0
    j = 0
    m = 0
    # Branch-free, as kernels.merge_add_into: each step writes the stream's head and keeps it
    # (m advances) only when it is below the removed head; equal heads both advance. Random
    # interleavings make a branchy loop mispredict on every other item (3-5x slower).
    while i < n and j < nr:
        a = idx[i]
        r = removed[j]
        out_idx[m] = a
        out_val[m] = val[i]
        m += a < r
        i += a <= r
        j += r <= a
    while i < n:
        out_idx[m] = idx[i]
        out_val[m] = val[i]
        i += 1
        m += 1
    return out_idx[:m], out_val[:m]


@_jit
def zero_indices(values, removed):
    """A copy of the dense ``values`` with the positions ``removed`` set to zero."""
    out = values.copy()
    for j in range(removed.shape[0]):
        out[removed[j]] = 0
    return out
