"""TopK sparsification with error feedback (Quantized TopK SGD when given a quantizer).

One call of :meth:`TopK.compress` on a dense gradient ``x`` of n values:

1. ``g = x + residual`` (error feedback; ``residual`` starts at zero);
2. keep the k entries of largest ``|g|`` (globally, or per bucket); ties go to the lower index;
3. ``sent = g[kept]``, or ``quantizer.quantize(g[kept])`` when a quantizer is given;
4. ``residual = g - sent`` on the kept entries, ``g`` elsewhere (the quantization error stays too).

So after any number of steps ``sum(inputs) == sum(sent) + residual`` up to float rounding.

How many entries are kept, for a vector of n values:

* ``k=K``: ``min(K, n)``.
* ``density=d``: ``round(d * n)`` (half up), at least 1 when ``d > 0``, at most n.
* ``bucket_size=B`` (as in the CNTK integration of SparCML, which used B = 512): each bucket of B
  consecutive values keeps its own top ``k_b``, ``k_b = max(1, round(d * B))`` for ``d > 0``, where
  ``d`` is ``density``, or ``K / n`` when ``k=K`` is given; the last, partial bucket of length
  L keeps ``max(1, round(d * L))``. With ``d = 0`` nothing is kept. The total can differ
  slightly from the global count; :meth:`TopK.num_kept` gives it exactly.

Example
-------
>>> tk = TopK(k=2)
>>> v = tk.compress(np.array([0.5, -3.0, 1.0, 2.0], np.float32))
>>> v.indices.tolist(), v.values.tolist(), tk.residual.tolist()
([1, 3], [-3.0, 2.0], [0.5, 0.0, 1.0, 0.0])
"""

from __future__ import annotations

import math

import numpy as np

from .._errors import CompressionError, InvalidArgumentError, UnsupportedDtypeError
from .._vector import SparseVector, index_dtype_for
from .._lazy import lazy_module
sampled_topk_kernels = lazy_module("sparcml._topk.sampled_kernels")
local_kernels = lazy_module("sparcml._topk.local_kernels")
kernels = lazy_module("sparcml._kernels")

__all__ = ["TopK", "select_topk"]

_VALUE_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
# raw-bit views: |x| ordering is the order of (bits & ABSMASK); +Inf's key bounds the finite ones
_KEYS = {
    np.dtype(np.float32): (np.uint32, np.uint64(0x7FFFFFFF), np.uint64(0x7F800000)),
    np.dtype(np.float64): (np.uint64, np.uint64(0x7FFFFFFFFFFFFFFF),
                           np.uint64(0x7FF0000000000000)),
}


def _round_half_up(x: float) -> int:
    return int(math.floor(x + 0.5))


def select_topk(x, k: int, bucket_size: int | None = None,
                k_last: int | None = None) -> np.ndarray:
    """Increasing positions of the top-|x| entries of a 1-d float32/float64 array (what
    :class:`TopK` keeps; exact, whatever the data).

    Global (``bucket_size=None``): the ``k`` largest (all of them when ``k >= len(x)``); per
    bucket: ``k`` of each full bucket of ``bucket_size``, ``k_last`` (default ``k``) of a last
    partial one. Ties go to the lower index. Returns int32 positions when ``len(x) <= 2**31``,
    else int64. Raises :class:`~sparcml.CompressionError` on NaN or Inf,
    :class:`~sparcml.UnsupportedDtypeError` for other dtypes and
    :class:`~sparcml.InvalidArgumentError` for a bad shape or count.
    """
    x = np.asarray(x)
    if x.dtype not in _VALUE_DTYPES:
        raise UnsupportedDtypeError(f"select_topk takes float32 or float64 values, got {x.dtype}")
    if x.ndim != 1:
        raise InvalidArgumentError(f"select_topk takes a 1-d array, got shape {x.shape}")
    for name, value in (("k", k), ("bucket_size", bucket_size), ("k_last", k_last)):
        if value is None and name != "k":
            continue
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) \
                or value < (1 if name == "bucket_size" else 0):
            low = 1 if name == "bucket_size" else 0
            raise InvalidArgumentError(f"select_topk: {name} must be an integer >= {low}, "
                                       f"got {value!r}")
    return _select_topk(np.ascontiguousarray(x), int(k), bucket_size, k_last)


