"""Numba kernels of the linear models: pure functions on arrays, no MPI inside.

The weights are ``w = scale * v`` (``v`` float64 of ``n_features`` entries, ``scale`` a float64
scalar) plus an ``intercept``. The training kernels take ``W``, float64 of shape
``(n_features, 2)``: ``W[:, 0]`` is ``v`` and ``W[:, 1]`` the gradient accumulator, side by side
so that reading a weight and adding to its gradient touch one cache line (the columns a row
touches are scattered over megabytes). The data are a CSR matrix given as its three arrays (``indptr``
int32/int64, ``indices`` int32/int64, ``data`` float32) and labels ``y`` in {-1, +1}.
Loss codes: :data:`LOG` (logistic, ``log(1 + exp(-y p))``) and :data:`HINGE`
(``max(0, 1 - y p)``), with the gradients of scikit-learn's ``SGDClassifier`` (derivative in
``p`` clipped to +-1e12). Reference implementations in NumPy live in ``tests/test_linear.py``.

Two ways through a minibatch: :func:`batch_gradient` + :func:`gather_clear` build the sparse
gradient that ranks sum (then :func:`add_scaled` applies the sum); with one rank nothing is
summed, and :func:`row_margins` + :func:`add_rows` apply the same update straight from the rows.
The rows of a minibatch lie scattered over the matrix, so the kernels prefetch the nonzeros of
the rows a few rows ahead (:data:`ROWS_AHEAD`): the hardware prefetcher only catches up within
a row.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

import sparcml

__all__ = ["LOG", "HINGE", "LOSS_CODES", "ROWS_AHEAD", "SCHEDULE_CODES", "batch_gradient",
           "gather_clear", "add_scaled", "row_margins", "add_rows", "batch_rates",
           "direct_steps", "margins", "losses", "add_dense"]

LOG = 0
HINGE = 1
LOSS_CODES = {"log": LOG, "hinge": HINGE}
SCHEDULE_CODES = {"optimal": 0, "invscaling": 1, "constant": 2}
MAX_DLOSS = 1e12
#: the kernels prefetch the nonzeros of the row this many rows ahead of the one they compute
#: with (:func:`row_margins`: twice as far); measured on the url-like twin: 2-16 alike, 15-30%
#: faster than none. (Prefetching the next row's weights too was 10% slower.)
ROWS_AHEAD = 4

sparcml.guard_numba_cache()  # ranks compiling at once must not cross cache entries
_jit = njit(cache=True, nogil=True)

_DEBRUIJN = np.uint64(0x03F79D71B4CB0A89)
_DEBRUIJN_POS = np.zeros(64, np.int64)
for _bit in range(64):
    _DEBRUIJN_POS[((int(_DEBRUIJN) << _bit) & (2**64 - 1)) >> 58] = _bit


@intrinsic
def _prefetch(typingctx, arr, idx):
    """Hint that ``arr[idx]`` will be read soon (LLVM ``prefetch``: no effect on results, no
    fault for any index)."""
    if not isinstance(arr, types.Array) or not isinstance(idx, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]],
                                       wraparound=False)
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [ptr.type, i32, i32, i32])
        fn = builder.module.declare_intrinsic("llvm.prefetch", [ptr.type], fnty)
        builder.call(fn, [ptr, i32(0), i32(3), i32(1)])  # read, keep in all levels, data
        return context.get_dummy_value()

    return types.void(arr, idx), codegen


@_jit
def _prefetch_row(indptr, indices, data, rows, t):
    """Prefetch the indices and values of row ``rows[t]`` if ``t`` is in range."""
    if t >= rows.shape[0]:
        return
    r = np.uint64(rows[t])
    a = indptr[r]
    b = indptr[r + np.uint64(1)]
    if b <= a:
        return
    for k in range(a, b, 64 // indices.itemsize):  # one per 64-byte line
        _prefetch(indices, k)
    _prefetch(indices, b - 1)
    for k in range(a, b, 64 // data.itemsize):
        _prefetch(data, k)
    _prefetch(data, b - 1)


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
def batch_gradient(indptr, indices, data, y, rows, W, scale, intercept, kind, bits, touched,
                   sw):
    """Sum of the loss gradients of ``rows`` (local row numbers) at ``w = scale * W[:, 0]``,
    each row's weighted by ``sw[r]`` (float64 per local row; ones: unweighted, bitwise).

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
        _prefetch_row(indptr, indices, data, rows, t + ROWS_AHEAD)
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
        d = _dloss(kind, yr, p) * sw[r]
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
    for word in range(n_words):  # the columns first, then their values: the second loop can
        x = bits[word]           # prefetch (28-37% faster than reading W inside this one)
        if x == 0:
            continue
        bits[word] = 0
        base = word << 6
        while x != 0:
            low = x & (~x + np.uint64(1))  # lowest set bit; its position by de Bruijn
            out_idx[i] = base + _DEBRUIJN_POS[(low * _DEBRUIJN) >> np.uint64(58)]
            i += 1
            x ^= low
    for i in range(n):
        if i + 16 < n:
            _prefetch(W, np.uint64(out_idx[i + 16]))
        j = np.uint64(out_idx[i])
        out_val[i] = W[j, 1]
        W[j, 1] = 0.0


