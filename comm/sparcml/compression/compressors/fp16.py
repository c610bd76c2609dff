"""``fp16``: the values as IEEE half floats, a 16-bit allreduce (and ``bf16``'s class).

:class:`CastCompressor` (``"fp16"`` or ``"bf16"``): the values rounded to 16 bits (round to
nearest even), summed by an ``MPI_Allreduce`` of 16-bit words with a user-defined operation
that adds in float32 and rounds each partial sum back to 16 bits (like a 16-bit allreduce on a
GPU); its cost: a dense allreduce of 2 bytes per value. A sum that overflowed (an Inf or NaN in
it: the same on every rank) raises :class:`~sparcml.CompressionError` on every rank. No memory
by default (PyTorch's hooks keep none); with a :class:`~sparcml.compression.ResidualMemory` the
rounding error is fed back.
:func:`to_bf16` and :func:`from_bf16` convert bfloat16 words.
"""

from __future__ import annotations

import numpy as np

from mpi4py import MPI

from ..._errors import CompressionError
from ..._vector import SparseVector
from .._common import _Stateless, _count
from .._objects import Compression, Compressor, NoneMemory, Reduced
from .._registry import CompressorSpec, memory_of, register_compressor


def to_bf16(x: np.ndarray) -> np.ndarray:
    """bfloat16 words (uint16) of float32 ``x``, rounded to nearest even (NaN stays NaN)."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(x, np.float32))
    if nan.any():
        rounded[nan] = 0x7FC0
    return rounded


def from_bf16(words: np.ndarray) -> np.ndarray:
    """float32 values of bfloat16 ``words`` (exact)."""
    return (np.asarray(words, np.uint16).astype(np.uint32) << 16).view(np.float32)


_OPS: dict = {}


def _sum_op(fmt: str):
    """The MPI operation adding two arrays of 16-bit words in float32 and rounding back."""
    if fmt not in _OPS:
        if fmt == "fp16":
            def add(inbuf, inoutbuf, datatype):
                a = np.frombuffer(inbuf, np.float16)
                b = np.frombuffer(inoutbuf, np.float16)
                b[:] = (a.astype(np.float32) + b.astype(np.float32)).astype(np.float16)
        else:
            def add(inbuf, inoutbuf, datatype):
                a = np.frombuffer(inbuf, np.uint16)
                b = np.frombuffer(inoutbuf, np.uint16)
                b[:] = to_bf16(from_bf16(a) + from_bf16(b))
        _OPS[fmt] = MPI.Op.Create(add, commute=True)
    return _OPS[fmt]


class CastCompressor(_Stateless, Compressor):
    """The values as 16-bit floats, ``fmt="fp16"`` (IEEE half) or ``"bf16"`` (bfloat16)."""

    def __init__(self, fmt: str = "fp16"):
        if fmt not in ("fp16", "bf16"):
            raise CompressionError(f"fmt must be 'fp16' or 'bf16', got {fmt!r}")
        self.fmt = fmt

    def _options(self) -> dict:
        return {"fmt": self.fmt}

    def default_memory(self):
        return NoneMemory()

    def encode(self, x: np.ndarray) -> np.ndarray:
        """16-bit words (uint16) of ``x``."""
        if self.fmt == "fp16":
            with np.errstate(over="ignore"):  # an overflow is Inf: the sum reports it
                return np.asarray(x).astype(np.float16).view(np.uint16)
        return to_bf16(np.asarray(x, np.float32))

    def decode(self, words: np.ndarray, dtype) -> np.ndarray:
        """The values of ``words``, in ``dtype``."""
        if self.fmt == "fp16":
            return np.asarray(words, np.uint16).view(np.float16).astype(dtype)
        return from_bf16(words).astype(dtype)

    def compress(self, x: np.ndarray) -> SparseVector:
        return SparseVector.dense(self.decode(self.encode(x), x.dtype))

    def num_sent(self, n: int) -> int:
        return n

    def predicted_seconds(self, model, *, P, n, sent, itemsize, quantizer, algorithm,
                          shapes=None) -> float:
        """A dense allreduce of ``2 n`` bytes (16 bits per value)."""
        return model.allreduce(2 * n)

    def reduce_in(self, ctx, g: np.ndarray, key, *, stats=None, check=True) -> Reduced:
        words = self.encode(g)
        sent = self.decode(words, g.dtype)
        total = words.copy()
        P = ctx.size
        if P > 1:
            ctx.waiter.collective(ctx.comm, "Allreduce", MPI.IN_PLACE, [total, MPI.UINT16_T],
                                  _sum_op(self.fmt))
        nbytes = words.nbytes
        _count(stats, P, 2 * (P - 1) / P * nbytes, 2 * (P - 1) / P * nbytes)
        if stats is not None:
            stats.algorithm = "allreduce16"
        result = self.decode(total, g.dtype)
        if result.size and not (np.isfinite(result.min()) and np.isfinite(result.max())):
            # the same sum on every rank, so every rank raises alike (and the memory stays)
            top = "65504" if self.fmt == "fp16" else "3.4e38"
            raise CompressionError(
                f"the {self.fmt} sum overflowed (a value or partial sum beyond {top}, or a "
                f"NaN/Inf input on some rank); scale the gradients down (a loss scaler) or use "
                f"bf16")
        return Reduced(SparseVector.dense(result), SparseVector.dense(sent), g.shape[0], 0.0)


def build(*, algorithm, error_feedback):
    return Compression(CastCompressor("fp16"), None, memory_of(error_feedback), algorithm)


SPEC = register_compressor(CompressorSpec(
    name="fp16", order=110, build=build,
    recommended={"source": "lossless up to rounding: the dense run's SGD"},
    summary="values as IEEE half floats, 16-bit allreduce"))
