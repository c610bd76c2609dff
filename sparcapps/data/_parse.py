"""Numba kernels of the LIBSVM/svmlight text parser (private; see :mod:`.convert`).

The kernels take a ``uint8`` buffer that ends with a newline and fill caller-allocated arrays.
They never raise: problems come back as a status code and the byte span of the offending token,
and :mod:`.convert` turns that into a :class:`~sparcapps.data.errors.DataFormatError`.

Numbers take a fast exact path (at most 18 significant digits and a decimal exponent within
+-22: the integer mantissa and the power of ten are both exact doubles, so one multiplication
or division rounds correctly, as ``strtod`` does). Anything else (``inf``, ``nan``, long
mantissas, huge exponents, or garbage) is recorded as "slow" and parsed by Python's ``float``,
which is also correctly rounded; the values are then cast to float32.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._guard import guard_numba_cache_with_sparcml

guard_numba_cache_with_sparcml()  # before any kernel is compiled

__all__ = ["count_lines_and_colons", "parse_block", "OK", "SLOW_FULL", "ERR_NO_COLON",
           "ERR_BAD_INDEX", "ERR_ZERO_INDEX", "ERR_ORDER", "ERR_EMPTY_VALUE", "ERR_INDEX_RANGE",
           "ERR_INDEX_OVERFLOW", "ERR_LABEL", "SLOW_LABEL", "SLOW_VALUE"]

OK = 0
SLOW_FULL = 1
ERR_NO_COLON = 10
ERR_BAD_INDEX = 11
ERR_ZERO_INDEX = 12
ERR_ORDER = 13
ERR_EMPTY_VALUE = 14
ERR_INDEX_RANGE = 15
ERR_INDEX_OVERFLOW = 16
ERR_LABEL = 17

SLOW_LABEL = 0
SLOW_VALUE = 1

_POW10 = np.array([10.0 ** k for k in range(23)], dtype=np.float64)
_MAX_EXACT = 2**53

_NL = 10
_SP = 32
_TAB = 9
_CR = 13
_HASH = 35
_COLON = 58


@njit(cache=True, nogil=True)
def count_lines_and_colons(buf, stop):
    """Number of newlines and of ':' in ``buf[:stop]`` (upper bounds for rows and entries)."""
    n_nl = 0
    n_colon = 0
    for i in range(stop):
        c = buf[i]
        if c == _NL:
            n_nl += 1
        elif c == _COLON:
            n_colon += 1
    return n_nl, n_colon


@njit(cache=True, nogil=True)
def _fast_float(buf, a, b, pow10):
    """Parse ``buf[a:b]`` as a decimal number on the exact fast path: (ok, value)."""
    i = a
    neg = False
    if i < b and (buf[i] == 43 or buf[i] == 45):  # + -
        neg = buf[i] == 45
        i += 1
    mant = 0
    ndig = 0
    exp10 = 0
    any_digit = False
    while i < b and 48 <= buf[i] <= 57:
        any_digit = True
        d = buf[i] - 48
        if mant != 0 or d != 0:
            if ndig >= 18:
                return False, 0.0
            mant = mant * 10 + d
            ndig += 1
        i += 1
    if i < b and buf[i] == 46:  # .
        i += 1
        while i < b and 48 <= buf[i] <= 57:
            any_digit = True
            d = buf[i] - 48
            if mant != 0 or d != 0:
                if ndig >= 18:
                    return False, 0.0
                mant = mant * 10 + d
                ndig += 1
            exp10 -= 1
            i += 1
    if not any_digit:
        return False, 0.0
    if i < b and (buf[i] == 101 or buf[i] == 69):  # e E
        i += 1
        eneg = False
        if i < b and (buf[i] == 43 or buf[i] == 45):
            eneg = buf[i] == 45
            i += 1
        e = 0
        edig = 0
        while i < b and 48 <= buf[i] <= 57:
            if edig >= 5:
                return False, 0.0
            e = e * 10 + (buf[i] - 48)
            edig += 1
            i += 1
        if edig == 0:
            return False, 0.0
        exp10 += -e if eneg else e
    if i != b:
        return False, 0.0
    if mant == 0:
        return True, -0.0 if neg else 0.0
    if mant > _MAX_EXACT or exp10 > 22 or exp10 < -22:
        return False, 0.0
    v = float(mant)
    if exp10 >= 0:
        v = v * pow10[exp10]
    else:
        v = v / pow10[-exp10]
    return True, -v if neg else v


@njit(cache=True, nogil=True)
def _is_stop(c):
    return c == _SP or c == _TAB or c == _CR or c == _NL or c == _HASH


@njit(cache=True, nogil=True)
def parse_block(buf, pos, stop, offset, strict_one_based, limit,
                labels, rowlen, indices, values, slow):
    """Parse the complete lines of ``buf[pos:stop]`` (``buf[stop-1]`` must be a newline).

    Writes rows to ``labels``/``rowlen`` and entries to ``indices``/``values`` (index stored as
    ``raw - offset``). Values off the fast path are left for the caller and listed in ``slow``
    as rows ``(kind, output position, token start, token end)``.

    Returns ``(status, resume, n_rows, nnz, n_slow, err_a, err_b, min_raw, max_raw, max_pos)``:
    ``status`` is OK, SLOW_FULL (``slow`` is full; everything before byte ``resume`` is done,
    call again from there) or an ERR_* code with the offending token at ``buf[err_a:err_b]``.
    ``min_raw``/``max_raw`` are the extreme raw indices seen, ``max_pos`` where ``max_raw``
    first occurred.
    """
    pow10 = _POW10
    n_rows = 0
    nnz = 0
    n_slow = 0
    cap = slow.shape[0]
    min_raw = np.int64(2**62)
    max_raw = np.int64(-1)
    max_pos = np.int64(-1)
    while pos < stop:
        line_start = pos
        c = buf[pos]
        while c == _SP or c == _TAB or c == _CR:
            pos += 1
            c = buf[pos]
        if c == _NL:
            pos += 1
            continue
        if c == _HASH:
            while buf[pos] != _NL:
                pos += 1
            pos += 1
            continue
        # label
        a = pos
        has_colon = False
        while not _is_stop(buf[pos]):
            if buf[pos] == _COLON:
                has_colon = True
            pos += 1
        if has_colon:
            return (ERR_LABEL, line_start, n_rows, nnz, n_slow, a, pos,
                    min_raw, max_raw, max_pos)
        row_nnz0 = nnz
        row_slow0 = n_slow
        ok, v = _fast_float(buf, a, pos, pow10)
        if ok:
            labels[n_rows] = v
        else:
            if n_slow == cap:
                return (SLOW_FULL, line_start, n_rows, nnz, n_slow, 0, 0,
                        min_raw, max_raw, max_pos)
            slow[n_slow, 0] = SLOW_LABEL
            slow[n_slow, 1] = n_rows
            slow[n_slow, 2] = a
            slow[n_slow, 3] = pos
            n_slow += 1
        prev = np.int64(-1)
        while True:
            c = buf[pos]
            while c == _SP or c == _TAB or c == _CR:
                pos += 1
                c = buf[pos]
            if c == _NL:
                pos += 1
                break
            if c == _HASH:
                while buf[pos] != _NL:
                    pos += 1
                pos += 1
                break
            a = pos
            colon = -1
            while not _is_stop(buf[pos]):
                if buf[pos] == _COLON and colon < 0:
                    colon = pos
                pos += 1
            b = pos
            if colon < 0:
                return (ERR_NO_COLON, line_start, n_rows, nnz, n_slow, a, b,
                        min_raw, max_raw, max_pos)
            if colon - a == 3 and buf[a] == 113 and buf[a + 1] == 105 and buf[a + 2] == 100:
                continue  # qid:N
            if colon == a:
                return (ERR_BAD_INDEX, line_start, n_rows, nnz, n_slow, a, b,
                        min_raw, max_raw, max_pos)
            raw = np.int64(0)
            for i in range(a, colon):
                d = buf[i]
                if d < 48 or d > 57:
                    return (ERR_BAD_INDEX, line_start, n_rows, nnz, n_slow, a, b,
                            min_raw, max_raw, max_pos)
                if i - a >= 18:
                    return (ERR_INDEX_OVERFLOW, line_start, n_rows, nnz, n_slow, a, b,
                            min_raw, max_raw, max_pos)
                raw = raw * 10 + (d - 48)
            if raw <= prev:
                return (ERR_ORDER, line_start, n_rows, nnz, n_slow, a, b,
                        min_raw, max_raw, prev)
            prev = raw
            if strict_one_based and raw == 0:
                return (ERR_ZERO_INDEX, line_start, n_rows, nnz, n_slow, a, b,
                        min_raw, max_raw, max_pos)
            stored = raw - offset
            if limit >= 0 and stored >= limit:
                return (ERR_INDEX_RANGE, line_start, n_rows, nnz, n_slow, a, b,
                        min_raw, max_raw, max_pos)
            if colon + 1 == b:
                return (ERR_EMPTY_VALUE, line_start, n_rows, nnz, n_slow, a, b,
                        min_raw, max_raw, max_pos)
            ok, v = _fast_float(buf, colon + 1, b, pow10)
            indices[nnz] = stored
            if ok:
                values[nnz] = v
            else:
                if n_slow == cap:
                    return (SLOW_FULL, line_start, n_rows, row_nnz0, row_slow0, 0, 0,
                            min_raw, max_raw, max_pos)
                slow[n_slow, 0] = SLOW_VALUE
                slow[n_slow, 1] = nnz
                slow[n_slow, 2] = colon + 1
                slow[n_slow, 3] = b
                n_slow += 1
            nnz += 1
            if raw < min_raw:
                min_raw = raw
            if raw > max_raw:
                max_raw = raw
                max_pos = a
        rowlen[n_rows] = nnz - row_nnz0
        n_rows += 1
    return (OK, pos, n_rows, nnz, n_slow, 0, 0, min_raw, max_raw, max_pos)
