"""Validation of a collective's arguments, on this rank, before the ranks agree.

One place for the checks every entry point shares (the vector, ``out=``, ``stats=``, the
quantizer, ``root``). Each function raises a specific :class:`~sparcml.SparcmlError` that says
what was expected; the entry points run them inside :class:`sparcml._runtime.agreement.capture` and then
agree, so that a bad argument on one rank raises the same error on every rank (DESIGN 3.9).
Checks that depend on data only this rank holds (a NaN that QSGD cannot encode) are made here,
before anything is sent.
"""

from __future__ import annotations

import numpy as np

from .._runtime.context import TrafficStats
from .._errors import (IncompatibleOptionsError, InvalidArgumentError, InvalidOutputError,
                       QuantizationError, UnsupportedDtypeError)
from .._vector import SparseVector
from .._lazy import lazy_module
kernels = lazy_module("sparcml._kernels")

__all__ = ["LocalFailure", "coerce_vector", "check_out", "check_stats", "quantizer_code",
           "check_quantizable", "check_root", "check_density"]

_FLOAT32_MAX = float(np.finfo(np.float32).max)


class LocalFailure:
    """What a caller passes as the vector of a collective when this rank failed before it
    (a NaN its compressor refused, a residual of another length): the collective raises
    ``error`` as this rank's validation error, so its agreement (or a plan's error flag)
    raises it on every rank instead of leaving the others waiting. ``dim`` and ``dtype``: the
    shape the call would have had (for a plan made at this call), best effort."""

    __slots__ = ("error", "dim", "dtype")

    def __init__(self, error: BaseException, dim: int = 0, dtype=np.float32):
        self.error, self.dim, self.dtype = error, dim, dtype


def coerce_vector(vec, *, check: bool = True) -> SparseVector:
    """A :class:`SparseVector` from what a caller may pass: a SparseVector, a 1-d float
    ndarray (made sparse by the switch rule), or ``(dim, indices, values)`` (validated unless
    ``check=False``: then indices are trusted to be sorted and in range). A
    :class:`LocalFailure` raises its error."""
    if isinstance(vec, SparseVector):
        return vec
    if isinstance(vec, LocalFailure):
        raise vec.error
    if isinstance(vec, np.ndarray):
        return SparseVector.from_dense(vec)
    if isinstance(vec, tuple) and len(vec) == 3:
        return SparseVector(*vec, check=check)
    raise UnsupportedDtypeError(
        f"expected a SparseVector, a 1-d NumPy array or a (dim, indices, values) tuple, got "
        f"{type(vec).__name__}")


def check_out(out, vec: SparseVector) -> None:
    """Raise :class:`InvalidOutputError` unless ``out`` can hold ``vec``'s sum."""
    if not isinstance(out, np.ndarray):
        raise InvalidOutputError(f"out must be a NumPy array, got {type(out).__name__}")
    if out.ndim != 1 or out.shape[0] != vec.dim or out.dtype != vec.dtype:
        raise InvalidOutputError(
            f"out must be a 1-d array of {vec.dim} {vec.dtype} values (the input's dim and "
            f"value dtype), got shape {out.shape} and dtype {out.dtype}")
    if not (out.flags.c_contiguous and out.flags.writeable):
        raise InvalidOutputError("out must be C-contiguous and writeable (pass a fresh "
                                 "np.empty(dim, dtype) or a contiguous copy)")
    if np.shares_memory(out, vec.values) or (vec.indices is not None
                                             and np.shares_memory(out, vec.indices)):
        raise InvalidOutputError("out overlaps the input vector; the input must stay intact "
                                 "while the collective runs, so pass a separate buffer")


def check_stats(stats) -> TrafficStats:
    """``stats`` itself, or a fresh :class:`TrafficStats` for None."""
    if stats is None:
        return TrafficStats()
    if not isinstance(stats, TrafficStats):
        raise InvalidArgumentError(f"stats must be a sparcml.TrafficStats or None, got "
                                   f"{type(stats).__name__}")
    return stats


def quantizer_code(quantizer) -> int:
    """0 for None, else the quantizer's configuration code (a :class:`~sparcml.QSGD`)."""
    from .._quant.qsgd import QSGD

    if quantizer is None:
        return 0
    if not isinstance(quantizer, QSGD):
        raise IncompatibleOptionsError(
            f"quantizer must be a sparcml.QSGD (or None), got {type(quantizer).__name__}")
    return quantizer.code


def check_quantizable(vec: SparseVector) -> None:
    """Raise :class:`QuantizationError` when QSGD could not encode ``vec``'s values (NaN, Inf,
    beyond the float32 range of its scales). One pass over the values."""
    values = vec.values
    if values.size == 0:
        return
    pos = kernels.first_nonfinite(values)
    if pos >= 0:
        raise QuantizationError(
            f"cannot quantize non-finite value {values[pos]} at position {pos}; check the "
            f"input for overflow (NaN/Inf) before a quantized collective")
    if values.dtype == np.float64:
        biggest = float(np.max(np.abs(values)))
        if biggest > _FLOAT32_MAX:
            raise QuantizationError(
                f"value {biggest} is beyond the float32 range of QSGD's scales; rescale the "
                f"values first")


def check_root(root, size: int) -> int:
    """``root`` as an int in ``[0, size)``."""
    if isinstance(root, (bool, np.bool_)) or not isinstance(root, (int, np.integer)):
        raise InvalidArgumentError(f"root must be an integer rank, got {root!r}")
    if not 0 <= int(root) < size:
        raise InvalidArgumentError(f"root {root} is not a rank of a communicator of size "
                                   f"{size}")
    return int(root)


def check_density(density, *, name: str = "density", allow_zero: bool = False) -> float:
    """A fraction in ``(0, 1]`` (``[0, 1]`` with ``allow_zero``); the project's one check."""
    ok = (not isinstance(density, (bool, np.bool_))
          and isinstance(density, (int, float, np.integer, np.floating))
          and (0 <= density <= 1 if allow_zero else 0 < density <= 1))
    if not ok:
        interval = "[0, 1]" if allow_zero else "(0, 1]"
        raise IncompatibleOptionsError(f"{name} must be a number in {interval}, got {density!r}")
    return float(density)
