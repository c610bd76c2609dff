"""SparseVector: sorted indices and values of one vector of dimension ``dim``, or all its values.

The byte-cost switch rule decides between the two representations: a sparse item costs
``s_idx + s_val`` bytes, a dense entry ``s_val``; a vector is worth holding (and sending) dense
once ``nnz * (s_idx + s_val) >= dim * s_val`` (density >= 1/2 with int32 indices and float32
values, >= 2/3 with int64 and float32).
"""

from __future__ import annotations

import numpy as np

from ._errors import InvalidVectorError, UnsupportedDtypeError
from ._lazy import lazy_module
kernels = lazy_module("sparcml._kernels")

__all__ = ["SparseVector", "index_dtype_for", "should_be_dense", "VALUE_DTYPES", "MAX_DIM"]

VALUE_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_INT32_LIMIT = 2**31
MAX_DIM = 2**63 - 1


def index_dtype_for(dim: int) -> np.dtype:
    """int32 when every index of ``[0, dim)`` fits, else int64."""
    return np.dtype(np.int32) if dim <= _INT32_LIMIT else np.dtype(np.int64)


def should_be_dense(nnz: int, dim: int, index_dtype, value_dtype) -> bool:
    """The switch rule: ``nnz * (s_idx + s_val) >= dim * s_val`` (an empty dim is never dense)."""
    if dim == 0:
        return False
    s_idx = np.dtype(index_dtype).itemsize
    s_val = np.dtype(value_dtype).itemsize
    return nnz * (s_idx + s_val) >= dim * s_val


def _value_dtype(values) -> np.dtype:
    dt = np.asarray(values).dtype
    dt = dt.newbyteorder("=") if dt.kind == "f" else dt
    # NumPy's own instance (newbyteorder made another), so that a plan's steady check
    # (`values.dtype is plan.dtype`) holds for the arrays users pass
    for known in VALUE_DTYPES:
        if dt == known:
            return known
    raise UnsupportedDtypeError(
        f"values must be float32 or float64, got {dt}; convert them first, "
        f"e.g. values.astype(np.float32)")


def _dense_values(x, caller: str) -> np.ndarray:
    """A contiguous 1-d float32/float64 array, or the error that says what is wrong."""
    x = _native(np.ascontiguousarray(x))
    _value_dtype(x)
    if x.ndim != 1:
        raise InvalidVectorError(f"{caller} expects a 1-d array, got shape {x.shape}")
    return x


def _check_dim(dim) -> int:
    if isinstance(dim, (bool, np.bool_)) or not isinstance(dim, (int, np.integer)):
        raise InvalidVectorError(f"dim must be an integer, got {dim!r}")
    if dim < 0:
        raise InvalidVectorError(f"dim must be >= 0, got {dim}")
    if dim > MAX_DIM:
        raise InvalidVectorError(f"dim must be below 2**63 (indices are at most int64), "
                                 f"got {dim}")
    return int(dim)


def _native(a: np.ndarray) -> np.ndarray:
    """``a`` in the machine's byte order (a big-endian array from a file, say)."""
    return a if a.dtype.isnative else a.astype(a.dtype.newbyteorder("="))