def _select_topk(x, k: int, bucket_size=None, k_last=None) -> np.ndarray:
    """:func:`select_topk` of arguments known valid (``x`` C-contiguous)."""
    n = x.shape[0]
    key_dtype, absmask, inf_key = _KEYS[x.dtype]
    keys = x.view(key_dtype)
    idx_dt = index_dtype_for(n)
    if bucket_size is None:
        k = min(k, n)
        if 0 < k < n:
            out = np.empty(k, dtype=idx_dt)
            rc = sampled_topk_kernels.MISSED
            if n >= sampled_topk_kernels.MIN_LENGTH:  # one pass, exact (see that module)
                rc = sampled_topk_kernels.topk_select_sampled(keys, absmask, inf_key, k, out)
            if rc == sampled_topk_kernels.MISSED:
                rc = local_kernels.topk_select(keys, absmask, inf_key, k, out)
        else:
            out = np.arange(n, dtype=idx_dt) if k == n else np.empty(0, idx_dt)
            rc = -1 if kernels.first_nonfinite(x) < 0 else -2
    else:
        full, rest = divmod(n, bucket_size)
        k_last = 0 if rest == 0 else min(k if k_last is None else k_last, rest)
        k = min(k, bucket_size)
        out = np.empty(full * k + k_last, dtype=idx_dt)
        rc = local_kernels.topk_select_buckets(keys, absmask, inf_key, bucket_size, k, k_last,
                                               out)
    if rc != -1:
        pos = kernels.first_nonfinite(x)
        raise CompressionError(
            f"cannot select top-k of a vector holding {x[pos]} at position {pos}; the gradient "
            f"(plus the error-feedback residual) overflowed or is NaN")
    return out


