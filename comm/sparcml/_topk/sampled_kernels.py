"""The local top-k selection in one pass over the data: a sampled bracket, then exact.

:func:`sparcml.select_topk` (what ``TopK`` and every top-k SGD step run) must find the k
largest ``|x|`` of a dense vector, exactly, ties to the lower index. The radix select of
:func:`sparcml._topk.local_kernels.topk_select` reads the whole vector three times (two 16-bit
digits for float32, then the output scan). :func:`topk_select_sampled` reads it once:

1. a strided sample (about :data:`SAMPLE` keys) histogrammed on the keys' top 16 bits gives a
   bracket of digits ``[lo, hi]`` that holds the k-th largest key with a wide margin (the
   sample's expected rank of it, plus and minus four standard deviations and a constant);
2. one pass over every key: positions of keys above the bracket go straight to the output,
   keys inside it (position and key) to a small band buffer (a branch that is almost never
   taken, so it predicts well; a branch-free compaction was slower here); NaN and Inf, whose
   keys lie above every finite one, are found among the keys above or inside the bracket;
3. the exact k-th largest within the band (:func:`sparcml._topk.select_kernels.kth_largest_below`,
   on a few percent of the keys), then the band's selected positions merged with the ones
   above, backwards in place.

When the sample misled the bracket (the keys above it are k or more, the bracket plus them
fewer than k, or the band overflows its buffer), it returns :data:`MISSED` and the caller runs
the exact three-pass kernel: the result is always the exact one, only the time differs.
Keys are the raw bits of the values (uint32 / uint64 views), masked by ``absmask``.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .._numba_cache import guard_numba_cache
from .select_kernels import kth_largest_below

guard_numba_cache()  # before any kernel is compiled (sparcml._numba_cache)

__all__ = ["topk_select_sampled", "SAMPLE", "MISSED", "MIN_LENGTH"]

_jit = njit(cache=True, nogil=True)

SAMPLE = 32768  # keys in the sample
MIN_LENGTH = 1 << 17  # below this the three passes are cheap and the sample is too coarse
MISSED = -3  # the bracket did not hold the k-th key: run the exact kernel
_SIGMAS = 4.0


@_jit
def topk_select_sampled(keys, absmask, inf_key, k, out_idx):
    """Positions of the k largest ``keys & absmask`` in increasing order, ties to the lower
    position, into ``out_idx`` (length k). ``1 <= k < len(keys)``. Returns -1 when done, -2
    when a key is ``>= inf_key`` (NaN or Inf), :data:`MISSED` when the bracket missed (then
    ``out_idx`` holds garbage and the caller runs the exact kernel)."""
    n = keys.shape[0]
    shift = np.uint64(keys.itemsize * 8 - 16)
    stride = max(1, n // SAMPLE)
    hist = np.zeros(1 << 16, np.int64)
    m = 0
    for i in range(0, n, stride):
        hist[np.int64((np.uint64(keys[i]) & absmask) >> shift)] += 1
        m += 1
    expect = k * m / n
    spread = _SIGMAS * math.sqrt(expect) + 4.0
    # hi: digits above it hold fewer than expect - spread sampled keys; lo: digits from it up
    # hold at least expect + spread (or lo = 0)
    hi = (1 << 16) - 1
    lo = 0
    seen = 0
    found_hi = expect - spread <= 0
    for d in range((1 << 16) - 1, -1, -1):
        seen += hist[d]
        if not found_hi and seen >= expect - spread:
            hi = d
            found_hi = True
        if seen >= expect + spread:
            lo = d
            break
    inside = 0
    for d in range(lo, hi + 1):
        inside += hist[d]
    # a band of more than an eighth of the keys (many equal values, zeros at the threshold, or
    # a misleading sample) goes to the exact kernel rather than to a buffer as large as the
    # data: decided here from the sample when it shows it, before the pass
    if inside * 8 > m:
        return MISSED
    cap = min(n // 8 + 4096, np.int64(2.0 * (inside + spread) * n / m) + 4096)
    band_pos = np.empty(cap, out_idx.dtype)
    band_key = np.empty(cap, keys.dtype)
    # the bracket as keys of the data's own width: the pass then runs in 32-bit lanes for
    # float32 (half the time of 64-bit keys here)
    mask = keys.dtype.type(absmask)
    lo_key = keys.dtype.type(np.uint64(lo) << shift)
    hi_key = keys.dtype.type(((np.uint64(hi) + np.uint64(1)) << shift) - np.uint64(1))
    above = 0
    band = 0
    for i in range(n):  # few keys reach the bracket: the branch is almost never taken
        key = keys[i] & mask
        if key >= lo_key:
            if key > hi_key:
                if above < k:
                    out_idx[above] = i
                above += 1
            else:
                if band < cap:
                    band_pos[band] = i
                    band_key[band] = key
                band += 1
    if above >= k or above + band < k or band > cap:
        return MISSED  # (NaN or Inf among many keys above: the exact kernel reports it)
    for j in range(above):  # NaN and Inf keys lie above the bracket, or inside its top digit
        if np.uint64(keys[out_idx[j]] & mask) >= inf_key:
            return -2
    for j in range(band):
        if np.uint64(band_key[j]) >= inf_key:
            return -2
    want = k - above
    kth, ties, _ = kth_largest_below(band_key[:band], absmask, np.uint64(0xFFFFFFFFFFFFFFFF),
                                     want, keys.itemsize * 8 - 1)
    picked = np.empty(want, out_idx.dtype)
    p = 0
    for j in range(band):
        key = band_key[j]
        tie = (key == kth) & (ties > 0)
        if (key > kth) | tie:
            picked[p] = band_pos[j]
            p += 1
        ties -= tie
    a = above - 1  # merge backwards: out_idx[:above] and picked into out_idx[:k]
    b = want - 1
    for w in range(k - 1, -1, -1):
        if b < 0:
            break
        if a >= 0 and out_idx[a] > picked[b]:
            out_idx[w] = out_idx[a]
            a -= 1
        else:
            out_idx[w] = picked[b]
            b -= 1
    return -1
