"""``efsignsgd``: scaled signs with error feedback (Karimireddy et al. 2019, EF-signSGD).

:class:`EFSignCompressor`: a rank sends ``(|g|_1 / n) sign(g)`` per chunk of values: the bits
and the chunks' scales (in ``g``'s dtype) in one ``Allgather`` (its cost); the result is the
sum of the ranks' scaled signs; the memory (error feedback) keeps ``g - scale sign(g)``. The
learning rate is applied after the reduction (by the optimizer), not before the compression as
in the paper: the same for a constant rate.
"""

from __future__ import annotations

import math
import numpy as np

from ..._errors import CompressionError
from ..._vector import SparseVector
from .._common import _Stateless, _allgather, pack_signs, unpack_signs
from .._objects import Compression, Compressor, Reduced, ResidualMemory
from .._registry import CompressorSpec, register_compressor


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

    def predicted_seconds(self, model, *, P, n, sent, itemsize, quantizer, algorithm,
                          shapes=None) -> float:
        """An ``Allgather`` of ``ceil(n / 8)`` bytes and a scale per rank."""
        return model.allgather(P * (math.ceil(n / 8) + itemsize))

    def reduce_in(self, ctx, g: np.ndarray, key, *, stats=None, check=True) -> Reduced:
        n = g.shape[0]
        everyone = _allgather(ctx, self.encode(g), stats)
        result = np.zeros(n, g.dtype)
        for r in range(ctx.size):  # the same order on every rank: the same sum
            result += self.decode(everyone[r], n, g.dtype)
        sent = self.decode(everyone[ctx.rank], n, g.dtype)
        return Reduced(SparseVector.dense(result), SparseVector.dense(sent), n, 0.0)


def build(*, algorithm, error_feedback):
    return Compression(EFSignCompressor(), None, ResidualMemory(), algorithm)


SPEC = register_compressor(CompressorSpec(
    name="efsignsgd", order=100, build=build,
    summary="scaled signs |g|_1/n sign(g), 1 bit per value + one scale, error feedback"))
