"""``qsgd``: every value, QSGD-quantized to ``--bits`` (Alistarh et al. 2017), sparse allreduce.

The class: :class:`sparcml.compression.NoneCompressor` with a :class:`sparcml.QSGD` quantizer;
its cost the default (the sparse allreduce of n quantized values).
"""

from __future__ import annotations

from ..._quant.qsgd import QSGD
from .._objects import Compression, NoneCompressor
from .._registry import BITS, CompressorSpec, memory_of, register_compressor


def build(*, bits, algorithm, error_feedback):
    return Compression(NoneCompressor(), QSGD(bits or 4), memory_of(error_feedback), algorithm)


SPEC = register_compressor(CompressorSpec(
    name="qsgd", order=60, build=build, params=(BITS,),
    summary="all values, QSGD-quantized to --bits (4 where --bits is 0, the apps' "
            "default: qsgd has no full precision), through the sparse allreduce"))
