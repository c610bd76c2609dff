"""Quantizing compressors with their own wire format: signSGD / signum with majority vote,
EF-signSGD, FP16 / BF16 casting; and TernGrad as a preset of :class:`sparcml.QSGD`.

- :class:`SignCompressor` (Bernstein et al. 2018): every rank sends the signs of its input
  (``momentum > 0``: of its local momentum ``m = momentum * m + (1 - momentum) g``: signum),
  1 bit per value, bit-packed (``np.packbits``, little bit order; bit 1 for ``v >= 0``, so
  a zero counts as +1, as in GRACE); one ``Allgather`` of ``ceil(n / 8)`` bytes per rank;
  every rank takes the majority vote ``sign(sum of signs)`` (0 on a tie). The result is
  ``P * vote`` so that the optimizer's average over ranks is the vote itself. No memory.
- :class:`EFSignCompressor` (Karimireddy et al. 2019): a rank sends ``(|g|_1 / n) sign(g)``
  per chunk of values: the bits and the chunks' scales (in ``g``'s dtype) in one
  ``Allgather``; the result is the sum of
  the ranks' scaled signs; the memory (error feedback) keeps ``g - scale sign(g)``. The
  learning rate is applied after the reduction (by the optimizer), not before the
  compression as in the paper: the same for a constant rate.
- :class:`CastCompressor` (``"fp16"`` or ``"bf16"``): the values rounded to 16 bits (round to
  nearest even), summed by an ``MPI_Allreduce`` of 16-bit words with a user-defined operation
  that adds in float32 and rounds each partial sum back to 16 bits (like a 16-bit allreduce on
  a GPU). A sum that overflowed (an Inf or NaN in it: the same on every rank) raises
  :class:`~sparcml.CompressionError` on every rank. No memory by default (PyTorch's hooks
  keep none); with a
  :class:`~sparcml.compression.ResidualMemory` the rounding error is fed back.
- :func:`terngrad` (Wen et al. 2017): ``QSGD(bits=2, norm="max")``: a sign and one level per
  value, 1 with probability ``|v| / max |v|`` per bucket: the ternary ``{-s, 0, s}`` code. It
  is a quantizer, so it composes with any sparsifier through the wire codec (the values of the
  kept entries are quantized once), as QSGD does; the three compressors above own their wire
  format and do not compose with top-k (:class:`~sparcml.compression.Compression` refuses a
  quantizer with them).

Bytes are counted in ``stats`` as :class:`sparcml.TrafficStats` counts MPI collectives.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from .._collectives.algorithms import ALLGATHER_BASELINE
from .._errors import CompressionError
from .._quant.qsgd import QSGD
from .._vector import SparseVector
from ._objects import Compressor, NoneMemory, Reduced, _join, _split

__all__ = ["SignCompressor", "EFSignCompressor", "CastCompressor", "terngrad",
           "pack_signs", "unpack_signs", "to_bf16", "from_bf16"]


def terngrad(bucket_size: int = 1024, seed=None) -> QSGD:
    """TernGrad's ternary quantizer: ``QSGD(2, bucket_size, norm="max")`` (one max per bucket
    of values; TernGrad uses one per layer, which a flat gradient bucket no longer has)."""
    return QSGD(2, bucket_size=bucket_size, norm="max", seed=seed)


def pack_signs(x: np.ndarray) -> np.ndarray:
    """``ceil(len(x) / 8)`` bytes: bit i (little order) is 1 where ``x[i] >= 0``."""
    return np.packbits(x >= 0, bitorder="little")


def unpack_signs(buf: np.ndarray, n: int, dtype) -> np.ndarray:
    """The ``n`` signs (+1 / -1, in ``dtype``) that :func:`pack_signs` packed into ``buf``."""
    bits = np.unpackbits(np.asarray(buf, np.uint8), count=n, bitorder="little")
    return bits.astype(dtype) * 2 - 1


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


def _count(stats, P: int, sent: float, received: float) -> None:
    if stats is not None:
        stats.calls += 1
        if P > 1:
            stats.bytes_sent += int(sent)
            stats.bytes_received += int(received)
            stats.messages += 1


def _allgather(ctx, buf: np.ndarray, stats) -> np.ndarray:
    """``(P, len(buf))`` uint8: every rank's ``buf`` (counted as TrafficStats counts it)."""
    out = np.empty((ctx.size, buf.size), np.uint8)
    if ctx.size == 1:
        out[0] = buf
    else:
        ctx.waiter.collective(ctx.comm, "Allgather", [buf, MPI.BYTE], [out, MPI.BYTE])
    _count(stats, ctx.size, (ctx.size - 1) * buf.size, (ctx.size - 1) * buf.size)
    if stats is not None:
        stats.algorithm = ALLGATHER_BASELINE
    return out


class _Stateless:
    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self._options().items())
        return f"{type(self).__name__}({opts})"

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and other._options() == self._options()

    def __hash__(self) -> int:
        return hash((type(self), tuple(self._options().items())))


