"""Local arithmetic of the algorithms: adding vectors and parts by the switch rule.

Package-internal, no MPI. Every function keeps the representation the switch rule asks for
(:meth:`sparcml.wire.Codec.should_be_dense`) and adds in a fixed order, so that ranks that add
the same operands get bitwise the same result.
"""

from __future__ import annotations

import numpy as np

from . import kernels
from .vector import SparseVector
from .wire import Codec, Part

__all__ = ["normalize", "add", "fold_parts", "assemble", "write_dense", "copy_of", "as_part"]


def normalize(vec: SparseVector, codec: Codec) -> SparseVector:
    """The representation the switch rule asks for (dense-backed iff the rule fires)."""
    if vec.is_dense:
        if codec.should_be_dense(vec.count_nonzero(), vec.dim):
            return vec
        return vec.to_sparse()
    if codec.should_be_dense(vec.nnz, vec.dim):
        return SparseVector._trusted(vec.dim, None, vec.to_dense())
    return vec


def add(a: SparseVector, b: SparseVector, codec: Codec) -> SparseVector:
    """``a + b`` in the representation of the rule; bitwise equal to ``b + a``."""
    if a.is_dense and b.is_dense:
        return SparseVector._trusted(a.dim, None, a.values + b.values)
    if a.is_dense or b.is_dense:
        dense, sparse = (a, b) if a.is_dense else (b, a)
        out = dense.values.copy()
        kernels.scatter_add(out, sparse.indices, sparse.values, 0)
        return SparseVector._trusted(a.dim, None, out)
    idx, val = kernels.merge_add(a.indices, a.values, b.indices, b.values)
    if codec.should_be_dense(idx.shape[0], a.dim):
        out = np.zeros(a.dim, a.dtype)
        kernels.scatter_add(out, idx, val, 0)
        return SparseVector._trusted(a.dim, None, out)
    return SparseVector._trusted(a.dim, idx, val)


def fold_parts(parts: list[Part], offset: int, length: int, codec: Codec,
               force_dense: bool = False) -> Part:
    """Sum parts of one index range in list order; dense when any part is, or when forced."""
    value_dtype, index_dtype = codec.value_dtype, codec.index_dtype
    if force_dense or any(p.is_dense for p in parts):
        acc = np.zeros(length, value_dtype)
        for p in parts:
            if p.is_dense:
                acc += p.values
            else:
                kernels.scatter_add(acc, p.indices, p.values, offset)
        return Part(offset, length, None, acc)
    counts = np.array([0] + [p.nnz for p in parts], np.int64)
    offsets = np.cumsum(counts)
    if offsets[-1] == 0:
        return Part(offset, length, np.empty(0, index_dtype), np.empty(0, value_dtype))
    idx, val = kernels.merge_many(offsets, np.concatenate([p.indices for p in parts]),
                                  np.concatenate([p.values for p in parts]))
    if codec.should_be_dense(idx.shape[0], length):
        acc = np.zeros(length, value_dtype)
        kernels.scatter_add(acc, idx, val, offset)
        return Part(offset, length, None, acc)
    return Part(offset, length, idx, val)


def assemble(blocks: list[Part], dim: int, codec: Codec) -> SparseVector:
    """Concatenate disjoint blocks (in index order) into one vector, by the switch rule."""
    value_dtype, index_dtype = codec.value_dtype, codec.index_dtype
    support = sum(kernels.count_nonzero(b.values) if b.is_dense else b.nnz for b in blocks)
    if codec.should_be_dense(support, dim):
        out = np.zeros(dim, value_dtype)
        for b in blocks:
            if b.is_dense:
                out[b.offset:b.offset + b.length] = b.values
            else:
                out[b.indices] = b.values
        return SparseVector._trusted(dim, None, out)
    idx, val = [], []
    for b in blocks:
        if b.is_dense:
            i, v = kernels.dense_to_sparse(b.values, b.offset, np.empty(0, index_dtype))
        else:
            i, v = b.indices, b.values
        idx.append(i)
        val.append(v)
    return SparseVector._trusted(dim, np.concatenate(idx).astype(index_dtype, copy=False),
                                 np.concatenate(val))


def write_dense(vec: SparseVector, out: np.ndarray) -> np.ndarray:
    """``out[:] = vec`` (every entry, zeros included); returns ``out``."""
    if vec.is_dense:
        if vec.values is not out:
            np.copyto(out, vec.values)
    else:
        out.fill(0)
        out[vec.indices] = vec.values
    return out


def copy_of(vec: SparseVector) -> SparseVector:
    """A vector that shares no memory with ``vec``."""
    return SparseVector._trusted(vec.dim, None if vec.is_dense else vec.indices.copy(),
                                 vec.values.copy())


def as_part(vec: SparseVector) -> Part:
    """The whole vector as one part of ``[0, dim)`` (no copy)."""
    return Part(0, vec.dim, vec.indices, vec.values)
