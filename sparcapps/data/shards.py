"""Per-rank reading of a sparcml-csr HDF5 file.

Rank ``r`` of ``P`` owns the contiguous rows ``[r*n//P, (r+1)*n//P)`` (sizes differ by at most
one) and reads only those rows: one slice of ``indptr``, ``labels``, ``indices`` and ``data``.

Train/test split by rows with a fixed seed: row ``i`` is a test row when a hash of
``(seed, i)`` falls below ``test_fraction``. Membership depends only on the seed and the row
index, never on ``P``, so the train (or test) shards of any ``P`` concatenate to the same set,
and each rank needs no memory beyond its own rows. The realized fraction is within sampling
noise of ``test_fraction`` (for n rows, about ``sqrt(f(1-f)/n)``). Data sets that come with their
own test file (rcv1, kdd2010) are converted to two files; read each with ``split=None``.

Every row returned has been validated (see :func:`.csrfile.read_csr_rows`): a damaged file
raises :class:`~.errors.DataFormatError` naming the file, the row and the bad value; a file
that is not sparcml-csr raises :class:`~.errors.NotCsrFileError`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.sparse as sp

from .csrfile import open_csr, read_csr_rows

__all__ = ["load_shard", "shard_range", "read_rows", "split_mask", "read_attrs"]

_SPLITS = (None, "train", "test")


def shard_range(n_rows: int, rank: int, size: int) -> tuple[int, int]:
    """The half-open row range ``[start, stop)`` that ``rank`` of ``size`` ranks owns."""
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    if not 0 <= rank < size:
        raise ValueError(f"rank must be in [0, {size}), got {rank}")
    return rank * n_rows // size, (rank + 1) * n_rows // size


def split_mask(start: int, stop: int, *, test_fraction: float, seed: int) -> np.ndarray:
    """Boolean mask of the test rows among rows ``[start, stop)`` (splitmix64 of seed and row)."""
    if not 0.0 <= test_fraction <= 1.0:
        raise ValueError(f"test_fraction must be in [0, 1], got {test_fraction}")
    with np.errstate(over="ignore"):
        x = np.arange(start, stop, dtype=np.uint64)
        x += np.uint64((int(seed) * 0x9E3779B97F4A7C15) % 2**64)
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    u = (x >> np.uint64(11)).astype(np.float64) * (1.0 / 2**53)
    return u < test_fraction


def read_attrs(path: str | Path) -> dict:
    """The root attributes of a sparcml-csr file, with numbers as Python ints."""
    with open_csr(path) as (f, _):
        out = {}
        for k, v in f.attrs.items():
            if isinstance(v, bytes):
                v = v.decode("utf-8", "replace")
            elif isinstance(v, np.generic):
                v = v.item()
            out[k] = v
        return out


def read_rows(path: str | Path, start: int, stop: int) -> tuple[sp.csr_matrix, np.ndarray]:
    """Rows ``[start, stop)`` as ``(X, y)``: X a float32 CSR matrix, y float32 labels."""
    with open_csr(path) as (f, shape):
        if not 0 <= start <= stop <= shape.n_rows:
            raise ValueError(f"rows [{start}, {stop}) out of range for {shape.n_rows} rows "
                             f"in {path}")
        return read_csr_rows(f, path, shape, start, stop)


def load_shard(path: str | Path, rank: int = 0, size: int = 1, *, split: str | None = None,
               test_fraction: float = 0.2, seed: int = 0
               ) -> tuple[sp.csr_matrix, np.ndarray]:
    """Read the rows that ``rank`` of ``size`` ranks owns: ``(X, y)``.

    ``X`` is a ``scipy.sparse.csr_matrix`` of float32 with shape ``(rows, n_features)`` (the
    file's full feature count, so every rank agrees on it) and ``y`` a float32 array (-1/+1 for
    binary tasks). ``split="train"`` or ``"test"`` keeps only that part of the rank's rows (see
    the module docstring); ``None`` keeps all. Only the rank's rows are read from disk, and
    each is validated; a damaged file raises :class:`~.errors.DataFormatError`.

    Example, under mpi4py::

        X, y = load_shard("url.h5", comm.rank, comm.size, split="train", seed=1)
    """
    if split not in _SPLITS:
        raise ValueError(f"split must be None, 'train' or 'test', got {split!r}")
    with open_csr(path) as (f, shape):
        start, stop = shard_range(shape.n_rows, rank, size)
        X, y = read_csr_rows(f, path, shape, start, stop)
    if split is None:
        return X, y
    mask = split_mask(start, stop, test_fraction=test_fraction, seed=seed)
    if split == "train":
        mask = ~mask
    rows = np.flatnonzero(mask)
    return X[rows], y[rows]
