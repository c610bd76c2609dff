"""Recorded sparse vectors (e.g. real gradients) for ``sparc-bench --pattern replay``.

File format (``.npz``, written by :func:`save_replay`; NumPy only, no pickle):

- ``format``: the string ``"sparc-replay-1"``;
- ``name``: a short label (the records' pattern is ``replay:NAME``); ``source``: free text
  saying how the vectors were made (command, model, step);
- ``dim``: int64 scalar, the dimension of every vector;
- ``indptr``: int64, ``count + 1`` offsets; vector j is ``indices[indptr[j]:indptr[j+1]]``
  (strictly increasing, in ``[0, dim)``) with ``values`` at the same positions;
- ``indices``: int64; ``values``: float32.

Replay rule: rank r of P takes vector ``r mod count``. With P <= count every rank has its own
recorded vector; beyond, vectors repeat (an identical support adds no fill-in), so record at
least as many vectors as the largest P you replay at.
"""

from __future__ import annotations

import functools
import os
import zipfile
from dataclasses import dataclass

import numpy as np

from sparcml import SparseVector
from sparcapps.atomicfile import atomic_write

__all__ = ["FORMAT", "ReplayStream", "ReplayFileError", "save_replay", "load_replay"]

FORMAT = "sparc-replay-1"


class ReplayFileError(ValueError):
    """A replay file that is missing, not of :data:`FORMAT`, or inconsistent."""


@dataclass(frozen=True)
class ReplayStream:
    """The vectors of one replay file (read-only arrays; see the module docstring)."""

    name: str
    source: str
    dim: int
    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray

    @property
    def count(self) -> int:
        return self.indptr.size - 1

    @property
    def density(self) -> float:
        """Mean nonzeros per vector / dim."""
        return float(self.indices.size / self.count / self.dim) if self.count else 0.0

    def vector(self, rank: int, dtype=np.float32) -> SparseVector:
        """Rank ``rank``'s input: vector ``rank mod count``, values as ``dtype``."""
        j = rank % self.count
        lo, hi = int(self.indptr[j]), int(self.indptr[j + 1])
        idx = self.indices[lo:hi]
        return SparseVector(self.dim, idx, self.values[lo:hi].astype(dtype, copy=True))


def save_replay(path, name: str, dim: int, vectors, *, source: str = "") -> str:
    """Write ``vectors`` (an iterable of ``(indices, values)`` pairs, any order of indices,
    no duplicates) as a replay file at ``path`` (``.npz`` appended if missing), atomically;
    returns the path written."""
    parts_i, parts_v, indptr = [], [], [0]
    for idx, val in vectors:
        idx = np.asarray(idx, np.int64)
        val = np.asarray(val, np.float32)
        if idx.shape != val.shape or idx.ndim != 1:
            raise ReplayFileError(f"indices {idx.shape} and values {val.shape} must be 1-D "
                                  f"arrays of one length")
        order = np.argsort(idx, kind="stable")
        idx, val = idx[order], val[order]
        if idx.size and (idx[0] < 0 or idx[-1] >= dim or np.any(np.diff(idx) == 0)):
            raise ReplayFileError(f"vector {len(indptr) - 1}: indices must be distinct and in "
                                  f"[0, {dim})")
        parts_i.append(idx)
        parts_v.append(val)
        indptr.append(indptr[-1] + idx.size)
    if len(indptr) < 2:
        raise ReplayFileError("save_replay needs at least one vector")
    path = os.fspath(path)
    if not path.endswith(".npz"):  # as np.savez_compressed names it
        path += ".npz"
    with atomic_write(path) as tmp, open(tmp, "wb") as fh:
        np.savez_compressed(fh, format=np.array(FORMAT), name=np.array(name),
                            source=np.array(source), dim=np.int64(dim),
                            indptr=np.asarray(indptr, np.int64),
                            indices=np.concatenate(parts_i), values=np.concatenate(parts_v))
    return path


@functools.lru_cache(maxsize=4)
def _load(path: str, mtime: float) -> ReplayStream:
    try:
        with np.load(path, allow_pickle=False) as f:
            if "format" not in f or str(f["format"]) != FORMAT:
                raise ReplayFileError(f"{path} is not a replay file of format {FORMAT}")
            stream = ReplayStream(str(f["name"]), str(f["source"]), int(f["dim"]),
                                  f["indptr"], f["indices"], f["values"])
    except ReplayFileError:
        raise
    except (OSError, EOFError, zipfile.BadZipFile, KeyError, ValueError, TypeError) as exc:
        # an empty file is EOFError, a truncated one BadZipFile: neither is an OSError
        why = str(exc) or type(exc).__name__
        raise ReplayFileError(f"cannot read replay file {path} (empty, truncated or not a "
                              f"replay file: {why}); record it again with "
                              f"'sparc-record-gradients'") from exc
    if any(a.ndim != 1 for a in (stream.indptr, stream.indices, stream.values)) \
            or stream.dim < 1 or not np.issubdtype(stream.indices.dtype, np.integer):
        raise ReplayFileError(f"{path}: dim, indptr, indices or values have the wrong shape "
                              f"or type")
    p = stream.indptr
    if (p.size < 2 or p[0] != 0 or p[-1] != stream.indices.size
            or stream.values.size != stream.indices.size or np.any(np.diff(p) < 0)):
        raise ReplayFileError(f"{path}: indptr does not delimit the indices and values")
    for a in (stream.indptr, stream.indices, stream.values):
        a.setflags(write=False)
    return stream


def load_replay(path) -> ReplayStream:
    """The :class:`ReplayStream` of ``path`` (read once per process and file version)."""
    path = os.fspath(path)
    try:
        mtime = os.stat(path).st_mtime
    except OSError as exc:
        raise ReplayFileError(f"replay file {path} not found: record one with "
                              f"'sparc-record-gradients'") from exc
    return _load(path, mtime)
