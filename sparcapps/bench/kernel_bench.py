"""Merge-add kernel against scipy.sparse CSR addition of the same two vectors, side by side."""

from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp

from sparcml import kernels
from sparcapps.records import summarize

__all__ = ["bench_merge_add"]


def _sorted_support(rng, dim, k):
    out = np.unique(rng.integers(0, dim, k + k // 4))
    return np.sort(rng.choice(out, k, replace=False)).astype(np.int32)


def bench_merge_add(items: int = 1_000_000, dim: int = 16 * 2**20, reps: int = 15,
                    seed: int = 0) -> dict:
    """Time merge-add of two sorted int32/float32 streams of ``items`` each, in [0, dim).

    Returns medians (seconds), throughputs in million input items per second, and the ratio
    numba / scipy. The SciPy side adds two prebuilt 1 x dim ``csr_matrix`` (construction not
    timed); the two results are checked equal.
    """
    rng = np.random.default_rng(seed)
    a_idx, b_idx = _sorted_support(rng, dim, items), _sorted_support(rng, dim, items)
    a_val = rng.standard_normal(items).astype(np.float32)
    b_val = rng.standard_normal(items).astype(np.float32)
    a = sp.csr_matrix((a_val, a_idx, np.array([0, items])), shape=(1, dim))
    b = sp.csr_matrix((b_val, b_idx, np.array([0, items])), shape=(1, dim))
    got_i, got_v = kernels.merge_add(a_idx, a_val, b_idx, b_val)  # compile / load from cache
    expected = a + b
    if not (np.array_equal(expected.indices, got_i) and np.array_equal(expected.data, got_v)):
        raise AssertionError("merge_add and scipy.sparse disagree")
    t_numba, t_scipy = [], []
    for _ in range(reps):  # interleaved, so that machine noise hits both alike
        t0 = time.perf_counter()
        kernels.merge_add(a_idx, a_val, b_idx, b_val)
        t_numba.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        a + b
        t_scipy.append(time.perf_counter() - t0)
    numba, scipy_ = summarize(t_numba), summarize(t_scipy)
    total = 2 * items
    return {
        "items": items, "dim": dim,
        "numba": numba, "scipy": scipy_,
        "numba_mitems_per_s": total / numba["median"] / 1e6,
        "scipy_mitems_per_s": total / scipy_["median"] / 1e6,
        "speedup": scipy_["median"] / numba["median"],
    }