class SignCompressor(_Stateless, Compressor):
    """signSGD (``momentum=0``) or signum (``0 < momentum < 1``) with majority vote."""

    def __init__(self, momentum: float = 0.0):
        if isinstance(momentum, (bool, np.bool_)) or not isinstance(
                momentum, (int, float, np.integer, np.floating)) or not 0 <= momentum < 1:
            raise CompressionError(f"momentum must be a number in [0, 1), got {momentum!r}")
        self.momentum = float(momentum)
        self._m: dict = {}

    def _options(self) -> dict:
        return {"momentum": self.momentum}

    def default_memory(self):
        return NoneMemory()

    def compress(self, x: np.ndarray) -> SparseVector:
        return SparseVector.dense(unpack_signs(pack_signs(x), x.shape[0], x.dtype))

    def num_sent(self, n: int) -> int:
        return n

    def reduce_in(self, ctx, g: np.ndarray, key, *, stats=None, check=True) -> Reduced:
        n = g.shape[0]
        s = g
        if self.momentum:
            m = self._m.get(key)
            if m is None:
                m = self._m[key] = np.zeros_like(g)
            m *= np.asarray(self.momentum, g.dtype)
            m += np.asarray(1 - self.momentum, g.dtype) * g
            s = m
        everyone = _allgather(ctx, pack_signs(s), stats)
        votes = np.zeros(n, np.int64)
        for r in range(ctx.size):
            votes += unpack_signs(everyone[r], n, np.int64)
        result = (np.sign(votes) * ctx.size).astype(g.dtype)
        sent = unpack_signs(everyone[ctx.rank], n, g.dtype)
        return Reduced(SparseVector.dense(result), SparseVector.dense(sent), n, 0.0)

    def fresh(self) -> "SignCompressor":
        return SignCompressor(self.momentum)

    def state_dict(self) -> dict:
        """``{"momentum": {key: m}}``: signum's local momentum per key (none for signSGD)."""
        return {"momentum": {k: m.copy() for k, m in self._m.items()}}

    def load_state_dict(self, state: dict) -> None:
        self._m = {k: np.array(m) for k, m in dict(state.get("momentum") or {}).items()}

    def split_state(self, key, sizes) -> list[dict]:
        if not self.momentum:
            return [{"momentum": None} for _ in sizes]  # nothing to move
        return _split(self._m.get(key), sizes, "momentum")

    def join_state(self, key, pieces: list[dict]) -> None:
        joined = None if not self.momentum else _join(pieces, "momentum")
        if joined is None:
            self._m.pop(key, None)
        else:
            self._m[key] = joined


class EFSignCompressor(_Stateless, Compressor):
    """Scaled signs ``(|g|_1 / m) sign(g)`` with error feedback (the default memory), one
    scale per ``chunk`` consecutive values (``m`` of them; None: one scale for the bucket).
    GRACE and the paper scale per tensor; a flat bucket holds many tensors of different
    gradient magnitudes, so the default is a scale per 1024 values (4 bytes more per 1024)."""

    def __init__(self, chunk: int | None = 1024):
        if chunk is not None and (isinstance(chunk, (bool, np.bool_))
                                  or not isinstance(chunk, (int, np.integer)) or chunk < 1):
            raise CompressionError(f"chunk must be None or a number of values >= 1, "
                                   f"got {chunk!r}")
        self.chunk = None if chunk is None else int(chunk)

    def _options(self) -> dict:
        return {"chunk": self.chunk}

    def _chunk(self, n: int) -> int:
        return max(1, n if self.chunk is None else min(self.chunk, n))

    def encode(self, g: np.ndarray) -> np.ndarray:
        """The wire bytes: the packed signs, then ``ceil(n / chunk)`` scales ``|g|_1 / m`` of
        each chunk of m values, in ``g``'s dtype."""
        n = g.shape[0]
        c = self._chunk(n)
        starts = np.arange(0, max(n, 1), c)
        sums = np.add.reduceat(np.abs(g).astype(np.float64), starts) if n else np.zeros(1)
        sizes = np.minimum(starts + c, n) - starts
        scales = (sums / np.maximum(sizes, 1)).astype(g.dtype)
        return np.concatenate([pack_signs(g), scales.view(np.uint8)])

    def decode(self, buf: np.ndarray, n: int, dtype) -> np.ndarray:
        """The scaled signs :meth:`encode` wrote into ``buf``."""
        dtype = np.dtype(dtype)
        c = self._chunk(n)
        nbits = (n + 7) // 8
        scales = np.asarray(buf[nbits:]).view(dtype)
        return unpack_signs(buf[:nbits], n, dtype) * np.repeat(scales, c)[:n]

    def compress(self, x: np.ndarray) -> SparseVector:
        return SparseVector.dense(self.decode(self.encode(x), x.shape[0], x.dtype))

    def num_sent(self, n: int) -> int:
        return n

    def reduce_in(self, ctx, g: np.ndarray, key, *, stats=None, check=True) -> Reduced:
        n = g.shape[0]
        everyone = _allgather(ctx, self.encode(g), stats)
        result = np.zeros(n, g.dtype)
        for r in range(ctx.size):  # the same order on every rank: the same sum
            result += self.decode(everyone[r], n, g.dtype)
        sent = self.decode(everyone[ctx.rank], n, g.dtype)
        return Reduced(SparseVector.dense(result), SparseVector.dense(sent), n, 0.0)


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