class TopK:
    """Top-k sparsifier with error feedback; see the module docstring for the algorithm.

    Parameters
    ----------
    k : int, optional
        Entries kept per call (exactly one of ``k`` and ``density``).
    density : float in [0, 1], optional
        Fraction of entries kept per call.
    error_feedback : bool, default True
        Keep what was not sent (and the quantization error) and add it to the next input.
    bucket_size : int, optional
        Select per bucket of this many consecutive values instead of globally.

    Attributes
    ----------
    residual : ndarray or None
        What has not been sent yet (None before the first call and without error feedback).
    """

    def __init__(self, k=None, density=None, error_feedback: bool = True, bucket_size=None):
        if (k is None) == (density is None):
            raise CompressionError(
                f"give exactly one of k and density, got k={k!r}, density={density!r}")
        if k is not None and (isinstance(k, (bool, np.bool_))
                              or not isinstance(k, (int, np.integer)) or k < 0):
            raise CompressionError(f"k must be an integer >= 0, got {k!r}")
        if density is not None:
            if isinstance(density, (bool, np.bool_)) or not isinstance(
                    density, (int, float, np.integer, np.floating)) or not 0 <= density <= 1:
                raise CompressionError(f"density must be a number in [0, 1], got {density!r}")
        if bucket_size is not None and (
                isinstance(bucket_size, (bool, np.bool_))
                or not isinstance(bucket_size, (int, np.integer)) or bucket_size < 1):
            raise CompressionError(f"bucket_size must be None or an integer >= 1, "
                                   f"got {bucket_size!r}")
        self.k = None if k is None else int(k)
        self.density = None if density is None else float(density)
        self.error_feedback = bool(error_feedback)
        self.bucket_size = None if bucket_size is None else int(bucket_size)
        self._residual = None
        self._scratch = None

    def __repr__(self) -> str:
        what = f"k={self.k}" if self.k is not None else f"density={self.density}"
        return (f"TopK({what}, error_feedback={self.error_feedback}, "
                f"bucket_size={self.bucket_size})")

    # -- sizes --------------------------------------------------------------------------------

    def _per(self, n: int, length: int) -> int:
        """Entries kept out of ``length`` at this object's rate, for a vector of n values."""
        d = self.density if self.density is not None else (self.k / n if n else 0.0)
        if d <= 0 or length == 0:
            return 0
        return min(length, max(1, _round_half_up(d * length)))

    def _counts(self, n: int):
        if self.bucket_size is None:
            return (min(self.k, n) if self.k is not None else self._per(n, n)), None
        rest = n % self.bucket_size
        return self._per(n, self.bucket_size), self._per(n, rest)

    def num_kept(self, n: int) -> int:
        """Exact number of entries :meth:`compress` keeps from a vector of n values."""
        k, k_last = self._counts(n)
        if self.bucket_size is None:
            return k
        return (n // self.bucket_size) * min(k, self.bucket_size) + (k_last or 0)

    # -- state --------------------------------------------------------------------------------

    @property
    def residual(self):
        """The error-feedback memory (1-d, the dtype of the inputs), or None."""
        return self._residual

    def reset(self) -> None:
        """Forget the residual (e.g. when the parameters change shape)."""
        self._residual = None
        self._scratch = None

    def state_dict(self) -> dict:
        """Configuration and a copy of the residual, for checkpoints. TopK holds no RNG; save a
        quantizer's state with its own ``state_dict``."""
        return {"k": self.k, "density": self.density, "bucket_size": self.bucket_size,
                "error_feedback": self.error_feedback,
                "residual": None if self._residual is None else self._residual.copy()}

    def load_state_dict(self, state: dict) -> None:
        """Restore a residual saved by :meth:`state_dict` of an identically configured TopK."""
        mine = {"k": self.k, "density": self.density, "bucket_size": self.bucket_size,
                "error_feedback": self.error_feedback}
        theirs = {key: state.get(key) for key in mine}
        if mine != theirs:
            raise CompressionError(f"state was saved by a TopK with {theirs}, this one has {mine}")
        residual = state.get("residual")
        if residual is None:
            self.reset()
            return
        residual = np.array(residual)
        if residual.ndim != 1 or residual.dtype not in _VALUE_DTYPES:
            raise CompressionError(f"saved residual must be a 1-d float32/float64 array, got "
                                   f"{residual.dtype} of shape {residual.shape}")
        if not self.error_feedback:
            raise CompressionError("a TopK without error feedback cannot hold a residual")
        self._residual = residual
        self._scratch = None

    # -- compress -----------------------------------------------------------------------------

    def compress(self, x, quantizer=None) -> SparseVector:
        """Sparsify a dense 1-d float32/float64 array into a sparse :class:`SparseVector`.

        Returns a vector of ``dim = len(x)`` with exactly :meth:`num_kept` entries (sorted
        indices, values in the dtype of ``x``; explicit zeros are kept when fewer entries are
        nonzero). With ``quantizer`` (anything with ``quantize(values) -> values``, e.g.
        :class:`~sparcml.QSGD`), the values are the quantized ones. The input is not modified.
        Raises :class:`CompressionError` for NaN/Inf, a 2-d array, or a change of length or
        dtype between calls (call :meth:`reset` first); on error the residual is unchanged.
        """
        x = np.asarray(x)
        if x.dtype not in _VALUE_DTYPES:
            raise UnsupportedDtypeError(
                f"TopK compresses float32 or float64 arrays, got {x.dtype}; convert first")
        if x.ndim != 1:
            raise CompressionError(f"TopK expects a flat 1-d array, got shape {x.shape}; "
                                   f"pass x.ravel()")
        n = x.shape[0]
        if self.error_feedback and self._residual is not None:
            r = self._residual
            if r.shape[0] != n or r.dtype != x.dtype:
                raise CompressionError(
                    f"the residual holds {r.shape[0]} {r.dtype} values, the input has {n} "
                    f"{x.dtype}; call reset() when the vector changes")
            if self._scratch is None:
                self._scratch = np.empty_like(r)
            g = np.add(x, r, out=self._scratch)
        elif self.error_feedback:
            g = x.copy()
        else:
            g = np.ascontiguousarray(x)
        k, k_last = self._counts(n)
        idx = _select_topk(g, k, self.bucket_size, k_last)
        values = g[idx]
        if quantizer is not None and values.size:
            sent = np.asarray(quantizer.quantize(values), dtype=g.dtype)
            if sent.shape != values.shape:
                raise CompressionError(f"quantizer returned shape {sent.shape} for "
                                       f"{values.shape} values")
        else:
            sent = values
        if self.error_feedback:
            g[idx] = values - sent if sent is not values else 0
            # g becomes the residual; the old residual's buffer is the next call's scratch
            self._scratch = self._residual
            self._residual = g
        return SparseVector.unchecked(n, idx, sent)
