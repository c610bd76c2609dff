"""Numba kernels of the synthetic generators and of the LIBSVM text writer (private)."""

from __future__ import annotations

import numpy as np
from numba import njit

from ._guard import guard_numba_cache_with_sparcml

guard_numba_cache_with_sparcml()  # before any kernel is compiled

__all__ = ["sample_block", "format_libsvm"]


@njit(cache=True, nogil=True)
def _powerlaw_index(u, n, a):
    """Inverse CDF of a continuous power law x^-a on [1, n+1), floored to an index in [0, n)."""
    if a == 1.0:
        x = (n + 1.0) ** u
    else:
        e = 1.0 - a
        x = (1.0 + u * ((n + 1.0) ** e - 1.0)) ** (1.0 / e)
    i = np.int64(x) - 1
    if i < 0:
        i = 0
    if i >= n:
        i = n - 1
    return i


@njit(cache=True, nogil=True)
def sample_block(k_sparse, n_dense, dense_vals, n_sparse, exponent, normalized, seed,
                 indptr, indices, values, stamp):
    """Fill one block of rows: ``n_dense`` always-present features (values ``dense_vals``,
    row-major) then ``k_sparse[r]`` distinct power-law features offset by ``n_dense``.

    ``normalized``: sparse values are Exp(1) and each row is scaled to unit L2 norm;
    otherwise sparse values are 1.0. ``indptr`` must already hold the row offsets.
    ``stamp`` is scratch of ``n_sparse`` int64 entries, all < 0 (draws are rejected when the
    feature's stamp equals the row's tag; tags are never reused).
    """
    np.random.seed(seed)
    m = k_sparse.shape[0]
    for r in range(m):
        a = indptr[r]
        for j in range(n_dense):
            indices[a + j] = j
            values[a + j] = dense_vals[r * n_dense + j]
        s = a + n_dense
        k = k_sparse[r]
        tag = np.int64(seed) * 1000003 + r + 1
        t = 0
        while t < k:
            i = _powerlaw_index(np.random.random(), n_sparse, exponent)
            if stamp[i] != tag:
                stamp[i] = tag
                indices[s + t] = n_dense + i
                t += 1
        indices[s:s + k].sort()
        if normalized:
            ss = 0.0
            for t in range(a, s + k):
                if t >= s:
                    values[t] = np.random.exponential(1.0)
                ss += values[t] * values[t]
            if ss > 0:
                inv = 1.0 / np.sqrt(ss)
                for t in range(a, s + k):
                    values[t] *= inv
        else:
            for t in range(s, s + k):
                values[t] = 1.0


@njit(cache=True, nogil=True)
def _write_uint(out, p, v):
    if v == 0:
        out[p] = 48
        return p + 1
    n = 0
    t = v
    while t > 0:
        n += 1
        t //= 10
    q = p + n - 1
    while v > 0:
        out[q] = 48 + v % 10
        v //= 10
        q -= 1
    return p + n


@njit(cache=True, nogil=True)
def _write_fixed(out, p, x, decimals, scale):
    """Write ``x`` rounded to ``decimals`` digits, trailing zeros trimmed."""
    if x < 0:
        out[p] = 45
        p += 1
        x = -x
    v = np.int64(np.floor(x * scale + 0.5))
    ip = v // np.int64(scale)
    fp = v - ip * np.int64(scale)
    p = _write_uint(out, p, ip)
    if fp > 0:
        out[p] = 46
        p += 1
        d = decimals
        while fp % 10 == 0:
            fp //= 10
            d -= 1
        # zero padding
        n = 0
        t = fp
        while t > 0:
            n += 1
            t //= 10
        for _ in range(d - n):
            out[p] = 48
            p += 1
        p = _write_uint(out, p, fp)
    return p


@njit(cache=True, nogil=True)
def format_libsvm(indptr, indices, values, labels, base, decimals, out):
    """Format rows as LIBSVM text into ``out`` (uint8, large enough); returns bytes used."""
    scale = 10.0 ** decimals
    p = 0
    for r in range(labels.shape[0]):
        p = _write_fixed(out, p, labels[r], decimals, scale)
        for t in range(indptr[r], indptr[r + 1]):
            out[p] = 32
            p = _write_uint(out, p + 1, indices[t] + base)
            out[p] = 58
            p = _write_fixed(out, p + 1, values[t], decimals, scale)
        out[p] = 10
        p += 1
    return p
