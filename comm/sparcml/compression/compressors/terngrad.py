"""``terngrad``: every value ternary ``{-s, 0, s}`` per layer (Wen et al. 2017, TernGrad).

:class:`TernGradCompressor`, as the paper defines it: per tensor (layer) of the bucket (the
optimizer and the DDP hook pass the bucket's parameter ``shapes``; without them, the whole
array as one), the gradient is clipped to ``[-c sigma, c sigma]`` (``sigma`` its standard
deviation, ``c = 2.5``: the paper's gradient clipping), the scaler is ``s = max |clipped|`` of
the tensor, and each value becomes ``s sign(g) b`` with ``b`` a Bernoulli draw of probability
``|g| / s`` (unbiased for the clipped gradient), from a stream seeded by ``(seed, key, step,
rank)``. The wire: two bits per value (:func:`~sparcml.compression.pack_ternary`) and one scaler
per tensor, in one ``Allgather`` (its cost); the result is the sum of the ranks' ternary
tensors. :func:`terngrad` is the older quantizer form (``QSGD(2, norm="max")`` per 1,024
values, no clipping), which composes with the sparsifiers.
"""

from __future__ import annotations

import math
import numpy as np

from ..._errors import CompressionError
from ..._quant.qsgd import QSGD
from ..._vector import SparseVector
from .._common import (_Steps, _allgather, _segments, key_seed, pack_ternary,
                       unpack_ternary)
from .._objects import Compression, Compressor, Reduced, _EqualByRepr
from .._registry import SEED, CompressorSpec, memory_of, register_compressor


def terngrad(bucket_size: int = 1024, seed=None) -> QSGD:
    """A ternary quantizer per bucket of values: ``QSGD(2, bucket_size, norm="max")`` (one max
    per bucket, no clipping; the ``terngrad`` compressor is :class:`TernGradCompressor`, per
    layer with the paper's clipping)."""
    return QSGD(2, bucket_size=bucket_size, norm="max", seed=seed)


class TernGradCompressor(_EqualByRepr, _Steps, Compressor):
    """TernGrad per tensor: clip at ``clip_sigmas`` standard deviations (None: no clipping),
    scaler ``max |g|`` of the tensor, stochastic ternary values (see the module docstring)."""

    takes_shapes = True

    def __init__(self, *, clip_sigmas: float | None = 2.5, seed: int = 0):
        if clip_sigmas is not None and (isinstance(clip_sigmas, (bool, np.bool_)) or not
                                        isinstance(clip_sigmas, (int, float)) or
                                        not 0 < clip_sigmas < math.inf):
            raise CompressionError(f"clip_sigmas must be None or a number > 0, got "
                                   f"{clip_sigmas!r}")
        if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) \
                or seed < 0:
            raise CompressionError(f"seed must be an integer >= 0, got {seed!r}")
        self.clip_sigmas = None if clip_sigmas is None else float(clip_sigmas)
        self.seed = int(seed)

    def num_sent(self, n: int) -> int:
        return n

    def ternarize(self, g: np.ndarray, rng: np.random.Generator, shapes=None):
        """``(t, scales)``: the ternary values (-1, 0, +1, in ``g``'s dtype) and the scaler of
        each tensor (sizes > 0, in order), for the draws of ``rng``."""
        sizes = _segments(g.shape[0], shapes)
        t = np.zeros(g.shape[0], g.dtype)
        scales = np.zeros(sizes.size, g.dtype)
        u = rng.random(g.shape[0])
        at = 0
        for i, size in enumerate(sizes):
            x = g[at:at + size].astype(np.float64)
            if self.clip_sigmas is not None:
                c = self.clip_sigmas * float(np.std(x))
                x = np.clip(x, -c, c)
            s = float(np.abs(x).max())
            if s > 0:
                keep = u[at:at + size] < np.abs(x) / s
                t[at:at + size] = np.sign(x) * keep
            scales[i] = s
            at += size
        return t, scales

    def _rng(self, key, step: int, rank: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, key_seed(key), step, rank + 1])

    def encode(self, g: np.ndarray, rng, shapes=None) -> np.ndarray:
        """The wire bytes: the packed ternary values, then the tensors' scalers (``g``'s
        dtype)."""
        t, scales = self.ternarize(g, rng, shapes)
        return np.concatenate([pack_ternary(t), scales.view(np.uint8)])

    def decode(self, buf: np.ndarray, n: int, dtype, shapes=None) -> np.ndarray:
        """The values ``s t`` that :meth:`encode` wrote into ``buf``."""
        dtype = np.dtype(dtype)
        nbits = 2 * ((n + 7) // 8)
        scales = np.asarray(buf[nbits:]).view(dtype)
        return unpack_ternary(buf[:nbits], n, dtype) * np.repeat(scales, _segments(n, shapes))

    def compress(self, x: np.ndarray, shapes=None) -> SparseVector:
        raise CompressionError("TernGradCompressor draws per key and step: use it through "
                               "Compression (reduce_in)")

    def predicted_seconds(self, model, *, P, n, sent, itemsize, quantizer, algorithm,
                          shapes=None) -> float:
        """An ``Allgather`` of ``2 ceil(n / 8)`` bytes and the scalers per rank."""
        return model.allgather(P * (2 * math.ceil(n / 8) + _segments(n, shapes).size
                                    * itemsize))

    def reduce_in(self, ctx, g: np.ndarray, key, *, stats=None, check=True,
                  shapes=None) -> Reduced:
        n = g.shape[0]
        rng = self._rng(key, self._next_step(key), ctx.rank)
        everyone = _allgather(ctx, self.encode(g, rng, shapes), stats)
        result = np.zeros(n, g.dtype)
        for r in range(ctx.size):  # the same order on every rank: the same sum
            result += self.decode(everyone[r], n, g.dtype, shapes)
        sent = self.decode(everyone[ctx.rank], n, g.dtype, shapes)
        return Reduced(SparseVector.dense(result), SparseVector.dense(sent), n, 0.0)

    def fresh(self) -> "TernGradCompressor":
        return TernGradCompressor(clip_sigmas=self.clip_sigmas, seed=self.seed)

    def __repr__(self) -> str:
        return f"TernGradCompressor(clip_sigmas={self.clip_sigmas}, seed={self.seed})"


def build(*, seed, algorithm, error_feedback):
    return Compression(TernGradCompressor(seed=seed), None, memory_of(error_feedback),
                       algorithm)


SPEC = register_compressor(CompressorSpec(
    name="terngrad", order=70, build=build, params=(SEED,),
    recommended={"source": "Wen et al. 2017: the dense run's SGD (learning rate, momentum)"},
    summary="TernGrad: per layer, clipped at 2.5 sigma, ternary {-s, 0, s} with the layer's "
            "max as s, stochastic (2 bits per value + one scaler per layer), allgather"))