@_jit
def add_scaled(W, idx, val, coef):
    """``W[idx, 0] += coef * val`` for sorted unique ``idx`` (float64 arithmetic)."""
    for i in range(idx.shape[0]):
        W[idx[i], 0] += coef * np.float64(val[i])


@_jit
def row_margins(indptr, indices, data, y, rows, v, scale, intercept, kind, active, dloss, sw):
    """Pass 1 of a minibatch applied straight from its rows: for each of ``rows`` (local row
    numbers) the margin at ``w = scale * v`` (contiguous float64) and its loss; the rows whose
    weighted derivative ``sw[r] * d loss / d p`` is not 0 go to ``active[:m]`` (int64) with
    that derivative in ``dloss[:m]`` (float64), in order (both with room for the rows).
    Returns ``(loss_sum, dloss_sum, correct, m)``, the first three as :func:`batch_gradient`.
    """
    loss_sum = 0.0
    dloss_sum = 0.0
    correct = 0
    m = 0
    for t in range(rows.shape[0]):
        _prefetch_row(indptr, indices, data, rows, t + 2 * ROWS_AHEAD)
        r = np.uint64(rows[t])
        a = indptr[r]
        b = indptr[r + np.uint64(1)]
        dot0 = 0.0  # two partial sums: half the latency chain of one (5% faster here)
        dot1 = 0.0
        k = a
        while k + 1 < b:
            dot0 += data[k] * v[np.uint64(indices[k])]
            dot1 += data[k + 1] * v[np.uint64(indices[k + 1])]
            k += 2
        if k < b:
            dot0 += data[k] * v[np.uint64(indices[k])]
        p = scale * (dot0 + dot1) + intercept
        yr = np.float64(y[r])
        loss_sum += _loss(kind, yr, p)
        correct += (p > 0.0) == (yr > 0.0)
        d = _dloss(kind, yr, p) * sw[r]
        dloss_sum += d
        if d != 0.0:
            active[m] = rows[t]
            dloss[m] = d
            m += 1
    return loss_sum, dloss_sum, correct, m


@_jit
def add_rows(indptr, indices, data, rows, dloss, v, coef, stamp, s):
    """Pass 2: ``v += coef * dloss[t] * x_r`` for each of ``rows`` in turn (the active rows of
    :func:`row_margins`), i.e. ``coef`` times the minibatch's summed gradient, added row by row.

    Counts the distinct columns so updated (the support of the summed gradient, as
    :func:`batch_gradient` would find it): ``stamp`` (one entry per column) holds a step's mark
    ``s``, different from every entry on entry, on each column it updated. Returns that count.
    (Branch-free marks: a bitmap with a first-touch test was 10% slower, mispredicting on the
    ~30% of nonzeros that are a column's first in the minibatch.)
    """
    n = 0
    for t in range(rows.shape[0]):
        _prefetch_row(indptr, indices, data, rows, t + ROWS_AHEAD)
        c = coef * dloss[t]
        r = np.uint64(rows[t])
        for k in range(indptr[r], indptr[r + np.uint64(1)]):
            j = np.uint64(indices[k])
            v[j] += c * data[k]
            n += stamp[j] != s
            stamp[j] = s
    return n


