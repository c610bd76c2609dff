"""Numba kernels that validate CSR arrays read from a file (private; see :mod:`.csrfile`).

Pure functions of arrays and scalars: they never raise and never read out of bounds, whatever
the arrays hold; problems come back as a status code and a position, which
:mod:`.csrfile` turns into a :class:`~sparcapps.data.errors.DataFormatError`.
"""

from __future__ import annotations

from numba import njit

from ._guard import guard_numba_cache_with_sparcml

guard_numba_cache_with_sparcml()  # before any kernel is compiled

__all__ = ["check_indptr", "check_indices", "OK", "PTR_DECREASES", "PTR_PAST_END",
           "INDEX_RANGE", "INDEX_ORDER"]

OK = 0
PTR_DECREASES = 1
PTR_PAST_END = 2
INDEX_RANGE = 3
INDEX_ORDER = 4


@njit(cache=True, nogil=True)
def check_indptr(ptr, hi):
    """First problem of the row pointers ``ptr`` (any integer dtype): ``(status, r)``.

    ``PTR_DECREASES`` when ``ptr[r + 1] < ptr[r]``, ``PTR_PAST_END`` when ``ptr[r + 1] > hi``;
    ``(OK, -1)`` when ``ptr`` is non-decreasing and at most ``hi`` (``ptr[0]`` is the caller's
    to check).
    """
    for r in range(ptr.shape[0] - 1):
        if ptr[r + 1] < ptr[r]:
            return PTR_DECREASES, r
        if ptr[r + 1] > hi:
            return PTR_PAST_END, r
    return OK, -1


@njit(cache=True, nogil=True)
def check_indices(ptr, indices, n_features):
    """First invalid entry of the rows ``ptr`` over ``indices``: ``(status, row, k)``.

    ``indices`` holds entries ``ptr[0] .. ptr[-1]`` (so row ``r`` is
    ``indices[ptr[r] - ptr[0] : ptr[r + 1] - ptr[0]]``). ``INDEX_RANGE`` when an index is
    outside ``[0, n_features)``, ``INDEX_ORDER`` when a row's indices are not strictly
    increasing; ``k`` is the position in ``indices``. Row bounds are clipped to ``indices``, so
    bad pointers cannot make it read out of bounds (check them with :func:`check_indptr`).
    """
    n = indices.shape[0]
    base = ptr[0]
    for r in range(ptr.shape[0] - 1):
        a = max(min(ptr[r] - base, n), 0)
        b = max(min(ptr[r + 1] - base, n), a)
        prev = -1
        for k in range(a, b):
            j = indices[k]
            if j < 0 or j >= n_features:
                return INDEX_RANGE, r, k
            if j <= prev:
                return INDEX_ORDER, r, k
            prev = j
    return OK, -1, -1
