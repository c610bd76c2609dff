"""``efsignsgd``: scaled signs with error feedback (Karimireddy et al. 2019, EF-signSGD).

The paper's compressor is ``C(p) = (|p|_1 / d) sign(p)`` of each tensor ``p`` (d values), with
error feedback ``e = p - C(p)`` (Algorithm 1; no momentum). :class:`EFSignCompressor` does that
per tensor of a bucket (the optimizer and the DDP hook pass the bucket's parameter ``shapes``;
without them: the bucket as one tensor, or one scale per ``chunk`` values when asked), with
``sign(0) = 0``: a zero entry sends nothing, so the wire carries two bits per value (the bits of
``p > 0`` and of ``p < 0``, :func:`~sparcml.compression.pack_ternary`) and the tensors' scales
(in ``g``'s dtype) in one ``Allgather`` (its cost). A 1-bit code would have to send a zero as
``+scale``: a third of a small CNN's batch gradient is exactly 0 (dead ReLUs, unused inputs),
and those entries would each receive the scale every step, fed back by the memory the step
after. The result is the sum of the ranks' scaled signs. The learning rate is applied after the
reduction (by the optimizer), not before the compression as in the paper: the same for a
constant rate. Recommended: no SGD momentum (the paper's algorithm has none) and 10 times the
dense learning rate (measured, issue 35: the paper tunes its rate per task; the scaled sign is
smaller than the gradient by about ``|p|_1 / (sqrt(d) |p|_2)``).
"""

from __future__ import annotations

import math
import numpy as np

from ..._errors import CompressionError
from ..._vector import SparseVector
from .._common import (_Stateless, _allgather, _segment_l1_means, _segments, pack_ternary,
                       unpack_ternary)
from .._objects import Compression, Compressor, Reduced, ResidualMemory
from .._registry import CompressorSpec, register_compressor


class EFSignCompressor(_Stateless, Compressor):
    """Scaled signs ``(|p|_1 / m) sign(p)`` (``sign(0) = 0``) with error feedback (the default
    memory), one scale per tensor of the bucket's ``shapes`` (the paper's), or with ``chunk``
    one per ``chunk`` consecutive values; without either, one for the whole array."""

    takes_shapes = True

    def __init__(self, chunk: int | None = None):
        if chunk is not None and (isinstance(chunk, (bool, np.bool_))
                                  or not isinstance(chunk, (int, np.integer)) or chunk < 1):
            raise CompressionError(f"chunk must be None or a number of values >= 1, "
                                   f"got {chunk!r}")
        self.chunk = None if chunk is None else int(chunk)

    def _options(self) -> dict:
        return {"chunk": self.chunk}

    def _sizes(self, n: int, shapes) -> np.ndarray:
        return _segments(n, None if self.chunk is not None else shapes, self.chunk)

    def encode(self, g: np.ndarray, shapes=None) -> np.ndarray:
        """The wire bytes: :func:`~sparcml.compression.pack_ternary` of ``g`` (2 ``ceil(n /
        8)`` bytes), then the scale ``|p|_1 / m`` of each segment (tensor or chunk) of m
        values, in ``g``'s dtype."""
        scales = _segment_l1_means(g, self._sizes(g.shape[0], shapes)).astype(g.dtype)
        return np.concatenate([pack_ternary(g), scales.view(np.uint8)])

    def decode(self, buf: np.ndarray, n: int, dtype, shapes=None) -> np.ndarray:
        """The scaled signs :meth:`encode` wrote into ``buf``."""
        dtype = np.dtype(dtype)
        sizes = self._sizes(n, shapes)
        nbits = 2 * ((n + 7) // 8)
        scales = np.asarray(buf[nbits:]).view(dtype)
        return unpack_ternary(buf[:nbits], n, dtype) * np.repeat(scales, sizes)

    def compress(self, x: np.ndarray) -> SparseVector:
        return SparseVector.dense(self.decode(self.encode(x), x.shape[0], x.dtype))

    def num_sent(self, n: int) -> int:
        return n

    def predicted_seconds(self, model, *, P, n, sent, itemsize, quantizer, algorithm,
                          shapes=None) -> float:
        """An ``Allgather`` of ``2 ceil(n / 8)`` bytes and the scales per rank."""
        scales = self._sizes(n, shapes).size
        return model.allgather(P * (2 * math.ceil(n / 8) + scales * itemsize))

    def reduce_in(self, ctx, g: np.ndarray, key, *, stats=None, check=True,
                  shapes=None) -> Reduced:
        n = g.shape[0]
        everyone = _allgather(ctx, self.encode(g, shapes), stats)
        result = np.zeros(n, g.dtype)
        for r in range(ctx.size):  # the same order on every rank: the same sum
            result += self.decode(everyone[r], n, g.dtype, shapes)
        sent = self.decode(everyone[ctx.rank], n, g.dtype, shapes)
        return Reduced(SparseVector.dense(result), SparseVector.dense(sent), n, 0.0)


def build(*, algorithm, error_feedback):
    return Compression(EFSignCompressor(), None, ResidualMemory(), algorithm)


SPEC = register_compressor(CompressorSpec(
    name="efsignsgd", order=100, build=build,
    recommended={"lr_scale": 10.0, "momentum": 0.0,
                 "source": "Karimireddy et al. 2019, Algorithm 1: no momentum; the 10x "
                           "learning rate measured in issue 35 (CNN lr 1.0, LSTM 3.0)"},
    labels=(("lr", lambda lr: f"lr {lr:g}"),
            ("momentum", lambda m: f"SGD momentum {m:g}" if m else None)),
    summary="EF-signSGD: per tensor |p|_1/d sign(p) with sign(0) = 0 (2 bits per value + one "
            "scale per tensor), error feedback, no momentum"))
