"""Benchmark inputs: one sparse vector per rank with a chosen overlap pattern between ranks,
or recorded vectors replayed per rank (:mod:`.replay`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from sparcml import SparseVector

from .replay import load_replay

__all__ = ["PATTERNS", "REPLAY", "make_input", "bench_cells"]

REPLAY = "replay"  # the pattern of recorded vectors (``--pattern replay --replay FILE``)
PATTERNS = ("random", "overlap", "disjoint", "powerlaw", REPLAY)
POWERLAW_MAX_BLOCKS = 64  # the "powerlaw" pattern reads at most this many blocks of rows
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


def _minibatch_support(dim: int, k: int, seed: int, rank: int) -> np.ndarray:
    """The first ``k`` features met reading url-like rows of stream ``(seed, rank)``, sorted.

    Reads a few rows first and four times more while fewer than ``k`` features were met (the
    first rows of the synthetic data do not depend on how many are generated)."""
    # scipy and h5py (the [apps] extra): sparc-bench runs without them
    from sparcapps.data.synth import BLOCK_ROWS, URL_LIKE, iter_blocks

    spec = replace(URL_LIKE, n_features=max(dim, URL_LIKE.dense_features + 2))
    rows = max(16, int(4 * k / URL_LIKE.nnz_mean))
    while True:
        rows = min(rows, POWERLAW_MAX_BLOCKS * BLOCK_ROWS)
        blocks = [indices for _, indices, *_ in iter_blocks(spec, rows, seed=1000 * seed + rank)]
        met = np.concatenate(blocks) if blocks else np.zeros(0, np.int64)
        _, first = np.unique(met, return_index=True)
        order = met[np.sort(first)]  # distinct features in order of first appearance
        if order.size >= k or rows == POWERLAW_MAX_BLOCKS * BLOCK_ROWS:
            return np.sort(order[:k])
        rows *= 4


def bench_cells(dims, densities, patterns, replay: str | None = None) -> list[tuple]:
    """The inputs of a sweep, in order: ``(N, density, pattern, label)`` for every N, density
    and synthetic pattern, and one cell per recorded file for ``replay`` (its own N and mean
    density; ``label`` = ``replay:NAME``, what the records call the pattern).

    Raises ValueError when ``replay`` is among ``patterns`` without a file, or the reverse."""
    cells = []
    for pattern in patterns:
        if pattern == REPLAY:
            if not replay:
                raise ValueError("--pattern replay needs --replay FILE (a recording of "
                                 "sparcapps.bench.record_gradients)")
            stream = load_replay(replay)
            cells.append((stream.dim, stream.density, REPLAY, f"{REPLAY}:{stream.name}"))
        else:
            cells.extend((dim, density, pattern, pattern) for dim in dims
                         for density in densities)
    if replay and REPLAY not in patterns:
        raise ValueError("--replay FILE is used by --pattern replay; add it to --pattern")
    return cells


def make_input(dim: int, density: float, pattern: str, rank: int, size: int, *,
               dtype=np.float32, seed: int = 0, replay: str | None = None) -> SparseVector:
    """Rank ``rank``'s input: ``round(density * dim)`` nonzeros of standard-normal values.

    ``random``: uniform random supports drawn independently on each rank.
    ``overlap``: 90% of each support is common to all ranks, the rest drawn per rank.
    ``disjoint``: rank r draws from indices congruent to r mod P (no index on two ranks).
    ``powerlaw``: the support of a minibatch gradient of url-like data (``sparcapps.data``'s
    synthetic twin with ``dim`` features, rank r reading its own rows): the features of the
    first rows until ``k`` distinct ones are met (fewer if the rows run out), so a few low
    features are in every rank's support and the frequency of the others follows a power law.
    ``replay``: the vectors recorded in the file ``replay`` (:func:`.replay.load_replay`): rank
    r takes recorded vector ``r mod count`` (values cast to ``dtype``); ``dim`` must be the
    file's dimension and ``density`` is not used.
    """
    if pattern == REPLAY:
        if not replay:
            raise ValueError("pattern 'replay' needs the file of recorded vectors (replay=)")
        stream = load_replay(replay)
        if dim != stream.dim:
            raise ValueError(f"replay file {replay} holds vectors of dimension {stream.dim}, "
                             f"not {dim}")
        return stream.vector(rank, dtype=dtype)
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
    elif pattern == "powerlaw":
        idx = _minibatch_support(dim, k, seed, rank)
    else:
        slots = (dim - rank + size - 1) // size
        idx = _sample(local, slots, min(k, slots)) * size + rank
    vals = local.standard_normal(idx.size).astype(dtype)
    return SparseVector(dim, idx, vals)
