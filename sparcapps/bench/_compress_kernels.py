"""The QSGD kernels before commit 71f6c72, for ``sparc-bench-compress``'s "before" column
(the same output format): Numba, imported only when the benchmark runs (not at ``--help``)."""

from __future__ import annotations

import numpy as np
from numba import njit

import sparcml

# the snap tolerance those kernels were called with (sparcml's QSGD's private value then; frozen
# here with the kernels, so that the "before" column never depends on sparcml's internals)
_BEFORE_SNAP = {np.dtype(np.float32): 2.0**-22, np.dtype(np.float64): 2.0**-49}

sparcml.guard_numba_cache()  # ranks compiling at once must not cross cache entries


@njit(cache=True, nogil=True)
def _before_uniform(seed, i):
    z = seed + np.uint64(i + 1) * np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return np.float64(z >> np.uint64(32)) * 2.0**-32


@njit(cache=True, nogil=True)
def _before_encode(values, bucket_size, bits, seed, snap, scales, codes):
    n = values.shape[0]
    s = (1 << (bits - 1)) - 1
    acc_byte = 0
    acc_shift = 0
    nbyte = 0
    for b in range(scales.shape[0]):
        lo = b * bucket_size
        hi = min(lo + bucket_size, n)
        acc = 0.0
        for i in range(lo, hi):
            v = np.float64(values[i])
            if not np.isfinite(v):
                return i
            acc = max(acc, abs(v))
        sc = np.float32(acc)
        if np.float64(sc) < acc:
            sc = np.nextafter(sc, np.float32(np.inf))
        scales[b] = sc
        inv = s / np.float64(sc) if sc > 0 else 0.0
        for i in range(lo, hi):
            v = np.float64(values[i])
            r = abs(v) * inv
            near = np.floor(r + 0.5)
            if abs(r - near) <= snap * r:
                level = np.int64(near)
            else:
                level = np.int64(np.floor(r + _before_uniform(seed, i)))
            code = min(level, s)
            if code > 0 and v < 0:
                code |= 1 << (bits - 1)
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


@njit(cache=True, nogil=True)
def _before_decode(scales, codes, n, bucket_size, bits, out):
    s = (1 << (bits - 1)) - 1
    ncodes = 1 << bits
    table = np.empty(ncodes, dtype=out.dtype)
    for b in range(scales.shape[0]):
        sc = np.float64(scales[b])
        for c in range(ncodes):
            v = sc * (c & s) / s
            table[c] = -v if (c >> (bits - 1)) else v
        for i in range(b * bucket_size, min((b + 1) * bucket_size, n)):
            pos = i * bits
            out[i] = table[(codes[pos >> 3] >> (pos & 7)) & (ncodes - 1)]
    return out