@_jit
def batch_rates(code, t, count, alpha, t0, eta0, power_t):
    """``(mean eta, prod max(0, 1 - eta * alpha))`` over samples ``t .. t+count-1`` (``count``
    >= 1) of the schedule ``code`` (:data:`SCHEDULE_CODES`), summed and multiplied in sample
    order (see :class:`~.schedule.Schedule`)."""
    total = 0.0
    decay = 1.0
    for i in range(count):
        s = np.float64(t + i)
        if code == 0:
            eta = 1.0 / (alpha * (t0 + s - 1.0))
        elif code == 1:
            eta = eta0 / s ** power_t
        else:
            eta = eta0
        total += eta
        decay *= max(0.0, 1.0 - eta * alpha)
    return total / count, decay


@_jit
def direct_steps(indptr, indices, data, y, rows, bounds, sizes, k0, k1, v, fstate, istate,
                 totals, counts, kind, code, rates, fit_intercept, intercept_decay,
                 rescale_below, active, dloss, stamp, mark_max, sw):
    """Steps ``k0 .. k1-1`` of the single-rank direct path, each the update of one minibatch:
    step ``k`` trains on ``rows[bounds[k]:bounds[k+1]]`` (``sizes[k]`` samples).

    1. :func:`row_margins` at the weights of the step's start (rows weighted by ``sw``);
    2. ``(step, decay)`` of the schedule (:func:`batch_rates`; ``code`` and ``rates`` =
       ``(alpha, t0, eta0, power_t)``); ``scale *= decay``, folded into ``v`` below
       ``rescale_below`` (as :meth:`~.state.TrainState.decay`);
    3. :func:`add_rows` with ``coef = -step / scale`` and the next mark (``stamp`` cleared when
       the mark would pass ``mark_max``); the intercept moves by ``-step * dloss_sum *
       intercept_decay``.

    In/out: ``fstate`` = (scale, intercept) float64, ``istate`` = (t, last mark) int64,
    ``totals`` = (loss sum, density sum, local density sum) float64 and ``counts`` = (correct,
    rows, steps) int64, the sums added to step by step. The same code runs one step or a whole
    epoch, so both give bitwise the same weights.
    """
    scale = fstate[0]
    intercept = fstate[1]
    t = istate[0]
    mark = istate[1]
    dim = v.shape[0] + 1  # the intercept's coordinate included
    for k in range(k0, k1):
        mine = rows[bounds[k]:bounds[k + 1]]
        loss_sum, dsum, correct, m = row_margins(indptr, indices, data, y, mine, v, scale,
                                                 intercept, kind, active, dloss, sw)
        step, decay = batch_rates(code, t, sizes[k], rates[0], rates[1], rates[2], rates[3])
        scale *= decay
        if scale < rescale_below:
            for j in range(v.shape[0]):
                v[j] *= scale
            scale = 1.0
        mark += 1
        if mark > mark_max:
            stamp[:] = 0
            mark = 1
        n = add_rows(indptr, indices, data, active[:m], dloss[:m], v, -step / scale, stamp,
                     mark)
        if fit_intercept:
            intercept += -step * dsum * intercept_decay
        t += sizes[k]
        totals[0] += loss_sum
        totals[1] += (n + 1) / dim
        totals[2] += (n + 1) / dim
        counts[0] += correct
        counts[1] += mine.shape[0]
        counts[2] += 1
    fstate[0] = scale
    fstate[1] = intercept
    istate[0] = t
    istate[1] = mark


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
