"""``terngrad``: every value ternary ``{-s, 0, s}`` per bucket (Wen et al. 2017).

:func:`terngrad`: ``QSGD(bits=2, norm="max")``: a sign and one level per value, 1 with
probability ``|v| / max |v|`` per bucket: the ternary code. It is a quantizer, so it composes
with any sparsifier through the wire codec (the values of the kept entries are quantized once),
as QSGD does; the named compressor is :class:`~sparcml.compression.NoneCompressor` with it (the
default cost: the sparse allreduce of n quantized values).
"""

from __future__ import annotations

from ..._quant.qsgd import QSGD
from .._objects import Compression, NoneCompressor
from .._registry import CompressorSpec, memory_of, register_compressor


def terngrad(bucket_size: int = 1024, seed=None) -> QSGD:
    """TernGrad's ternary quantizer: ``QSGD(2, bucket_size, norm="max")`` (one max per bucket
    of values; TernGrad uses one per layer, which a flat gradient bucket no longer has)."""
    return QSGD(2, bucket_size=bucket_size, norm="max", seed=seed)


def build(*, algorithm, error_feedback):
    return Compression(NoneCompressor(), terngrad(), memory_of(error_feedback), algorithm)


SPEC = register_compressor(CompressorSpec(
    name="terngrad", order=70, build=build,
    summary="all values, ternary {-s, 0, s} per bucket (QSGD 2 bits, max norm)"))