class SparseVector:
    """One vector of dimension ``dim``: sparse (sorted indices + values) or dense-backed.

    Parameters
    ----------
    dim : int
        The dimension N; indices lie in ``[0, dim)``.
    indices : 1-d array of any integer dtype, strictly increasing
        Stored as int32 when ``dim <= 2**31``, else int64.
    values : 1-d float32 or float64 array, same length as ``indices``
        Kept in the caller's dtype (copied only when the caller's array is not contiguous).

    Use :meth:`from_coo` for unsorted or duplicate indices (duplicates are summed),
    :meth:`from_dense` for a dense array, :meth:`dense` to wrap all ``dim`` values as they are.
    ``nnz`` counts *stored* entries, explicit zeros included (as in ``scipy.sparse``); for a
    dense-backed vector it is ``dim``.
    """

    __slots__ = ("dim", "indices", "values")

    def __init__(self, dim, indices, values, *, check: bool = True):
        dim = _check_dim(dim)
        values = _native(np.asarray(values))
        value_dtype = _value_dtype(values)
        indices = _native(np.asarray(indices))
        if indices.ndim != 1 or values.ndim != 1:
            raise InvalidVectorError(
                f"indices and values must be 1-d, got shapes {indices.shape} and {values.shape}")
        if indices.shape[0] != values.shape[0]:
            raise InvalidVectorError(
                f"indices and values differ in length: {indices.shape[0]} indices, "
                f"{values.shape[0]} values")
        if indices.size and not np.issubdtype(indices.dtype, np.integer):
            raise UnsupportedDtypeError(f"indices must be integers, got {indices.dtype}")
        if check and indices.size:
            if indices.dtype.kind == "u" and indices.dtype.itemsize == 8:
                big = int(indices.max())
                if big >= dim:  # before int64 would wrap it into a negative, "unsorted" index
                    raise InvalidVectorError(
                        f"index {big} out of range [0, {dim}) for a vector of dim {dim}")
            bad = kernels.first_unsorted(indices if indices.dtype.kind == "i"
                                         else indices.astype(np.int64))
            if bad >= 0:
                what = "duplicate" if indices[bad] == indices[bad - 1] else "unsorted"
                raise InvalidVectorError(
                    f"indices must be strictly increasing: {what} index {indices[bad]} at "
                    f"position {bad} after {indices[bad - 1]}; use SparseVector.from_coo to sort "
                    f"and sum duplicates")
            lo, hi = int(indices[0]), int(indices[-1])
            if lo < 0 or hi >= dim:
                bad_value = lo if lo < 0 else hi
                raise InvalidVectorError(
                    f"index {bad_value} out of range [0, {dim}) for a vector of dim {dim}")
        self.dim = dim
        self.indices = np.ascontiguousarray(indices, dtype=index_dtype_for(dim))
        self.values = np.ascontiguousarray(values, dtype=value_dtype)

    # -- constructors -------------------------------------------------------------------------

    @classmethod
    def unchecked(cls, dim: int, indices, values) -> "SparseVector":
        """Wrap arrays already known to be valid: no check, no conversion, no copy (O(1)).

        For algorithms and kernels whose output is valid by construction (a registered
        algorithm's result, say). The caller guarantees what the constructor would check:
        ``dim`` an int in ``[0, 2**63)``; ``values`` a C-contiguous 1-d float32/float64 array
        in native byte order; ``indices`` either None (dense-backed: ``values`` holds all
        ``dim`` values) or a C-contiguous 1-d array of :func:`index_dtype_for(dim)
        <sparcml.index_dtype_for>`, strictly increasing in ``[0, dim)``, as long as ``values``.
        The vector keeps the arrays themselves. Anything else gives wrong results later, not
        an error here; use the constructor (``check=False`` skips only its O(nnz) checks) where
        the input is not known to be valid.
        """
        vec = object.__new__(cls)
        vec.dim = dim
        vec.indices = indices
        vec.values = values
        return vec

    @classmethod
    def dense(cls, values) -> "SparseVector":
        """A dense-backed vector holding all of ``values`` (no copy when contiguous)."""
        values = _dense_values(values, "SparseVector.dense")
        return cls.unchecked(values.shape[0], None, values)

    @classmethod
    def from_dense(cls, x) -> "SparseVector":
        """From a dense 1-d array: sparse (its nonzeros) or dense-backed, by the switch rule."""
        x = _dense_values(x, "from_dense")
        dim = x.shape[0]
        idx_dt = index_dtype_for(dim)
        if should_be_dense(kernels.count_nonzero(x), dim, idx_dt, x.dtype):
            return cls.unchecked(dim, None, x)
        idx, val = kernels.dense_to_sparse(x, 0, np.empty(0, idx_dt))
        return cls.unchecked(dim, idx, val)

    @classmethod
    def from_coo(cls, dim, indices, values) -> "SparseVector":
        """From unsorted indices that may repeat: sorts them and sums the values of duplicates."""
        dim = _check_dim(dim)
        values = _native(np.asarray(values))
        _value_dtype(values)
        indices = _native(np.asarray(indices))
        if indices.shape != values.shape or indices.ndim != 1:
            raise InvalidVectorError(
                f"indices and values must be 1-d of equal length, got shapes {indices.shape} "
                f"and {values.shape}")
        if indices.size and not np.issubdtype(indices.dtype, np.integer):
            raise UnsupportedDtypeError(f"indices must be integers, got {indices.dtype}")
        if indices.size and (indices.min() < 0 or indices.max() >= dim):
            bad = indices.min() if indices.min() < 0 else indices.max()
            raise InvalidVectorError(
                f"index {bad} out of range [0, {dim}) for a vector of dim {dim}")
        order = np.argsort(indices, kind="stable")
        sorted_idx = indices[order]
        starts = np.flatnonzero(np.r_[True, sorted_idx[1:] != sorted_idx[:-1]]) if indices.size \
            else np.empty(0, np.intp)
        summed = np.add.reduceat(values[order], starts) if indices.size else values[:0]
        return cls.unchecked(dim, sorted_idx[starts].astype(index_dtype_for(dim)),
                            np.ascontiguousarray(summed, dtype=values.dtype))

    @classmethod
    def zeros(cls, dim, dtype=np.float32) -> "SparseVector":
        """An empty (all-zero) sparse vector."""
        dim = _check_dim(dim)
        return cls.unchecked(dim, np.empty(0, index_dtype_for(dim)), np.empty(0, _value_dtype(
            np.empty(0, dtype))))

    # -- properties ---------------------------------------------------------------------------

    @property
    def is_dense(self) -> bool:
        """True when the vector holds all ``dim`` values as one array."""
        return self.indices is None

    @property
    def nnz(self) -> int:
        """Stored entries (explicit zeros included); ``dim`` when dense-backed."""
        return self.dim if self.indices is None else int(self.indices.shape[0])

    @property
    def density(self) -> float:
        """``nnz / dim`` (0.0 for ``dim == 0``)."""
        return self.nnz / self.dim if self.dim else 0.0

    @property
    def dtype(self) -> np.dtype:
        """The value dtype."""
        return self.values.dtype

    @property
    def index_dtype(self) -> np.dtype:
        """The dtype indices are stored and sent in (int32 or int64, by ``dim``)."""
        return index_dtype_for(self.dim)

    def count_nonzero(self) -> int:
        """Entries whose value is not zero."""
        return int(kernels.count_nonzero(self.values))

    # -- conversions --------------------------------------------------------------------------

    def to_dense(self, out=None) -> np.ndarray:
        """All ``dim`` values as a dense array (into ``out`` when given; a copy otherwise)."""
        if out is None:
            out = np.zeros(self.dim, dtype=self.dtype)
        else:
            if out.shape != (self.dim,) or out.dtype != self.dtype:
                raise InvalidVectorError(
                    f"out must have shape ({self.dim},) and dtype {self.dtype}, got "
                    f"{out.shape} {out.dtype}")
            out[:] = 0
        if self.indices is None:
            out[:] = self.values
        else:
            out[self.indices] = self.values
        return out

    def to_sparse(self) -> "SparseVector":
        """A sparse vector of the same sum (a dense-backed one keeps only its nonzeros)."""
        if self.indices is not None:
            return self
        idx, val = kernels.dense_to_sparse(self.values, 0, np.empty(0, self.index_dtype))
        return SparseVector.unchecked(self.dim, idx, val)

    def astype(self, dtype) -> "SparseVector":
        """The same vector with values of another float dtype."""
        values = self.values.astype(dtype)
        _value_dtype(values)
        return SparseVector.unchecked(self.dim, self.indices, values)

    def __repr__(self) -> str:
        kind = "dense-backed" if self.is_dense else "sparse"
        return (f"SparseVector(dim={self.dim}, nnz={self.nnz}, {kind}, "
                f"dtype={self.dtype.name})")

    def __eq__(self, other):  # pragma: no cover - helpful in tests, not for hashing
        return NotImplemented

    __hash__ = None
