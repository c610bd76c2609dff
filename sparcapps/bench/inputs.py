"""Benchmark inputs: one sparse vector per rank with a chosen overlap pattern between ranks."""

from __future__ import annotations

import numpy as np

from sparcml import SparseVector

__all__ = ["PATTERNS", "make_input"]

PATTERNS = ("random", "overlap", "disjoint")
SHARED_FRACTION = 0.9  # the "overlap" pattern: share of each rank's support common to all ranks


def _sample(rng, population: int, k: int) -> np.ndarray:
    """k distinct sorted values of [0, population), O(k) memory even for a large population."""
    k = min(k, population)
    if k > population // 4:
        return np.sort(rng.choice(population, k, replace=False))
    out = np.unique(rng.integers(0, population, k + k // 8 + 16))
    while out.size < k:
        out = np.union1d(out, rng.integers(0, population, k - out.size + 16))
    return np.sort(rng.choice(out, k, replace=False))


def make_input(dim: int, density: float, pattern: str, rank: int, size: int, *,
               dtype=np.float32, seed: int = 0) -> SparseVector:
    """Rank ``rank``'s input: ``round(density * dim)`` nonzeros of standard-normal values.

    ``random``: uniform random supports drawn independently on each rank.
    ``overlap``: 90% of each support is common to all ranks, the rest drawn per rank.
    ``disjoint``: rank r draws from indices congruent to r mod P (no index on two ranks).
    """
    if pattern not in PATTERNS:
        raise ValueError(f"unknown pattern {pattern!r}; choose one of {', '.join(PATTERNS)}")
    if not 0.0 <= density <= 1.0:
        raise ValueError(f"density must lie in [0, 1], got {density}")
    k = int(round(density * dim))
    local = np.random.default_rng([seed, rank, 1])
    if pattern == "random":
        idx = _sample(local, dim, k)
    elif pattern == "overlap":
        shared = _sample(np.random.default_rng([seed, 0, 2]), dim, int(SHARED_FRACTION * k))
        extra = np.setdiff1d(np.arange(dim), shared) if dim <= 4 * k else None
        if extra is not None:
            idx = np.union1d(shared, local.choice(extra, k - shared.size, replace=False))
        else:  # sparse: draw a few more than needed and drop those already shared
            want = k - shared.size
            extra = np.setdiff1d(_sample(local, dim, min(dim, 2 * want + 16)), shared)
            idx = np.union1d(shared, local.choice(extra, want, replace=False))
    else:
        slots = (dim - rank + size - 1) // size
        idx = _sample(local, slots, min(k, slots)) * size + rank
    vals = local.standard_normal(idx.size).astype(dtype)
    return SparseVector(dim, idx, vals)
