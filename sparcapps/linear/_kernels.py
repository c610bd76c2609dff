"""Numba kernels of the linear models: pure functions on arrays, no MPI inside.

The weights are ``w = scale * v`` (``v`` float64 of ``n_features`` entries, ``scale`` a float64
scalar) plus an ``intercept``. The training kernels take ``W``, float64 of shape
``(n_features, 2)``: ``W[:, 0]`` is ``v`` and ``W[:, 1]`` the gradient accumulator, side by side
so that reading a weight and adding to its gradient touch one cache line (the columns a row
touches are scattered over megabytes). The data are a CSR matrix given as its three arrays (``indptr``
int32/int64, ``indices`` int32/int64, ``data`` float32) and labels ``y`` in {-1, +1}.
Loss codes: :data:`LOG` (logistic, ``log(1 + exp(-y p))``) and :data:`HINGE`
(``max(0, 1 - y p)``), with the gradients of scikit-learn's ``SGDClassifier`` (derivative in
``p`` clipped to +-1e12). Reference implementations in NumPy live in ``tests/test_linear_kernels.py``.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = ["LOG", "HINGE", "LOSS_CODES", "batch_gradient", "gather_clear", "add_scaled",
           "margins", "losses", "add_dense"]

LOG = 0
HINGE = 1
LOSS_CODES = {"log": LOG, "hinge": HINGE}
MAX_DLOSS = 1e12

_jit = njit(cache=True, nogil=True)

_DEBRUIJN = np.uint64(0x03F79D71B4CB0A89)
_DEBRUIJN_POS = np.zeros(64, np.int64)
for _bit in range(64):
    _DEBRUIJN_POS[((int(_DEBRUIJN) << _bit) & (2**64 - 1)) >> 58] = _bit


@_jit
def _loss(kind, y, p):
    z = y * p
    if kind == LOG:
        if z > 18.0:
            return math.exp(-z)
        if z < -18.0:
            return -z
        return math.log1p(math.exp(-z))
    return max(0.0, 1.0 - z)


@_jit
def _dloss(kind, y, p):
    """d loss / d p, clipped to [-MAX_DLOSS, MAX_DLOSS]."""
    z = y * p
    if kind == LOG:
        if z > 18.0:
            d = -y * math.exp(-z)
        elif z < -18.0:
            d = -y
        else:
            d = -y / (math.exp(z) + 1.0)
    else:
        d = -y if z <= 1.0 else 0.0
    return min(max(d, -MAX_DLOSS), MAX_DLOSS)


@_jit
def batch_gradient(indptr, indices, data, y, rows, W, scale, intercept, kind, bits, touched):
    """Sum of the loss gradients of ``rows`` (local row numbers) at ``w = scale * W[:, 0]``.

    Adds ``dloss_r * x_r`` into ``W[:, 1]`` (all zero on entry), marks each touched column once
    in the bitmap ``bits`` (uint64, one bit per column, all zero on entry) and appends it to
    ``touched`` (int64, room for every nonzero of the rows or ``n_features``, whichever is
    less). Rows whose derivative is exactly 0 touch nothing.
    Returns ``(n_touched, loss_sum, dloss_sum, correct)``: ``dloss_sum`` is the intercept's
    gradient, ``correct`` the rows whose margin (before the step) has the label's sign.
    """
    n = 0
    loss_sum = 0.0
    dloss_sum = 0.0
    correct = 0
    for t in range(rows.shape[0]):
        r = np.uint64(rows[t])  # unsigned indices: no negative-index fix-up on every access
        a = indptr[r]
        b = indptr[r + np.uint64(1)]
        dot = 0.0
        for k in range(a, b):
            dot += data[k] * W[np.uint64(indices[k]), 0]
        p = scale * dot + intercept
        yr = np.float64(y[r])
        loss_sum += _loss(kind, yr, p)
        correct += (p > 0.0) == (yr > 0.0)
        d = _dloss(kind, yr, p)
        dloss_sum += d
        if d == 0.0:
            continue
        for k in range(a, b):
            j = np.uint64(indices[k])
            if W[j, 1] == 0.0:  # first touch, or a sum that cancelled to 0: ask the bitmap
                word = j >> np.uint64(6)
                mask = np.uint64(1) << (j & np.uint64(63))
                if bits[word] & mask == 0:
                    bits[word] |= mask
                    touched[n] = j
                    n += 1
            W[j, 1] += d * data[k]
    return n, loss_sum, dloss_sum, correct


@_jit
def gather_clear(W, bits, touched, n, out_idx, out_val):
    """Write the ``n`` touched columns in increasing order with their ``W[:, 1]`` values into
    ``out_idx[:n]`` / ``out_val[:n]`` (cast to ``out_val``'s dtype), and zero ``W[:, 1]`` and
    ``bits`` there again. Sorts ``touched`` when that is cheaper than scanning the bitmap.
    """
    n_words = bits.shape[0]
    if n * 24 < n_words:  # n log n sort beats a scan of every bitmap word
        order = np.sort(touched[:n])
        for i in range(n):
            j = order[i]
            out_idx[i] = j
            out_val[i] = W[j, 1]
            W[j, 1] = 0.0
            bits[j >> 6] = 0
        return
    i = 0
    for word in range(n_words):
        x = bits[word]
        if x == 0:
            continue
        bits[word] = 0
        base = word << 6
        while x != 0:
            low = x & (~x + np.uint64(1))  # lowest set bit; its position by de Bruijn
            j = base + _DEBRUIJN_POS[(low * _DEBRUIJN) >> np.uint64(58)]
            out_idx[i] = j
            out_val[i] = W[j, 1]
            W[j, 1] = 0.0
            i += 1
            x ^= low


@_jit
def add_scaled(W, idx, val, coef):
    """``W[idx, 0] += coef * val`` for sorted unique ``idx`` (float64 arithmetic)."""
    for i in range(idx.shape[0]):
        W[idx[i], 0] += coef * np.float64(val[i])


@_jit
def margins(indptr, indices, data, v, scale, intercept, out):
    """``out[r] = scale * (x_r . v) + intercept`` for every row (float64)."""
    for r in range(indptr.shape[0] - 1):
        dot = 0.0
        for k in range(indptr[r], indptr[r + 1]):
            dot += data[k] * v[np.uint64(indices[k])]
        out[r] = scale * dot + intercept


@_jit
def losses(kind, y, p, out):
    """``out[r] = loss(y[r], p[r])``."""
    for r in range(p.shape[0]):
        out[r] = _loss(kind, np.float64(y[r]), p[r])


@_jit
def add_dense(W, val, coef):
    """``W[j, 0] += coef * val[j]`` for every column ``j`` (``val`` may hold extra trailing
    entries)."""
    for j in range(W.shape[0]):
        W[j, 0] += coef * np.float64(val[j])
