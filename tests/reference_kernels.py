"""Slow, obvious NumPy references of the Numba kernels in ``sparcml.kernels``."""

import numpy as np


def merge_add(a_idx, a_val, b_idx, b_val):
    idx = np.union1d(a_idx, b_idx).astype(a_idx.dtype)
    val = np.zeros(idx.size, dtype=a_val.dtype)
    val[np.searchsorted(idx, a_idx)] += a_val
    val[np.searchsorted(idx, b_idx)] += b_val
    return idx, val


def merge_many(offsets, idx, val):
    streams = [(idx[offsets[s]:offsets[s + 1]], val[offsets[s]:offsets[s + 1]])
               for s in range(len(offsets) - 1)]
    out_idx = np.unique(idx).astype(idx.dtype)
    out_val = np.zeros(out_idx.size, dtype=val.dtype)
    seen = np.zeros(out_idx.size, dtype=bool)
    for s_idx, s_val in streams:  # fold in stream order, as the kernel promises
        pos = np.searchsorted(out_idx, s_idx)
        out_val[pos] = np.where(seen[pos], out_val[pos] + s_val, s_val)
        seen[pos] = True
    return out_idx, out_val


def scatter_add(dense, idx, val, offset):
    np.add.at(dense, idx - offset, val)


def dense_to_sparse(x, offset, index_dtype):
    nz = np.flatnonzero(x)
    return (nz + offset).astype(index_dtype), x[nz]
